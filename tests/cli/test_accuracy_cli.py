"""`tessera compile --samples --accuracy` and `tessera explain`: the plan's accuracy on the
user's samples, and whether it meets the budget, printed and kept in the artifact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera import backends
from tessera.runtime import load

from ..ir.models import mlp
from .test_cli import run


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def _files(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp(seed=1).SerializeToString())
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(2)
    for i in range(4):
        np.savez(samples / f"{i}.npz", x=rng.standard_normal((2, 8)).astype(np.float32))
    return model, samples


def test_compile_measures_the_samples_and_explain_shows_the_verdict(tmp_path: Path) -> None:
    model, samples = _files(tmp_path)
    out = tmp_path / "mlp.tess"
    code, stdout, stderr = run("compile", str(model), "-t", "reference", "--samples",
                               str(samples), "--accuracy", "cosine>=0.999,top1>=0.99",
                               "-o", str(out))
    assert code == 0, stderr
    start = ("accuracy on 2 validation sample(s) against the consensus of onnxruntime (no "
             "graph optimisations) and onnx.reference: max-abs y ")
    end = "; top1 y 1; budget cosine>=0.999,top1>=0.99 met"
    line = next(line for line in stdout.splitlines() if line.startswith(start))
    assert line.endswith(end)
    report = load(out).plan.stats.accuracy
    assert report is not None and report.met is True and report.samples == 2
    assert report.value("max-abs", "y") < 1e-5  # the reference against the consensus
    code, stdout, stderr = run("explain", str(out))
    assert code == 0, stderr
    assert stdout.splitlines()[1] == line


@pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                    reason="needs onnxruntime")
def test_a_missed_budget_is_named_not_fatal(tmp_path: Path) -> None:
    model, samples = _files(tmp_path)
    code, stdout, stderr = run("explain", str(model), "-t", "onnxruntime", "--samples",
                               str(samples), "-O", "accuracy=max-abs<=0,top1>=0.5")
    assert code == 0, stderr
    verdict = stdout.splitlines()[1]
    assert verdict.startswith("accuracy on 2 validation sample(s) against the consensus of ")
    assert verdict.endswith("budget max-abs<=0.0,top1>=0.5 met") or \
        "budget missed: max-abs of output 'y' is " in verdict


def test_without_samples_explain_says_nothing_is_tried(tmp_path: Path) -> None:
    model, _ = _files(tmp_path)
    code, stdout, stderr = run("explain", str(model), "-t", "reference", "-O",
                               "accuracy=cosine>=0.99")
    assert code == 0, stderr
    assert stdout.splitlines()[1] == "accuracy: not measured (budget cosine>=0.99 not checked)"


@pytest.mark.parametrize(("args", "words"), [
    (["--accuracy", "cosin>=0.9"], ["unknown metric 'cosin'", "did you mean 'cosine'"]),
    (["--accuracy", "top1<=0.9"], ["top1 takes a bound of the form top1>=X"]),
])
def test_a_bad_budget_exits_2_with_one_line(tmp_path: Path, args: list[str],
                                            words: list[str]) -> None:
    model, samples = _files(tmp_path)
    code, _, stderr = run("compile", str(model), "-t", "reference", "--samples",
                               str(samples), *args, "-o", str(tmp_path / "x.tess"))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1
    for word in words:
        assert word in stderr


def test_a_bad_sample_exits_2_naming_it(tmp_path: Path) -> None:
    model, samples = _files(tmp_path)
    np.savez(samples / "9.npz", x=np.zeros((3, 8), np.float32))
    code, _, stderr = run("compile", str(model), "-t", "reference", "--samples", str(samples),
                          "-o", str(tmp_path / "x.tess"))
    assert code == 2
    assert "sample '9.npz', input 'x': dimension 0 is 3" in stderr
