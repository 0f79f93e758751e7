"""An unchanged model file loaded before is not read again: its loaded skeleton, kept in its
weights entry, stands in for it. A changed file, other load options, an evicted entry or a
damaged skeleton each mean a full load, with the same result a first load gives."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera.ir import _load, inline_weights, load_model
from tessera.ir._filememo import SETTLED_S
from tessera.ir._model import Model
from tessera.ir._weights import evict

from .models import mlp

_X = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE", str(root))
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The sources `read_model` is asked to read, from here on."""
    seen: list[object] = []
    real = _load.read_model

    def counted(source: object) -> _load.ReadModel:
        seen.append(source)
        return real(source)

    monkeypatch.setattr(_load, "read_model", counted)
    return seen


def _saved(path: Path, seed: int = 0) -> Callable[[], int]:
    """`mlp(seed)` saved at `path`, and a clock at which the file counts as settled."""
    onnx.save(mlp(seed=seed, hidden=64), path)
    stat = path.stat()
    return lambda: max(stat.st_mtime_ns, stat.st_ctime_ns) + int(SETTLED_S * 1e9)


def _expected(seed: int) -> np.ndarray:
    """numpy's MLP on the weights `mlp(seed)` was built with."""
    w = {t.name: numpy_helper.to_array(t) for t in mlp(seed=seed, hidden=64).graph.initializer}
    logits = np.maximum(_X @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def _computes(model: Model, seed: int) -> None:
    (got,) = ReferenceEvaluator(inline_weights(model.proto)).run(None, {"x": _X})
    np.testing.assert_allclose(got, _expected(seed), rtol=1e-5, atol=1e-6)


def test_an_unchanged_file_loaded_before_is_not_read_again(
        cache: Path, tmp_path: Path, reads: list[object]) -> None:
    path = tmp_path / "m.onnx"
    clock = _saved(path)
    first = load_model(str(path), clock=clock)
    assert reads == [str(path)]
    second = load_model(str(path), clock=clock)
    assert reads == [str(path)]  # the skeleton stood in for the file
    assert second.proto.SerializeToString() == first.proto.SerializeToString()
    assert second.content_digest == first.content_digest == \
        hashlib.sha1(path.read_bytes()).hexdigest()
    assert second.weights is not None and first.weights is not None
    assert second.weights.directory == first.weights.directory
    assert second.opset == first.opset == 17
    _computes(second, seed=0)


def test_a_changed_file_is_read_again(cache: Path, tmp_path: Path,
                                      reads: list[object]) -> None:
    path = tmp_path / "m.onnx"
    load_model(str(path), clock=_saved(path))
    clock = _saved(path, seed=1)  # the same size, other weights
    changed = load_model(str(path), clock=clock)
    assert len(reads) == 2
    assert changed.content_digest == hashlib.sha1(path.read_bytes()).hexdigest()
    _computes(changed, seed=1)
    _computes(load_model(str(path), clock=clock), seed=1)
    assert len(reads) == 2


def test_each_set_of_load_options_has_its_own_skeleton(cache: Path, tmp_path: Path,
                                                       reads: list[object]) -> None:
    path = tmp_path / "m.onnx"
    clock = _saved(path)
    load_model(str(path), clock=clock)
    load_model(str(path), require_static=False, clock=clock)  # not what the first kept
    load_model(str(path), verify=True, clock=clock)
    assert len(reads) == 3
    for options in ({}, {"require_static": False}, {"verify": True}):
        _computes(load_model(str(path), clock=clock, **options), seed=0)
    assert len(reads) == 3
    load_model(str(path), {"x": [2, 8]}, clock=clock)  # shapes given: always read
    assert len(reads) == 4


def test_a_file_written_just_now_is_read_every_time(cache: Path, tmp_path: Path,
                                                   reads: list[object]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp(hidden=64), path)
    written = path.stat()
    now = max(written.st_mtime_ns, written.st_ctime_ns)  # a second write may go unseen
    load_model(str(path), clock=lambda: now)
    load_model(str(path), clock=lambda: now)
    assert len(reads) == 2


def test_an_evicted_entry_or_a_damaged_skeleton_means_a_full_load(
        cache: Path, tmp_path: Path, reads: list[object]) -> None:
    path = tmp_path / "m.onnx"
    clock = _saved(path)
    entry = load_model(str(path), clock=clock).weights.directory  # type: ignore[union-attr]
    gc.collect()
    assert evict(cache / "weights", 0) == [entry.name]  # the skeleton goes with it
    _computes(load_model(str(path), clock=clock), seed=0)
    assert len(reads) == 2
    gc.collect()
    (skeleton,) = entry.glob("loaded.*.onnx")
    skeleton.write_bytes(b"\x08\x01\xff damaged")
    _computes(load_model(str(path), clock=clock), seed=0)
    assert len(reads) == 3
    _computes(load_model(str(path), clock=clock), seed=0)  # written again whole
    assert len(reads) == 3
