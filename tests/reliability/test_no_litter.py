"""A compile writes only to its cache and to the paths it is given: not to the working
directory, and nothing left in the system's temporary directory. ONNX Runtime's quantizer
writes beside the working directory where its shape inference is incomplete (a
`sym_shape_infer_temp.onnx` and a `<uuid>.data` of the weights) and uses the system's
temporary directory; tessera runs it inside a private directory that is always removed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera
from tessera import zoo
from tessera.backends import _quantize
from tessera.errors import CompileError

from ..ir.models import mlp

# ONNX Runtime's own session-id file: its library writes it to the temporary directory it
# read at import, on its first session in a process, whoever runs it (ONNX Runtime alone too)
_ORT_SESSION_ID = ".ses"


def _everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.name != _ORT_SESSION_ID)


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fresh working directory and a fresh system temporary directory."""
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return work, temp


def _littering(real: Any) -> Any:
    """The quantizer as it behaves where its shape inference is incomplete: a model and its
    weights saved in the working directory, and a file left in the temporary directory."""

    def quantize(*args: Any, **kwargs: Any) -> Any:
        Path("sym_shape_infer_temp.onnx").write_bytes(b"model")
        Path("0b9c0f1e-uuid.data").write_bytes(b"weights" * 1000)
        tempfile.mkstemp(suffix=".onnx")  # never removed by its maker
        return real(*args, **kwargs)

    return quantize


def test_the_quantizer_writes_nowhere_but_its_own_directory(
        fresh: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime import quantization

    work, temp = fresh
    monkeypatch.setattr(quantization, "quantize_dynamic",
                        _littering(quantization.quantize_dynamic))
    quantized = _quantize.quantize(mlp(), _quantize.Recipe("dynamic"), None,
                                   backend="onnxruntime")
    assert _quantize.is_quantized(quantized)
    assert _everything(work) == [] and _everything(temp) == []


def test_a_failing_quantizer_leaves_nothing_either(
        fresh: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime import quantization

    work, temp = fresh

    def failing(*args: Any, **kwargs: Any) -> None:
        _littering(lambda *a, **k: None)()
        raise RuntimeError("Incomplete symbolic shape inference")

    monkeypatch.setattr(quantization, "quantize_dynamic", failing)
    model = mlp(hidden=24)
    with pytest.raises(CompileError, match="Incomplete symbolic shape inference"):
        _quantize.quantize(model, _quantize.Recipe("dynamic"), None, backend="onnxruntime")
    assert _everything(work) == [] and _everything(temp) == []
    assert Path.cwd() == work and tempfile.gettempdir() == str(temp)  # both given back


def test_a_compile_with_samples_writes_only_its_cache(fresh: tuple[Path, Path],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The precision search, int8 forms calibrated and judged, from a fresh directory."""
    work, temp = fresh
    cache = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE", str(cache))
    samples = [zoo.example_inputs("mlp", seed=s) for s in range(6)]
    compiled = tessera.compile(zoo.export("mlp"), "onnxruntime", samples=samples,
                               accuracy="cosine>=0.99", isolate=False)
    record = compiled.plan.stats.precision
    assert record is not None and record.searched
    assert any("int8" in v.target for v in record.variants)
    out = compiled.run(samples[1])
    assert all(np.isfinite(v).all() for v in out.values())
    assert _everything(work) == [] and _everything(temp) == []
    assert _everything(cache)  # what it keeps, it keeps in the cache it is given
