"""Artifacts: save and load round trips on real backends, checksums, atomic writes, backend
version drift (error, or re-placement with allow_fallback), and no code in the file."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tessera
from tessera import backends, zoo
from tessera.errors import ArtifactError
from tessera.ir import inline_weights
from tessera.ir._external import directory_of
from tessera.ir._external import reference as weight_reference
from tessera.runtime import FallbackWarning
from tessera.runtime._artifact import MANIFEST, _canonical, _sha, read

TARGETS = [t for t in ("onnxruntime", "openvino", "torch")
           if backends.get(t).is_available().ok]
pytestmark = pytest.mark.skipif(len(TARGETS) < 2, reason="needs two real backends")


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    yield tmp_path


def mixed(name: str = "mlp", **options: object) -> tessera.runtime.CompiledModel:
    """A plan with one partition per available backend, by pins: every kind of cache."""
    proto = onnx.load(zoo.export(name, 1))
    pins = {"/layers.0/Gemm": TARGETS[0], "/Erf": TARGETS[1], "/layers.1/Gemm": TARGETS[-1]}
    return tessera.compile(proto, TARGETS, pins=pins, partitioner="greedy", **options)


def reference(name: str = "mlp") -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    feeds = zoo.example_inputs(name)
    return feeds, backends.get("reference").compile(onnx.load(zoo.export(name, 1))).run(feeds)


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-4)


def rewrite(path: Path, change: dict[str, bytes | None], *, fix_manifest: bool) -> None:
    """Replace (or drop, with None) entries; optionally re-sign the manifest as a careful
    forger would, so only the deeper checks can catch it."""
    with zipfile.ZipFile(path) as archive:
        files = {n: archive.read(n) for n in archive.namelist()}
    for name, data in change.items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    if fix_manifest:
        manifest = json.loads(files[MANIFEST])
        manifest.pop("checksum")
        manifest["files"] = {n: _sha(d) for n, d in sorted(files.items()) if n != MANIFEST}
        manifest["checksum"] = _sha(_canonical(manifest))
        files[MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def test_save_load_round_trip_reuses_backend_caches(tmp_path: Path) -> None:
    compiled = mixed()
    assert len({str(p.target) for p in compiled.plan.partitions}) == len(TARGETS)
    feeds, want = reference()
    before = compiled.run(feeds)
    path = compiled.save(tmp_path / "mlp.tess")
    loaded = tessera.load(path)
    assert loaded.plan == compiled.plan
    assert loaded.policy == compiled.policy
    for part, source in zip(loaded.plan.partitions, loaded.sources, strict=True):
        has_cache = backends.get(part.kind).cache_format is not None
        assert source == ("cache" if has_cache else "submodel"), str(part.target)
    after = loaded.run(feeds)
    assert_close(after, want)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-5, atol=1e-6)


def test_weights_are_stored_once(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        tensors = [n for n in names if n.startswith("tensors/")]
        weights = sum(archive.getinfo(n).file_size for n in tensors)
    source = sum(t.ByteSize() for t in onnx.load(zoo.export("mlp", 1)).graph.initializer)
    assert tensors and weights <= 1.05 * source  # once, though model and partitions share them
    assert all(n == MANIFEST or n.endswith((".json", ".onnx")) or n.startswith(
        ("tensors/", "caches/")) for n in names)
    assert [p.name for p in tmp_path.glob("mlp.tess*")] == ["mlp.tess"]  # link-params=true


def test_loading_reads_no_weight_into_memory(tmp_path: Path) -> None:
    """The weights stored in the zip are hashed in pieces and copied once, in pieces, into
    a weights entry; each ONNX entry comes back as a skeleton referring to it, holding the
    saved values. A second load finds that entry and writes nothing."""
    compiled = mixed()
    path = compiled.save(tmp_path / "mlp.tess")
    artifact = read(path)
    assert artifact.sources and not any(n.startswith("tensors/") for n in artifact.files)
    skeleton = artifact.model("model.onnx")
    held = artifact.held
    assert held is not None and directory_of(skeleton) == held.directory
    kept = [t for t in skeleton.graph.initializer if weight_reference(t) is not None]
    assert kept and not any(t.raw_data for t in kept)

    def values(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
        return {t.name: numpy_helper.to_array(t)
                for t in inline_weights(proto).graph.initializer}

    want, got = values(compiled.model.proto), values(skeleton)
    assert want.keys() == got.keys()
    assert all(np.array_equal(got[name], want[name]) for name in want)
    written = held.path.stat().st_mtime_ns
    again = read(path)
    again.model("model.onnx")
    assert again.held is not None and again.held.directory == held.directory
    assert held.path.stat().st_mtime_ns == written


def test_link_params_false_keeps_the_weights_beside_the_artifact(tmp_path: Path) -> None:
    compiled = mixed(link_params=False)
    assert compiled.config.options.link_params is False
    path = compiled.save(tmp_path / "mlp.tess")
    weights = tmp_path / "mlp.tess.weights"
    linked = mixed().save(tmp_path / "linked.tess")
    assert weights.is_file() and path.stat().st_size < linked.stat().st_size / 4
    with zipfile.ZipFile(path) as archive:
        assert not [n for n in archive.namelist() if n.startswith("tensors/")]
        layout = json.loads(archive.read(MANIFEST))["weights"]
    with zipfile.ZipFile(linked) as archive:
        inside = {n: archive.read(n) for n in archive.namelist() if n.startswith("tensors/")}
    assert layout["file"] == "mlp.tess.weights" and layout["size"] == weights.stat().st_size
    assert sorted(layout["tensors"]) == sorted(inside)  # the same tensors, once each
    data = weights.read_bytes()
    for name, entry in layout["tensors"].items():
        assert entry["offset"] % layout["alignment"] == 0 and entry["sha256"] == _sha(
            inside[name])
        assert data[entry["offset"]:entry["offset"] + entry["length"]] == inside[name]
    artifact = read(path)
    assert artifact.weights and all(isinstance(v, np.memmap) for v in artifact.weights.values())
    loaded = tessera.load(path)
    assert loaded.plan == compiled.plan and loaded.config.options.link_params is False
    assert loaded.sources == tessera.load(linked).sources
    feeds, want = reference()
    assert_close(loaded.run(feeds), want)


def test_a_missing_or_damaged_weights_file_is_named(tmp_path: Path) -> None:
    path = mixed(link_params=False).save(tmp_path / "mlp.tess")
    weights = tmp_path / "mlp.tess.weights"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 0xFF
    weights.write_bytes(bytes(damaged))
    with pytest.raises(ArtifactError, match=r"weights file .*mlp\.tess\.weights: tensor "
                                            r"tensors/\w+ .* fails its SHA-256 check"):
        tessera.load(path)
    weights.write_bytes(good[:-10])
    with pytest.raises(ArtifactError, match=rf"holds {len(good) - 10} bytes, but mlp\.tess "
                                            rf"expects {len(good)}"):
        tessera.load(path)
    weights.unlink()
    with pytest.raises(ArtifactError, match=r"keeps its weights in .*mlp\.tess\.weights \(saved "
                                            r"with link-params=false\), which is missing: put "
                                            r"the mlp\.tess\.weights saved with it beside"):
        tessera.load(path)
    weights.write_bytes(good)
    assert tessera.load(path).plan.partitions


def test_a_weights_file_is_never_read_from_elsewhere(tmp_path: Path) -> None:
    path = mixed(link_params=False).save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
    manifest["weights"]["file"] = "../mlp.tess.weights"
    rewrite(path, {MANIFEST: json.dumps(manifest).encode()}, fix_manifest=True)
    with pytest.raises(ArtifactError, match="weights entry is malformed"):
        tessera.load(path)


def test_a_failed_save_beside_leaves_the_old_artifact(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    good = path.read_bytes()
    (tmp_path / "mlp.tess.weights").mkdir()  # the weights file cannot be put in place
    with pytest.raises(OSError):
        mixed(link_params=False).save(path)
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir() if ".sqlite" not in p.name) == [
        "mlp.tess", "mlp.tess.weights"]
    assert not list((tmp_path / "mlp.tess.weights").iterdir())


def test_a_damaged_entry_fails_its_checksum(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        tensor = next(n for n in archive.namelist() if n.startswith("tensors/"))
        data = bytearray(archive.read(tensor))
    data[10] ^= 0xFF
    rewrite(path, {tensor: bytes(data)}, fix_manifest=False)
    with pytest.raises(ArtifactError, match=f"{tensor} fails its SHA-256 check"):
        tessera.load(path)


def test_an_edited_manifest_fails_its_checksum(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
    manifest["thread_policy"] = "native"
    rewrite(path, {MANIFEST: json.dumps(manifest).encode()}, fix_manifest=False)
    with pytest.raises(ArtifactError, match="manifest's checksum does not match"):
        tessera.load(path)


def test_weights_never_come_from_outside_the_file(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        model = onnx.load_from_string(archive.read("model.onnx"))
    external = next(t for t in model.graph.initializer if t.external_data)
    for entry in external.external_data:
        if entry.key == "location":
            entry.value = "../../etc/passwd"
    rewrite(path, {"model.onnx": model.SerializeToString()}, fix_manifest=True)
    with pytest.raises(ArtifactError, match="does not contain"):
        tessera.load(path)


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04truncated"])
def test_what_is_not_an_artifact_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.tess"
    path.write_bytes(content)
    with pytest.raises(ArtifactError, match="not a tessera artifact"):
        tessera.load(path)
    with pytest.raises(ArtifactError, match="no artifact at"):
        tessera.load(tmp_path / "missing.tess")


def test_a_failed_save_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    compiled = mixed()
    path = compiled.save(tmp_path / "mlp.tess")
    good = path.read_bytes()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken)
    with pytest.raises(OSError, match="disk full"):
        compiled.save(path)
    assert path.read_bytes() == good  # the old artifact is intact
    assert sorted(p.name for p in tmp_path.iterdir() if ".sqlite" not in p.name) == ["mlp.tess"]


def test_a_changed_backend_version_is_an_error_or_a_fallback(tmp_path: Path) -> None:
    compiled = mixed()
    path = compiled.save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
    lost = TARGETS[1]
    manifest["backends"][lost] = "0.0.1"
    rewrite(path, {MANIFEST: json.dumps(manifest).encode()}, fix_manifest=True)
    with pytest.raises(ArtifactError, match=f"saved with {lost} 0.0.1, installed"):
        tessera.load(path)
    with pytest.warns(FallbackWarning, match=lost):
        loaded = tessera.load(path, allow_fallback=True)
    assert lost not in {str(p.target) for p in loaded.plan.partitions}
    kept = {n: str(p.target) for p in compiled.plan.partitions for n in p.nodes
            if str(p.target) != lost}
    assert {n: str(p.target) for p in loaded.plan.partitions for n in p.nodes
            if n in kept} == kept  # the other partitions stay where they were
    feeds, want = reference()
    assert_close(loaded.run(feeds), want)


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    path = mixed().save(tmp_path / "mlp.tess")
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
    manifest["version"] = 99
    rewrite(path, {MANIFEST: json.dumps(manifest).encode()}, fix_manifest=True)
    with pytest.raises(ArtifactError, match="format version 99"):
        tessera.load(path)


def externalize_model() -> onnx.ModelProto:
    """Initializers of every storage kind an artifact meets: big and small raw bytes, values
    in a typed field, strings."""
    from onnx import helper

    big = numpy_helper.from_array(np.arange(512, dtype=np.float32), "big")
    small = numpy_helper.from_array(np.arange(4, dtype=np.float32), "small")
    typed = helper.make_tensor("typed", onnx.TensorProto.FLOAT, [300],
                               [float(i) for i in range(300)])
    words = helper.make_tensor("words", onnx.TensorProto.STRING, [2], [b"a", b"b"])
    nodes = [helper.make_node("Add", ["x", name], [f"y_{name}"]) for name in ("big", "typed")]
    nodes.append(helper.make_node("Mul", ["y_big", "y_typed"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [512])],
                              [helper.make_tensor_value_info("y", 1, [512])],
                              [big, small, typed, words], doc_string="kept")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, {"origin": "test"})
    return model


@pytest.mark.parametrize("owned", [False, True])
def test_externalizing_moves_big_tensors_out_and_leaves_the_model_as_it_was(owned: bool) -> None:
    from tessera.runtime._artifact import _externalize

    model = externalize_model()
    before = model.SerializeToString()
    given = onnx.load_from_string(before) if owned else model
    tensors: dict[str, bytes | memoryview] = {}
    written = onnx.load_from_string(_externalize(given, tensors, owned=owned))
    assert model.SerializeToString() == before
    by_name = {t.name: t for t in written.graph.initializer}
    for name in ("big", "typed"):  # 2 KB and 1.2 KB: stored once, by content
        location = {e.key: e.value for e in by_name[name].external_data}["location"]
        assert by_name[name].data_location == onnx.TensorProto.EXTERNAL
        assert not by_name[name].HasField("raw_data")
        stored = np.frombuffer(bytes(tensors[location]), np.float32)
        np.testing.assert_array_equal(stored, numpy_helper.to_array(
            next(t for t in model.graph.initializer if t.name == name)))
    assert len(tensors) == 2
    np.testing.assert_array_equal(numpy_helper.to_array(by_name["small"]), np.arange(4))
    assert list(by_name["words"].string_data) == [b"a", b"b"]
    assert written.graph.doc_string == "kept" and written.opset_import == model.opset_import
    assert {p.key: p.value for p in written.metadata_props} == {"origin": "test"}
    assert written.graph.node == model.graph.node and written.graph.input == model.graph.input


def test_onnx_runtimes_saved_cache_is_loaded_reading_its_weights_from_the_weights_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimized model ONNX Runtime saved comes back as a skeleton: its session reads the
    weights from the artifact's weights entry, none of them inlined into the bytes given."""
    from tessera.backends.onnxruntime import OnnxRuntimeBackend

    compiled = tessera.compile(onnx.load(zoo.export("mlp", 1)), "onnxruntime",
                               partitioner="greedy")
    path = compiled.save(tmp_path / "mlp.tess")
    given: list[bytes] = []
    reload = OnnxRuntimeBackend._compile_cached

    def spy(self: OnnxRuntimeBackend, submodel: onnx.ModelProto, target: tessera.Target,
            cache: bytes) -> object:
        given.append(cache)
        return reload(self, submodel, target, cache)

    monkeypatch.setattr(OnnxRuntimeBackend, "_compile_cached", spy)
    loaded = tessera.load(path)
    assert loaded.sources == ["cache"] and len(given) == 1
    skeleton = onnx.load_from_string(given[0])
    kept = [t for t in skeleton.graph.initializer if weight_reference(t) is not None]
    assert kept and not any(t.raw_data for t in kept)
    assert all(len(t.raw_data) <= 1024 for t in skeleton.graph.initializer)  # biases
    artifact = read(path)
    artifact.model("model.onnx")
    assert artifact.held is not None and directory_of(skeleton) == artifact.held.directory
    feeds, want = reference()
    assert_close(loaded.run(feeds), want)
    for key, value in compiled.run(feeds).items():
        np.testing.assert_allclose(loaded.run(feeds)[key], value, rtol=1e-5, atol=1e-6)
