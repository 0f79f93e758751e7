"""A loaded model's weights live in one file of the weights cache; its proto, its submodels and
the skeleton the measuring worker opens refer to them as ONNX external data instead of
copying them. Entries are written once, atomically, reused by later loads, kept while in use,
and evicted or removed deterministically."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tessera.errors import ModelError
from tessera.ir import _weights as weights_module
from tessera.ir import extract_submodel, inline_weights, load_model, load_skeleton
from tessera.ir._external import FILE, METADATA_KEY, directory_of, reference
from tessera.ir._weights import evict

from .models import diamond, mlp


def _values(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _entries(root: Path) -> list[str]:
    folder = root / "weights"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE", str(root))
    return root


def test_large_weights_move_to_one_file_and_small_ones_stay(cache: Path) -> None:
    proto = mlp(hidden=64)  # w1: 2 KiB and w2: 1 KiB move; the biases (256 B, 16 B) stay
    model = load_model(proto)
    assert model.weights is not None and model.weights.directory.parent == cache / "weights"
    where = {t.name: reference(t) for t in model.proto.graph.initializer}
    assert where["w1"] is not None and where["w2"] is not None
    assert where["b1"] is None and where["b2"] is None
    assert directory_of(model.proto) == model.weights.directory
    assert model.proto.ByteSize() < sum(t.ByteSize() for t in proto.graph.initializer)
    for name, value in _values(proto).items():
        tensor = model.dataflow.initializers[name]
        np.testing.assert_array_equal(model.weights.array(tensor), value)
    offsets = [spot[0] for spot in where.values() if spot is not None]
    assert all(offset % 64 == 0 for offset in offsets)


def test_a_model_without_large_weights_has_no_weights_file(cache: Path) -> None:
    model = load_model(diamond())
    assert model.weights is None and model.skeleton_file is None
    assert directory_of(model.proto) is None and _entries(cache) == []


def test_a_submodel_refers_to_the_weights_instead_of_copying_them(cache: Path) -> None:
    proto = mlp(hidden=256)
    model = load_model(proto)
    assert model.weights is not None
    sub = extract_submodel(model, model.node_set(["mm1", "add1", "relu"]))
    (w1,) = [t for t in sub.graph.initializer if t.name == "w1"]
    assert reference(w1) is not None and not w1.raw_data
    assert directory_of(sub) == model.weights.directory
    assert sub.ByteSize() < 2048 < w1_bytes(proto)  # references, not 8 KiB of weights
    full = inline_weights(sub)
    assert directory_of(full) is None
    np.testing.assert_array_equal(_values(full)["w1"], _values(proto)["w1"])
    # a standalone model: what ONNX's own evaluator computes from the original
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    expected = np.maximum(x @ _values(proto)["w1"] + _values(proto)["b1"], 0)
    (got,) = ReferenceEvaluator(full).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def w1_bytes(proto: onnx.ModelProto) -> int:
    return len(next(t for t in proto.graph.initializer if t.name == "w1").raw_data)


def test_a_second_load_reuses_the_entry_and_writes_nothing(cache: Path, tmp_path: Path
                                                           ) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(hidden=64), path)
    first = load_model(path)
    assert first.weights is not None
    stat = first.weights.path.stat()
    second = load_model(path)
    assert second.weights is not None and second.weights.directory == first.weights.directory
    again = second.weights.path.stat()
    assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert first.content_digest == second.content_digest
    # a loaded model's proto loads again onto the same entry
    third = load_model(first.proto)
    assert third.weights is not None and third.weights.directory == first.weights.directory
    assert _entries(cache) == [first.weights.directory.name]


def _save_external(proto: onnx.ModelProto, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # saving moves the tensors of the proto it is given
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.data", size_threshold=0)
    return path


def test_external_data_is_read_in_place_and_its_content_names_the_entry(
        cache: Path, tmp_path: Path) -> None:
    proto = mlp(hidden=64)
    path = _save_external(proto, tmp_path / "user")
    data = tmp_path / "user" / "model.data"
    before = data.read_bytes()
    model = load_model(path)
    assert model.weights is not None
    assert data.read_bytes() == before  # the user's files are only read
    full = inline_weights(model.proto)
    for name, value in _values(proto).items():
        np.testing.assert_array_equal(_values(full)[name], value)
    # small weights saved as external data come into the proto
    assert reference(model.dataflow.initializers["b1"]) is None
    # other weights in the same file: another model, another entry
    changed = mlp(seed=5, hidden=64)
    _save_external(changed, tmp_path / "user")
    reloaded = load_model(path)
    assert reloaded.weights is not None
    assert reloaded.weights.directory != model.weights.directory
    assert reloaded.content_digest != model.content_digest
    np.testing.assert_array_equal(
        reloaded.weights.array(reloaded.dataflow.initializers["w1"]), _values(changed)["w1"])


def test_a_write_that_fails_leaves_no_entry_behind(cache: Path, tmp_path: Path) -> None:
    proto = mlp(hidden=64)
    path = _save_external(proto, tmp_path / "user")
    loaded = onnx.load(str(path), load_external_data=False)
    data = tmp_path / "user" / "model.data"
    data.write_bytes(data.read_bytes()[:1500])  # w1 (2 KiB, first in the file) is cut short
    with pytest.raises(ModelError, match="ends before"):
        weights_module.store(loaded, tmp_path / "user", "cut")
    assert _entries(cache) == []  # neither the entry nor its unfinished directory
    # through load_model, the size check refuses the model before anything is written
    with pytest.raises(ModelError, match="w1"):
        load_model(path)
    assert _entries(cache) == []


def test_raw_data_that_its_shape_does_not_fit_is_refused_and_leaves_nothing(cache: Path
                                                                             ) -> None:
    """A weight's length comes from its type and shape (reading the bytes to count them
    copies them); where its bytes disagree, the model is refused when they are copied."""
    proto = mlp(hidden=64)
    w1 = next(t for t in proto.graph.initializer if t.name == "w1")
    w1.raw_data = numpy_helper.to_array(w1).tobytes()[:-4]  # one float short of its shape
    with pytest.raises(ModelError, match=r"'w1' holds 2044 bytes .* need 2048"):
        weights_module.store(proto, None, None)
    assert _entries(cache) == []


def test_skeleton_files_and_entry_locks_go_with_their_model(cache: Path) -> None:
    model = load_model(mlp(hidden=64))
    assert model.weights is not None
    path = model.skeleton_file
    assert path is not None and path.parent == model.weights.directory and path.is_file()
    opened = load_skeleton(path)  # as the measuring worker opens it
    mask = model.node_set(["mm2", "add2"])
    assert extract_submodel(opened, mask).SerializeToString() == \
        extract_submodel(model, mask).SerializeToString()
    entry = model.weights.directory
    del model, opened
    gc.collect()
    assert not path.exists()
    assert evict(cache / "weights", 0) == [entry.name]  # no longer held: it may go


def test_eviction_passes_over_entries_in_use_and_removes_the_oldest_first(cache: Path
                                                                         ) -> None:
    models = [load_model(mlp(seed=s, hidden=64)) for s in range(3)]
    entries = [m.weights.directory for m in models if m.weights is not None]
    for age, entry in enumerate(entries):  # the first is the least recently used
        os.utime(entry / "lock", (1000.0 + age, 1000.0 + age))
    dead = cache / "weights" / f".{entries[0].name}.999999999.abc"  # a writer that died
    dead.mkdir()
    held = models[0]
    del models
    gc.collect()
    size = entries[0].joinpath(FILE).stat().st_size
    removed = evict(cache / "weights", size)  # room for one entry
    assert removed == [dead.name, entries[1].name, entries[2].name]
    assert entries[0].is_dir() and held.weights is not None  # in use: kept, though oldest


def test_without_a_writable_cache_a_temporary_directory_stands_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    monkeypatch.setenv("TESSERA_CACHE", str(blocker / "cache"))
    model = load_model(mlp(hidden=64))
    assert model.weights is not None
    folder = model.weights.directory
    assert folder.is_dir() and not folder.is_relative_to(tmp_path)
    np.testing.assert_array_equal(
        model.weights.array(model.dataflow.initializers["w1"]), _values(mlp(hidden=64))["w1"])
    del model
    gc.collect()
    assert not folder.exists()


def test_a_full_disk_is_a_model_error_that_says_where_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    monkeypatch.setenv("TESSERA_CACHE", str(blocker / "cache"))  # no cache: the temporary
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temporary))
    writes = weights_module._write

    def full(directory: Path, *args: object) -> None:
        writes(directory, *args)  # type: ignore[arg-type]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights_module, "_write", full)
    with pytest.raises(ModelError, match=r"could not be written to the weights cache nor to "
                                         r".*No space left on device.*TESSERA_CACHE"):
        load_model(mlp(hidden=64))
    assert list(temporary.iterdir()) == []  # the half-written copy is gone


_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int64, np.uint16]


@settings(max_examples=25, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1,
                       max_size=4),
       kinds=st.lists(st.sampled_from(_DTYPES), min_size=4, max_size=4),
       typed=st.booleans())
def test_any_weights_round_trip_through_the_file(shapes: list[tuple[int, int]],
                                                 kinds: list[type], typed: bool) -> None:
    rng = np.random.default_rng(0)
    tensors, nodes = [], []
    for i, shape in enumerate(shapes):
        value = (rng.standard_normal(shape) * 50).astype(kinds[i])
        tensor = numpy_helper.from_array(value, f"w{i}")
        if typed and value.dtype == np.float32:  # float_data, not raw_data
            tensor = helper.make_tensor(f"w{i}", TensorProto.FLOAT, shape, value.ravel())
        tensors.append(tensor)
        nodes.append(helper.make_node("Add", [f"x{i}", f"w{i}"], [f"y{i}"], name=f"n{i}"))
    inputs = [helper.make_tensor_value_info(f"x{i}", t.data_type, list(t.dims))
              for i, t in enumerate(tensors)]
    outputs = [helper.make_tensor_value_info(f"y{i}", t.data_type, list(t.dims))
               for i, t in enumerate(tensors)]
    proto = helper.make_model(helper.make_graph(nodes, "weights", inputs, outputs, tensors),
                              opset_imports=[helper.make_opsetid("", 17)])
    model = load_model(proto)
    full = inline_weights(model.proto)
    for tensor in tensors:
        expected = numpy_helper.to_array(tensor)
        np.testing.assert_array_equal(_values(full)[tensor.name], expected)
        if model.weights is not None:
            np.testing.assert_array_equal(
                model.weights.array(model.dataflow.initializers[tensor.name]), expected)
    assert all(p.key != METADATA_KEY for p in full.metadata_props)
