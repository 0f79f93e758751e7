"""Accuracy on the user's samples through `compile` and `partition`: the report in the plan's
stats matches the outputs against the reference backend, survives the plan's JSON and an
artifact, leaves the remembered plan's key alone; and `run_many` equals `run` one by one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends
from tessera.config import AccuracyBudget, AccuracyReport
from tessera.config._accuracy import accuracy_of
from tessera.errors import InputError
from tessera.ir import Model, Samples, load_model
from tessera.placement import Plan

from ..ir.models import mlp

needs_ort = pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                               reason="needs onnxruntime")
MIXED = {"relu": "reference", "softmax": "reference"}  # onnxruntime, reference, ort, reference


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def _model() -> Model:
    return load_model(mlp(seed=3).SerializeToString())


def _samples(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(count)]


@needs_ort
def test_compile_records_the_plan_accuracy_on_the_validation_samples(tmp_path: Path) -> None:
    model, given = _model(), _samples(5)
    compiled = tessera.compile(model, "onnxruntime,reference", partitioner="greedy",
                               pins=MIXED, samples=given, accuracy="cosine>=0.999,top1>=0.99")
    assert len(compiled.plan.partitions) == 4
    report = compiled.plan.stats.accuracy
    assert isinstance(report, AccuracyReport)
    validation = given[1::2]  # every second sample validates
    # the consensus: ONNX Runtime unoptimised and the reference agree, so the first answers
    reference = backends.get("onnxruntime").compile(model.proto, "onnxruntime -opt-level=disable")
    want = [reference.run(feed) for feed in validation]
    got = [compiled.run(feed) for feed in validation]
    judges = "the consensus of onnxruntime (no graph optimisations) and onnx.reference"
    assert report == accuracy_of(got, want, AccuracyBudget.parse("cosine>=0.999,top1>=0.99"),
                             judges)
    assert report.samples == 2 and report.met is True
    assert report.value("max-abs", "y") == max(
        float(np.max(np.abs(g["y"].astype(np.float64) - w["y"])))
        for g, w in zip(got, want, strict=True))
    assert report.value("max-abs", "y") < 1e-5 and report.value("top1", "y") == 1.0
    # the JSON form is plain, and the plan round-trips with it
    assert compiled.plan.stats.to_dict()["accuracy"]["budget"] == "cosine>=0.999,top1>=0.99"
    assert compiled.plan.stats.to_dict()["accuracy"]["met"] is True
    again = Plan.from_json(compiled.plan.to_json())
    assert again.stats.accuracy == report
    # an artifact keeps it
    path = compiled.save(tmp_path / "mlp.tess")
    assert tessera.load(path).plan.stats.accuracy == report


@needs_ort
def test_a_budget_the_plan_misses_is_recorded_with_its_worst_offender() -> None:
    compiled = tessera.compile(_model(), "onnxruntime", partitioner="greedy",
                               samples=_samples(2), accuracy="max-abs<=0,cosine>=0.5")
    report = compiled.plan.stats.accuracy
    assert report is not None and report.samples == 1
    if report.value("max-abs", "y") == 0.0:  # bit-exact on this machine: nothing to miss
        assert report.met is True
        return
    assert report.met is False
    assert report.worst is not None and report.worst.output == "y"
    assert report.worst.bound.metric == "max-abs"


@needs_ort
def test_samples_leave_the_remembered_plan_and_its_key_alone() -> None:
    model = _model()
    plain = tessera.partition(model, "onnxruntime,reference", partitioner="collage")
    measured = tessera.partition(model, "onnxruntime,reference", partitioner="collage",
                                 samples=_samples(2))
    assert measured.stats.source is not None and plain.stats.source is not None
    assert measured.stats.source.key == plain.stats.source.key
    assert measured.partitions == plain.partitions
    assert plain.stats.accuracy is None and "accuracy" not in plain.stats.to_dict()
    assert measured.stats.accuracy is not None and measured.stats.accuracy.met is None
    assert measured.stats.source.cache is not None  # the second partition was remembered


def test_bad_samples_fail_before_any_placement() -> None:
    with pytest.raises(InputError, match=r"sample 1, input 'x': dtype float64"):
        tessera.partition(_model(), "reference", samples=[
            {"x": np.zeros((2, 8), np.float32)}, {"x": np.zeros((2, 8))}])


def test_samples_load_from_a_directory_for_partition(tmp_path: Path) -> None:
    for i, sample in enumerate(_samples(3)):
        np.savez(tmp_path / f"{i:03d}.npz", **sample)  # type: ignore[arg-type]
    plan = tessera.partition(_model(), "reference", samples=tmp_path)
    assert plan.stats.accuracy is not None and plan.stats.accuracy.samples == 1
    assert plan.stats.accuracy.value("max-abs", "y") < 1e-6  # the reference, against the consensus
    assert len(Samples.load(tmp_path, _model())) == 3


@needs_ort
@pytest.mark.parametrize("concurrency", [1, 2])
def test_run_many_equals_run_one_by_one(concurrency: int) -> None:
    compiled = tessera.compile(_model(), "onnxruntime,reference", partitioner="greedy",
                               pins=MIXED)
    assert sorted(compiled.plan.kinds) == ["onnxruntime", "reference"]
    feeds = _samples(6)
    results = compiled.run_many(feeds, concurrency=concurrency)
    assert len(results) == len(feeds)
    for feed, result in zip(feeds, results, strict=True):
        alone = compiled.run(feed)
        assert list(result) == list(alone)
        assert all(np.array_equal(result[k], alone[k]) for k in alone)
    assert compiled.run_many([], concurrency=concurrency) == []


def test_run_many_refuses_a_concurrency_below_one() -> None:
    compiled = tessera.compile(_model(), "reference")
    with pytest.raises(InputError, match="concurrency must be an integer >= 1, got 0"):
        compiled.run_many(_samples(1), concurrency=0)
    with pytest.raises(InputError, match="input 'x' has dtype float64"):
        compiled.run_many([{"x": np.zeros((2, 8))}] * 2, concurrency=2)
