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
    assert model["model"] == "mlp" and model["reference"] == "onnx.reference"
    for label in result["configs"]:
        row = model["rows"][label]
        assert row["median_ms"] > 0 and row["matches"] is True, (label, row)
    assert model["search"]["cold"]["measurements"] > 0
    assert model["search"]["warm_measurements"] == 0
    assert result["summary"]["all_outputs_match"] is True
    table = out.with_suffix(".md").read_text()
    assert "| mlp | 1 |" in table and "## Search cost" in table
