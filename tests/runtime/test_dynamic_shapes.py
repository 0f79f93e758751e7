"""Models with symbolic dimensions: compiled once, run at every shape the model and the shape
profile allow (matching the reference), refused with an InputError naming the dimension where
a shape is inconsistent or outside the profile's range; the profile checked against the model
when compiling; artifacts that keep both."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import backends, zoo
from tessera.config._shapes import ShapeProfile
from tessera.errors import ConfigError, InputError, ModelError
from tessera.runtime import CompiledModel

from ..ir.models import cache, reshape_to_constant, table, two_inputs

pytestmark = pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                                reason="needs onnxruntime")

POSITIONS = 320  # the encoder's positional table: the longest sequence it runs


def reference(model: Path | onnx.ModelProto, feeds: dict[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    return backends.get("reference").compile(proto, check=False).run(feeds)


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-4)


def ids(batch: int, sequence: int, seed: int = 0) -> dict[str, np.ndarray]:
    return {"ids": np.random.default_rng(seed).integers(0, 512, (batch, sequence))}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BERT-like encoder (2 layers, hidden 64) exported with symbolic batch and sequence."""
    torch = pytest.importorskip("torch")
    from tessera.zoo import _definitions

    torch.manual_seed(0)
    module = _definitions.Transformer(2, 64, 4, POSITIONS, vocab=512).eval()
    buffer = io.BytesIO()
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.ones(2, 16, dtype=torch.int64),), buffer,
                          dynamo=False, opset_version=17, input_names=["ids"],
                          output_names=["output"], dynamic_axes={"ids": axes, "output": axes})
    path = tmp_path_factory.mktemp("dynamic") / "encoder.onnx"
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def compiled_encoder(encoder: Path) -> CompiledModel:
    return tessera.compile(encoder, "onnxruntime")


@pytest.mark.parametrize("shape", [(1, 7), (2, 64), (3, 128), (1, 300)])
def test_the_encoder_runs_every_shape_matching_the_reference(
        encoder: Path, compiled_encoder: CompiledModel, shape: tuple[int, int]) -> None:
    assert compiled_encoder.model.symbols == ("batch", "sequence")
    feeds = ids(*shape)
    got = compiled_encoder.run(feeds)
    assert got["output"].shape == (*shape, 64)
    assert_close(got, reference(encoder, feeds))


SHAPES = [(1, 7), (2, 64), (3, 128), (1, 300)]


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torch", "reference"])
def test_each_single_backend_runs_every_shape(encoder: Path, target: str) -> None:
    if not backends.get(target).is_available().ok:
        pytest.skip(f"{target} is not installed here")
    compiled = tessera.compile(encoder, target, accuracy="exact")
    assert [p.kind for p in compiled.plan.partitions] == [target]
    for shape in SHAPES:
        feeds = ids(*shape, seed=shape[1])
        assert_close(compiled.run(feeds), reference(encoder, feeds))


def test_a_mixed_plan_runs_every_shape(encoder: Path) -> None:
    if not backends.get("openvino").is_available().ok:
        pytest.skip("openvino is not installed here")
    # attention on OpenVINO, the rest on ONNX Runtime: symbolic sizes cross partitions
    compiled = tessera.compile(encoder, "onnxruntime,openvino", partitioner="greedy",
                               pins={"re:.*/attn/.*": "openvino"}, accuracy="exact")
    kinds = [p.kind for p in compiled.plan.partitions]
    assert "openvino" in kinds and "onnxruntime" in kinds and len(kinds) > 2
    for shape in SHAPES:
        feeds = ids(*shape, seed=shape[0])
        assert_close(compiled.run(feeds), reference(encoder, feeds))


def test_a_range_bounds_what_run_accepts(encoder: Path) -> None:
    compiled = tessera.compile(encoder, "onnxruntime", shapes="batch=1,2;sequence=8:64:256")
    assert_close(compiled.run(ids(4, 8)), reference(encoder, ids(4, 8)))  # batch: any size
    assert_close(compiled.run(ids(1, 256)), reference(encoder, ids(1, 256)))
    with pytest.raises(InputError) as raised:
        compiled.run(ids(1, 300))
    message = str(raised.value)
    for words in ("input 'ids'", "dimension 'sequence' is 300", "range 8..256",
                  "--shape-profile sequence=8:64:300"):
        assert words in message
    with pytest.raises(InputError, match=r"dimension 'sequence' is 7, outside .* 8\.\.256"):
        compiled.run(ids(1, 7))


def test_an_artifact_keeps_the_dimensions_and_the_profile(encoder: Path,
                                                          tmp_path: Path) -> None:
    compiled = tessera.compile(encoder, "onnxruntime", shapes={"sequence": (1, 64, 256)})
    path = compiled.save(tmp_path / "encoder.tess")
    loaded = tessera.load(path)
    assert loaded.model.symbols == ("batch", "sequence")
    assert loaded.config.options.shapes == ShapeProfile.parse("sequence=1:64:256")
    parts = list(loaded.parts)
    for shape in [(2, 17), (1, 250), (3, 1)]:
        assert_close(loaded.run(ids(*shape, seed=1)), reference(encoder, ids(*shape, seed=1)))
    assert loaded.parts == parts  # every shape on the partitions built when it loaded
    with pytest.raises(InputError, match=r"dimension 'sequence' is 300, .* range 1\.\.256"):
        loaded.run(ids(1, 300))


def test_a_cnn_with_a_dynamic_batch_runs_every_batch() -> None:
    pytest.importorskip("torch")
    path = zoo.export("resnet-tiny", dynamic=True)
    assert path != zoo.export("resnet-tiny") and "-dyn" in path.name
    compiled = tessera.compile(path, "onnxruntime", shapes="batch=1,4")
    assert compiled.model.symbols == ("batch",)
    for batch in (1, 3, 4):
        feeds = {"image": np.random.default_rng(batch).standard_normal(
            (batch, 3, 64, 64)).astype(np.float32)}
        assert_close(compiled.run(feeds), reference(path, feeds))
    with pytest.raises(InputError, match=r"input 'image' has shape \[2, 3, 32, 32\], "
                                         r"expected \['batch', 3, 64, 64\] \(dimension 2 is 32"):
        compiled.run({"image": np.zeros((2, 3, 32, 32), np.float32)})


def test_the_zoo_names_the_sequence_of_its_token_models(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    pytest.importorskip("torch")
    from tessera.zoo.__main__ import main

    model = tessera.load_model(zoo.export("bert-tiny", dynamic=True), require_static=False)
    assert model.symbols == ("batch", "sequence")
    assert tessera.load_model(zoo.export("mlp", dynamic=True),
                              require_static=False).symbols == ("batch",)
    assert main(["mlp", "--dynamic"]) == 0
    assert capsys.readouterr().out.strip() == str(zoo.export("mlp", dynamic=True))
    assert main(["mlp", "two"]) == 2


# -- two inputs sharing a symbol; profiles the model contradicts ----------------------------
def pair(batch_a: int, batch_b: int, width: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal((batch_a, 8)).astype(np.float32),
            "b": rng.standard_normal((batch_b, width)).astype(np.float32)}


def test_inputs_sharing_a_symbol_must_agree_on_its_size() -> None:
    compiled = tessera.compile(two_inputs(), "onnxruntime", shapes="batch=1:2:8")
    for batch in (1, 5, 8):
        assert_close(compiled.run(pair(batch, batch)), reference(two_inputs(),
                                                                 pair(batch, batch)))
    with pytest.raises(InputError) as raised:
        compiled.run(pair(2, 3))
    message = str(raised.value)
    for words in ("'a' and 'b'", "dimension 'batch'", "batch=2 in 'a'", "batch=3 in 'b'"):
        assert words in message
    with pytest.raises(InputError, match=r"input 'b' has shape \[2, 9\], .*dimension 1 is 9, "
                                         r"expected 8"):
        compiled.run(pair(2, 2, width=9))
    with pytest.raises(InputError, match=r"dimension 'batch' is 9, outside the profile's "
                                         r"range 1\.\.8"):
        compiled.run(pair(9, 9))


def test_a_compiled_partition_checks_its_symbols_too() -> None:
    part = backends.get("onnxruntime").compile(two_inputs())
    assert part.run(pair(3, 3))["y"].shape == (3, 8)
    with pytest.raises(InputError, match=r"'a' and 'b' disagree on dimension 'batch'"):
        part.run(pair(3, 4))


@pytest.mark.parametrize(("model", "shapes", "error", "words"), [
    (table, "batchh=1,4", ConfigError, ["dimension 'batchh'", "did you mean 'batch'",
                                        "symbolic dimensions: batch"]),
    (table, "batch=1,4", ModelError, ["does not allow batch=4", "Add"]),
    (table, "batch=1:1:4", ModelError, ["does not allow batch=4"]),  # the range's end
    (table, "batch=0,1", ModelError, ["does not allow batch=0"]),  # a listed 0: checked
    # each end of a range beside the others at the point: a total with sizes of its own
    # breaks the tie, and the error shows the sum that keeps it
    (cache, "sequence=1:1:8;past=4;total=1:5:8", ModelError, [
        "does not allow batch=1, past=4, sequence=8, total=5", "total=past+sequence"]),
    (reshape_to_constant, "batch=2,3", ModelError, ["does not allow batch=3",
                                                    "node 'reshape' reshapes [3, 8]"]),
])
def test_a_profile_the_model_contradicts_is_refused_before_measuring(
        model: Callable[[], onnx.ModelProto], shapes: str, error: type[Exception],
        words: list[str]) -> None:
    for call in (tessera.compile, tessera.partition):
        with pytest.raises(error) as raised:
            call(model(), "onnxruntime", shapes=shapes)
        for word in words:
            assert word in str(raised.value)


def test_a_profile_on_a_static_model_is_a_config_error() -> None:
    model = tessera.compile(table(), "onnxruntime", shapes="batch=2")
    assert model.run({"x": np.ones((2, 8), np.float32)})["y"].shape == (2, 8)
    static = table()
    static.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    static.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    with pytest.raises(ConfigError, match=r"shape profile batch=2 given, but the model has no "
                                          r"symbolic dimensions"):
        tessera.compile(static, "onnxruntime", shapes="batch=2")


# -- a dimension that is the sum of others -------------------------------------------------
def grown(batch: int, past: int, sequence: int, total: int | None = None
          ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(past * 100 + sequence)
    return {"past": rng.standard_normal((batch, past, 4)).astype(np.float32),
            "new": rng.standard_normal((batch, sequence, 4)).astype(np.float32),
            "mask": rng.standard_normal((batch, past + sequence if total is None else total)
                                        ).astype(np.float32)}


def test_a_sum_keeps_the_tie_at_every_point_and_in_run() -> None:
    compiled = tessera.compile(cache(), "onnxruntime",
                               shapes="sequence=1:1:8;past=0:4:7;total=past+sequence")
    assert compiled.plan.stats.shapes is not None
    assert compiled.plan.stats.shapes.points == ("batch=1,past=4,sequence=1,total=5",)
    for shape in [(1, 0, 5), (2, 0, 8), (1, 7, 1), (3, 7, 8)]:  # an empty past; the corners
        assert_close(compiled.run(grown(*shape)), reference(cache(), grown(*shape)))
    with pytest.raises(InputError) as raised:
        compiled.run(grown(1, 3, 1, total=5))
    message = str(raised.value)
    for words in ("input 'mask'", "dimension 'total' is 5", "past+sequence = 3+1 = 4",
                  "past=3 in 'past'", "sequence=1 in 'new'"):
        assert words in message
    with pytest.raises(InputError, match=r"dimension 'sequence' is 9, outside the profile's "
                                         r"range 1\.\.8"):
        compiled.run(grown(1, 0, 9))


def test_without_a_profile_a_tied_model_is_told_the_form_with_the_sum() -> None:
    with pytest.raises(ModelError) as raised:
        tessera.compile(cache(), "onnxruntime")
    message = str(raised.value)
    for words in ("does not allow batch=1, past=1, sequence=128, total=1",
                  "without a shape profile", "if total = past + sequence",
                  "shapes='sequence=1:1:64;past=0:16:63;total=past+sequence'"):
        assert words in message
