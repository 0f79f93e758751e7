"""The benchmark suite's smoke run (CI): it completes, every configuration has a latency, and
every configuration's outputs match the reference. Timings are never asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import suite


@pytest.fixture(autouse=True)
def _private_cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def test_the_smoke_suite_completes_and_matches_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    assert suite.main(["--smoke", "--backends", "onnxruntime", "openvino", "--out", str(out)]
                      ) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["configs"] == ["native onnxruntime", "native openvino",
                                 "tessera onnxruntime", "tessera openvino", "tessera greedy",
                                 "tessera collage"]
    (model,) = result["results"]
    assert model["model"] == "mlp" and model["reference"] == "the consensus oracle (tessera.oracle)"
    for label in result["configs"]:
        row = model["rows"][label]
        assert row["median_ms"] > 0 and row["matches"] is True, (label, row)
    assert model["search"]["cold"]["measurements"] > 0
    assert model["search"]["warm_measurements"] == 0
    assert result["summary"]["all_outputs_match"] is True
    table = out.with_suffix(".md").read_text()
    assert "| mlp | 1 |" in table and "## Search cost" in table
    assert "| native onnxruntime ms (vs best; higher is faster) |" in table
    assert "| collage vs best, paired (higher is faster) |" in table


def test_render_merges_a_search_only_run_into_the_timings() -> None:
    timed = {"model": "m", "batch": 1, "rows": {"tessera collage": {"median_ms": 2.0}},
             "search": {"warm_seconds": 5.0}}
    other = {"model": "n", "batch": 1, "rows": {"x": {}}, "search": {"warm_seconds": 1.0}}
    search_only = {"model": "m", "batch": 1, "rows": {}, "search": {"warm_seconds": 0.5}}
    merged = suite.merge([timed, other, search_only])
    assert [(r["model"], r["search"]["warm_seconds"]) for r in merged] == [("m", 0.5),
                                                                           ("n", 1.0)]
    assert merged[0]["rows"] == timed["rows"]  # the timings stay
    retimed = {**timed, "rows": {"tessera collage": {"median_ms": 1.0}}}
    assert suite.merge([timed, retimed]) == [retimed]  # a full later run wins
