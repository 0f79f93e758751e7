"""A real model compiled for throughput from two callers on OpenVINO and ONNX Runtime: the
race compares inferences per second, races settings variants of the whole-model plans, and
the plan kept agrees with the reference, called alone and from two threads at once."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import tessera
from tessera import backends, zoo
from tessera._private.numeric import agree
from tessera.config import Objective

TARGETS = "openvino,onnxruntime,cpu"
pytestmark = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("openvino", "onnxruntime")),
    reason="needs openvino and onnxruntime")


def test_a_throughput_compile_keeps_the_most_served_plan_and_agrees_with_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    path = zoo.export("mlp", 1)
    compiled = tessera.compile(path, TARGETS, objective="throughput", concurrency=2)
    race = compiled.plan.stats.race
    assert race is not None and race.objective == Objective("throughput", 50, 2)
    served = dict(race.throughput_ips)
    assert race.kept in served and served[race.kept] == max(served.values())
    assert set(served) <= set(race.timings)
    assert any(name.startswith("only ") and ("-num-threads=" in name or "-num-streams=" in name)
               for name in map(str, race.timings))  # settings variants took part

    feeds = zoo.example_inputs("mlp")
    want = backends.get("reference").compile(onnx.load(path)).run(feeds)
    verdict = agree(compiled.run(feeds), want)
    assert verdict, verdict.why
    for got in compiled.run_many([feeds] * 8, concurrency=2):
        verdict = agree(got, want)
        assert verdict, verdict.why
