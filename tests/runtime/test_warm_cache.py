"""The warm cache of compiled partitions: a second compile reloads what the first left,
keyed on everything the partition computes with; damaged entries are rebuilt; the least
recently used entries go once the cache passes its size."""

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import backends
from tessera.ir import load_model
from tessera.runtime import _warm
from tessera.target import Target

from ..ir.models import mlp

_FEEDS = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path))
    return tmp_path / "compiled"


def _needs(name: str) -> None:
    if not backends.get(name).is_available().ok:
        pytest.skip(f"{name} is not installed")


def _files(cache: Path) -> dict[str, tuple[int, int]]:
    """Every file of every entry but its use stamp, with its inode and mtime: a reload
    reads them and leaves them as they are; a compile writes a new entry."""
    return {str(f.relative_to(cache)): (f.stat().st_ino, f.stat().st_mtime_ns)
            for f in sorted(cache.rglob("*")) if f.is_file() and f.name != "entry.json"}


def _expected(model: onnx.ModelProto) -> np.ndarray:
    return backends.get("reference").compile(model).run(_FEEDS)["y"]


@pytest.mark.parametrize(("backend", "form"), [("openvino", "model.xml"),
                                                ("onnxruntime", "optimized.onnx")])
def test_a_second_compile_reloads_the_first_ones_partition(
        cache: Path, monkeypatch: pytest.MonkeyPatch, backend: str, form: str) -> None:
    _needs(backend)
    first = tessera.compile(mlp(), backend, accuracy="exact")
    entries = sorted(cache.iterdir())
    assert len(entries) == 1 and (entries[0] / form).is_file()
    assert (entries[0] / "entry.json").is_file()
    written = _files(cache)
    used = (entries[0] / "entry.json").stat().st_mtime_ns
    os.utime(entries[0] / "entry.json", ns=(used - 10**9, used - 10**9))
    second = tessera.compile(mlp(), backend, accuracy="exact")
    assert _files(cache) == written  # reloaded: nothing compiled or written again
    assert (entries[0] / "entry.json").stat().st_mtime_ns > used - 10**9  # marked as used
    for compiled in (first, second):
        np.testing.assert_allclose(compiled.run(_FEEDS)["y"], _expected(mlp()), rtol=1e-5,
                                   atol=1e-6)


def test_other_weights_or_names_are_other_entries(cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("onnxruntime")
    tessera.compile(mlp(), "onnxruntime")
    other = tessera.compile(mlp(seed=1), "onnxruntime")  # same structure, other weights
    tessera.compile(mlp(names="p_"), "onnxruntime")
    assert len(list(cache.iterdir())) == 3  # each compiled and published its own entry
    np.testing.assert_allclose(other.run(_FEEDS)["y"], _expected(mlp(seed=1)), rtol=1e-5,
                               atol=1e-6)


def test_a_damaged_entry_is_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("openvino")
    tessera.compile(mlp(), "openvino", accuracy="exact")
    (entry,) = cache.iterdir()
    (entry / "model.xml").write_text("<not ir")
    compiled = tessera.compile(mlp(), "openvino", accuracy="exact")  # the reload fails
    np.testing.assert_allclose(compiled.run(_FEEDS)["y"], _expected(mlp()), rtol=1e-5,
                               atol=1e-6)
    assert (entry / "model.xml").read_text().startswith("<?xml")


def test_the_option_turns_it_off(cache: Path) -> None:
    tessera.compile(mlp(), "onnxruntime", compile_cache=False)
    assert not cache.exists() or not list(cache.iterdir())


def test_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    now = time.time()
    for age, name in enumerate(["new", "middle", "old"]):
        entry = tmp_path / name
        entry.mkdir()
        (entry / "model.bin").write_bytes(b"x" * 1000)
        (entry / "entry.json").write_text("{}")
        os.utime(entry / "entry.json", (now - age * 100, now - age * 100))
    dead = tmp_path / ".old.999999999.abc"  # an unfinished entry of a writer that died
    dead.mkdir()
    alive = tmp_path / f".new.{os.getpid()}.abc"  # one still being written
    alive.mkdir()
    removed = _warm.evict(tmp_path, limit=2100)
    assert removed == [dead.name, "old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["new", "middle", alive.name])


def test_the_content_digest_is_of_the_bytes_read_or_of_the_model(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), path)
    assert load_model(str(path)).content_digest == hashlib.sha1(path.read_bytes()).hexdigest()
    from_proto = load_model(mlp()).content_digest
    assert from_proto == load_model(mlp()).content_digest
    assert from_proto != load_model(mlp(seed=1)).content_digest
    # input shapes set at load time change the model: not the digest of the file
    assert load_model(str(path), {"x": [2, 8]}).content_digest != \
        load_model(str(path)).content_digest


_DISK_FULL = """
import resource, signal, sys
import numpy as np
import tessera
from tests.ir.models import mlp
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # no file may grow: a full disk
compiled = tessera.compile(mlp(), ["onnxruntime", "reference"], partitioner="greedy")
print(" ".join(str(p.target) for p in compiled.plan.partitions))
feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
np.save(sys.stdout.buffer, compiled.run(feeds)["y"])
"""


def test_a_cache_that_cannot_be_written_never_bans_the_backend(cache: Path) -> None:
    """A real full disk (a file-size limit of 64 bytes, in a child process): the cache's
    own writes fail, the partition is compiled without it, and no entry is left."""
    import io
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _DISK_FULL], capture_output=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300,
                          check=True)
    line, _, rest = done.stdout.partition(b"\n")
    assert line.decode() == "onnxruntime"
    np.testing.assert_allclose(np.load(io.BytesIO(rest)), _expected(mlp()), rtol=1e-5,
                               atol=1e-6)
    assert not cache.exists() or not list(cache.iterdir())  # nothing half-written is left


def _settled(path: Path) -> Callable[[], int]:
    """A clock at which the file just written counts as settled (its change time cannot be
    set back): the moment it has been unchanged for as long as that takes."""
    from tessera.ir._filememo import SETTLED_S

    stat = path.stat()
    return lambda: max(stat.st_mtime_ns, stat.st_ctime_ns) + int(SETTLED_S * 1e9)


def test_an_unchanged_file_is_not_hashed_or_checked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), path)
    first = load_model(str(path), clock=_settled(path)).content_digest
    assert first == hashlib.sha1(path.read_bytes()).hexdigest()
    (memo,) = (tmp_path / "cache" / "files").iterdir()
    entry = json.loads(memo.read_text())
    memo.write_text(json.dumps({**entry, "digest": "remembered"}))
    # the second load trusts what the first learnt of the unchanged file: it hashes nothing
    assert load_model(str(path)).content_digest == "remembered"
    onnx.save(mlp(seed=1), path)  # same size, other weights: a changed file
    changed = load_model(str(path)).content_digest
    assert changed == hashlib.sha1(path.read_bytes()).hexdigest() != first
    memo.write_text("{not json")  # a damaged memo only costs the hashing
    assert load_model(str(path)).content_digest == changed


def test_a_file_written_just_now_is_not_remembered(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), path)  # a second write within its mtime's tick would go unseen
    written = path.stat()
    load_model(str(path), clock=lambda: max(written.st_mtime_ns, written.st_ctime_ns))
    assert not (tmp_path / "cache" / "files").exists() or \
        not list((tmp_path / "cache" / "files").iterdir())


def test_weights_that_are_also_inputs_survive_the_reload(cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights listed as graph inputs may be overridden; ONNX Runtime's optimized model would
    fold them away, so such a partition is kept as the model itself."""
    model = mlp()
    for tensor in model.graph.initializer:
        model.graph.input.append(onnx.helper.make_tensor_value_info(
            tensor.name, tensor.data_type, list(tensor.dims)))
    _needs("onnxruntime")
    results = [tessera.compile(model, "onnxruntime").run(_FEEDS)["y"]]
    written = _files(cache)
    results.append(tessera.compile(model, "onnxruntime").run(_FEEDS)["y"])
    assert _files(cache) == written  # the second compile reloaded the first one's entry
    (entry,) = cache.iterdir()
    assert (entry / "model.onnx").is_file() and not (entry / "optimized.onnx").exists()
    for result in results:
        np.testing.assert_allclose(result, _expected(mlp()), rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_a_partition_on_one_core_reuses_the_entry_of_the_same_on_many(
        cache: Path, backend: str) -> None:
    """An entry holds compiled code or a converted model, never a runtime setting: it is
    kept under the target's code key, so a device's `-num-cores` (the backend's threads)
    reuses it, and the threads are applied as the entry is loaded."""
    _needs(backend)
    tessera.compile(mlp(), backend, accuracy="exact")
    written = _files(cache)
    one = tessera.compile(mlp(), f"{backend},cpu -num-cores=1", accuracy="exact")
    assert _files(cache) == written  # the same entry, reloaded
    assert one.parts[0].target.attrs["num-threads"] in (1, 0)  # 0: a one-core machine
    np.testing.assert_allclose(one.run(_FEEDS)["y"], _expected(mlp()), rtol=1e-5, atol=1e-6)
    model = load_model(mlp())
    mask = model.node_set(model.dataflow.names)
    key = _warm.partition_key(model, mask, Target(backend))
    assert _warm.partition_key(model, mask, Target(f"{backend} -num-threads=1")) == key
    other = "opt-level=basic" if backend == "onnxruntime" else "precision=f16"
    assert _warm.partition_key(model, mask, Target(f"{backend} -{other}")) != key


@pytest.mark.parametrize("target", ["onnxruntime -precision=int4",
                                    "onnxruntime -precision=int8 -int8-recipe=weights"])
def test_a_reloaded_weight_only_form_is_what_an_artifact_keeps(cache: Path, tmp_path: Path,
                                                               target: str) -> None:
    """A warm compile reloads the quantized form, and saving it keeps that form, not the
    fp32 submodel it was made from."""
    _needs("onnxruntime")
    pytest.importorskip("torch")
    from tessera import zoo

    path = zoo.export_decoder("llama-kv-tiny")
    shapes = "batch=1;sequence=1:1:16;past_sequence=0:4:15;total_sequence=past_sequence+sequence"
    feeds = zoo.decoder_inputs("llama-kv-tiny", 6)
    fp32 = tessera.compile(path, "onnxruntime", shapes=shapes, accuracy="exact").run(feeds)
    first = tessera.compile(path, target, shapes=shapes).run(feeds)
    second = tessera.compile(path, target, shapes=shapes)  # from the warm cache
    loaded = tessera.load(second.save(tmp_path / "int.tess"))
    got = loaded.run(feeds)["logits"]
    np.testing.assert_array_equal(second.run(feeds)["logits"], first["logits"])
    np.testing.assert_array_equal(got, first["logits"])
    assert not np.array_equal(got, fp32["logits"])
