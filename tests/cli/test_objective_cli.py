"""`--objective` and `--concurrency` on `tessera compile` and `tessera explain`: the race
compares the figure asked for, the end-to-end line names it, the artifact keeps it, and a
bad value exits 2 in one line naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera import backends
from tessera.config import Objective
from tessera.runtime import load

from ..ir.models import mlp
from .test_cli import run

BOTH = all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino"))


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp(seed=1).SerializeToString())
    return model


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_compile_for_throughput_names_the_figure_and_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "mlp.tess"
    code, stdout, stderr = run("compile", str(_model(tmp_path)), "-t", "onnxruntime,openvino",
                               "--objective", "throughput", "--concurrency", "2",
                               "-o", str(out))
    assert code == 0, stderr
    line = next(t for t in stdout.splitlines() if t.startswith("end to end"))
    assert line.startswith("end to end (throughput at concurrency 2): collage ")
    assert "/s at " in line and " ms" in line
    race = load(out).plan.stats.race
    assert race is not None and race.objective == Objective("throughput", 50, 2)
    assert f"; kept {race.kept}" in line
    code, stdout, stderr = run("explain", str(out))
    assert code == 0, stderr
    assert line in stdout.splitlines()


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_explain_races_for_the_percentile_and_callers_asked(tmp_path: Path) -> None:
    code, stdout, stderr = run("explain", str(_model(tmp_path)), "-t", "onnxruntime,openvino",
                               "--concurrency", "2", "-O", "latency-percentile=90")
    assert code == 0, stderr
    assert stdout.splitlines()[2].startswith(
        "end to end (p90 latency at concurrency 2): collage ")


@pytest.mark.parametrize(("args", "words"), [
    (["--concurrency", "0"], ["bad value for option 'concurrency'", "integer >= 1, got 0"]),
    (["-O", "latency-budget=5"], ["latency-budget", "objective=throughput"]),
    (["--objective", "throughput", "-O", "latency-budget=-2"],
     ["bad value for option 'latency-budget'", "milliseconds > 0"]),
])
def test_a_bad_objective_exits_2_with_one_line(tmp_path: Path, args: list[str],
                                              words: list[str]) -> None:
    code, _, stderr = run("compile", str(_model(tmp_path)), "-t", "reference", *args,
                          "-o", str(tmp_path / "x.tess"))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1
    for word in words:
        assert word in stderr


def test_an_unknown_objective_is_refused_with_the_choices(tmp_path: Path) -> None:
    code, _, stderr = run("compile", str(_model(tmp_path)), "-t", "reference", "--objective",
                          "fastest")
    assert code == 2
    assert "'fastest' is not one of 'latency', 'throughput'" in stderr


def test_an_artifact_keeps_its_objective(tmp_path: Path) -> None:
    out = tmp_path / "mlp.tess"
    code, _, stderr = run("compile", str(_model(tmp_path)), "-t", "reference", "-o", str(out))
    assert code == 0, stderr
    code, _, stderr = run("explain", str(out), "--objective", "throughput")
    assert code == 2
    assert "--objective and --concurrency are for an .onnx model" in stderr
