"""Samples: the user's inputs from .npz files, a directory or Python dicts, checked against
the model's inputs; a deterministic, disjoint split; a digest of the contents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from tessera.errors import InputError
from tessera.ir import Model, Samples, load_model

from .models import mlp


def _mlp() -> Model:
    return load_model(mlp().SerializeToString())


def _dynamic() -> Model:
    """y = a + b with a symbolic batch 'n' shared by both inputs."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")], "add",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return load_model(model.SerializeToString(), require_static=False)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 8)).astype(np.float32)


def test_a_directory_gives_one_sample_per_npz_in_name_order(tmp_path: Path) -> None:
    for name, seed in (("b.npz", 1), ("a.npz", 0), ("c.npz", 2)):
        np.savez(tmp_path / name, x=_x(seed))
    (tmp_path / "notes.txt").write_text("not a sample")
    samples = Samples.load(tmp_path, _mlp())
    assert samples.labels == ["a.npz", "b.npz", "c.npz"]
    assert [s["x"].tolist() for s in samples] == [_x(i).tolist() for i in range(3)]


def test_one_npz_is_one_sample(tmp_path: Path) -> None:
    np.savez(tmp_path / "one.npz", x=_x(5))
    samples = Samples.load(str(tmp_path / "one.npz"), _mlp())
    assert len(samples) == 1 and np.array_equal(next(iter(samples))["x"], _x(5))


def test_dicts_and_one_dict() -> None:
    model = _mlp()
    assert len(Samples.load(({"x": _x(i)} for i in range(3)), model)) == 3
    assert Samples.load({"x": _x(0)}, model).labels == ["sample 0"]


@pytest.mark.parametrize(("sample", "words"), [
    ({"x": _x(0).astype(np.float64)}, ["sample 1", "'x'", "dtype float64", "float32"]),
    ({"x": _x(0)[:1]}, ["sample 1", "'x'", "dimension 0 is 1"]),
    ({"x": _x(0)[None]}, ["sample 1", "'x'", "rank 3"]),
    ({"y": _x(0)}, ["sample 1", "missing ['x']", "unexpected ['y']"]),
])
def test_a_bad_sample_names_the_sample_the_input_and_the_problem(
        sample: dict[str, np.ndarray], words: list[str]) -> None:
    with pytest.raises(InputError) as caught:
        Samples.load([{"x": _x(0)}, sample], _mlp())
    for word in words:
        assert word in str(caught.value)


def test_a_symbolic_dimension_has_one_size_within_a_sample() -> None:
    model = _dynamic()
    ok = Samples.load([{"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)},
                       {"a": np.ones((5, 3), np.float32), "b": np.ones((5, 3), np.float32)}],
                      model)
    assert len(ok) == 2  # the batch may change between samples
    with pytest.raises(InputError, match=r"sample 0, input 'b': dimension 0 \('n'\) is 4, "
                                         r"but 'n' is 2 in input 'a'"):
        Samples.load([{"a": np.ones((2, 3), np.float32), "b": np.ones((4, 3), np.float32)}],
                     model)


def test_a_bad_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"sample broken\.npz: cannot read it as \.npz"):
        Samples.load(tmp_path, _mlp())
    with pytest.raises(InputError, match=r"holds no \.npz file"):
        Samples.load(_empty(tmp_path), _mlp())
    with pytest.raises(InputError, match="none given"):
        Samples.load([], _mlp())


def _empty(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


@pytest.mark.parametrize("count", [1, 2, 3, 6, 7])
def test_the_split_is_disjoint_alternating_and_covers_every_sample(count: int) -> None:
    samples = Samples.load([{"x": _x(i)} for i in range(count)], _mlp())
    calibration, validation = samples.split()
    if count == 1:
        assert calibration.labels == validation.labels == ["sample 0"]
        return
    assert calibration.labels == [f"sample {i}" for i in range(0, count, 2)]
    assert validation.labels == [f"sample {i}" for i in range(1, count, 2)]
    assert sorted(calibration.labels + validation.labels) == sorted(samples.labels)
    assert samples.split() == (calibration, validation)  # deterministic


def test_the_digest_follows_the_contents() -> None:
    model = _mlp()
    one = Samples.load([{"x": _x(0)}, {"x": _x(1)}], model)
    same = Samples.load([{"x": _x(0).copy()}, {"x": _x(1)}], model)
    changed = _x(1)
    changed[0, 0] += 1.0
    other = Samples.load([{"x": _x(0)}, {"x": changed}], model)
    swapped = Samples.load([{"x": _x(1)}, {"x": _x(0)}], model)
    assert one.digest == same.digest
    assert len({one.digest, other.digest, swapped.digest}) == 3
