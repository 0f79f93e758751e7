"""The light-zoo and defaults tables render from their committed JSON exactly as committed,
and say what a reader checks first: the CPU, the command and commit, the ratio per row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import defaults, light_zoo

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


@pytest.mark.parametrize(("module", "name"), [(light_zoo, "light-zoo"), (defaults, "defaults")])
def test_the_committed_table_is_its_json_rendered(module: object, name: str) -> None:
    result = json.loads((RESULTS / f"{name}.json").read_text())
    text = module.markdown(result)  # type: ignore[attr-defined]
    assert text == (RESULTS / f"{name}.md").read_text()
    assert f"Command: `{result['command']}` at commit `{result['commit']}`" in text
    assert "Machine: " in text and "cores" in text
    for row in result["models"]:
        assert f"| {row['model']} |" in text and f"{row['ratio']:.3f}" in text


def test_the_light_zoo_rows_meet_their_bar() -> None:
    result = json.loads((RESULTS / "light-zoo.json").read_text())
    assert len(result["models"]) == 9
    for row in result["models"]:
        assert row["agrees_with_onnxruntime"] and row["on_reference"] == 0
        assert row["ratio"] >= 0.95, row["model"]
