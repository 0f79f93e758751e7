"""bench/precision.py runs end to end on a small model and renders its table; the choice of
the best rows leaves out those that miss the budget. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import precision
from bench._rounds import Measured
from tessera import backends
from tessera.config._accuracy import AccuracyBudget, AccuracyReport
from tessera.config._accuracy import MetricValue as Value

needs_both = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="bench/precision needs onnxruntime and openvino")


@needs_both
def test_the_table_runs_end_to_end_on_a_small_model(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    out = tmp_path / "out"
    assert precision.main(["--models", "mlp", "--rounds", "1", "--seconds", "0.02",
                           "--out", str(out)]) == 0
    result = json.loads((out / "precision.json").read_text())
    (model,) = result["results"]
    assert model["budget"] == "cosine>=0.999"  # mlp is no classifier: no top1
    assert (model["calibration"], model["validation"]) == (8, 8)
    rows = model["rows"]
    assert list(rows) == [precision.BASE, precision.OV, *precision.HAND, precision.TESS,
                          precision.TESS_THROUGHPUT]
    for label in (precision.BASE, precision.OV, precision.TESS):
        row = rows[label]
        assert row["ms"]["median_ms"] > 0 and row["meets_budget"] is True, (label, row)
        # fp32 rows match the reference; tessera may quantize within the budget
        assert row["accuracy"]["min_cosine"] > (0.999 if label == precision.TESS else 0.9999)
        assert row["accuracy"]["report"]["samples"] == 8
    assert rows[precision.BASE]["speedup_vs_ort"] == 1.0
    assert rows[precision.OV]["info"]["performance_hint"]
    assert rows[precision.OV]["info"]["precision"] in ("f32", "bf16", "f16")  # what it computes in
    plan = rows[precision.TESS]["info"]
    assert plan["partitions"] and all(p["precision"] for p in plan["partitions"])
    assert plan["reported_accuracy"]["met"] is True and plan["compile_seconds"] > 0
    assert model["best_native"] in (precision.BASE, precision.OV)
    for label in precision.HAND:  # each built and measured, or its error recorded
        assert "ms" in rows[label] or rows[label]["error"]
    throughput = model["throughput"]
    assert throughput[precision.BASE]["per_second"] > 0
    assert throughput[precision.TESS]["per_second"] > 0
    if rows[precision.TESS_THROUGHPUT].get("error"):  # objective not accepted: recorded
        assert precision.TESS_THROUGHPUT not in throughput
    else:
        assert throughput[precision.TESS_THROUGHPUT]["vs_latency_plan"] > 0
    table = (out / "precision.md").read_text()
    assert f"at commit `{result['commit']}`" in table and "## mlp" in table
    assert "speed-up vs ORT fp32 (higher is faster)" in table
    assert table.count(f"| {precision.TESS} |") == 2  # latency table and concurrent table


def _row(label: str, cosine: float) -> precision.Row:
    budget = AccuracyBudget.parse("cosine>=0.999")
    return precision.Row(label, run=lambda feeds: None,
                         accuracy=AccuracyReport(8, (Value("cosine", "y", cosine),), budget))


def _ms(*blocks: float) -> Measured:
    return Measured(sorted(blocks)[len(blocks) // 2], min(blocks), max(blocks), 10, blocks)


def test_a_row_that_misses_the_budget_is_never_the_best() -> None:
    rows = {precision.BASE: _row(precision.BASE, 1.0), precision.OV: _row(precision.OV, 1.0),
            "ORT int8 dynamic": _row("ORT int8 dynamic", 0.99),  # fastest, misses
            "ORT int8 static": _row("ORT int8 static", 0.9995),
            precision.TESS: _row(precision.TESS, 0.9999)}
    latency = {precision.BASE: _ms(4.0), precision.OV: _ms(5.0),
               "ORT int8 dynamic": _ms(1.0), "ORT int8 static": _ms(3.0),
               precision.TESS: _ms(2.0)}
    result = precision.summarise("m", AccuracyBudget.parse("cosine>=0.999"), rows, latency, {})
    assert result["best_native"] == precision.BASE
    assert result["best_hand_int8"] == "ORT int8 static"
    assert result["rows"]["ORT int8 dynamic"]["meets_budget"] is False
    assert result["rows"]["ORT int8 dynamic"]["speedup_vs_ort"] == 4.0
    assert result["tessera_vs_best_hand_int8"] == 1.5
    assert result["rows"][precision.TESS]["speedup_vs_ort"] == 2.0
    summary = precision.summary([result])
    assert summary["tessera_latency_vs_ort_geomean"] == 2.0
    assert summary["tessera_vs_best_hand_int8"] == {"m": 1.5}


def test_where_no_int8_row_by_hand_meets_the_budget_the_best_by_hand_is_a_native_one() -> None:
    rows = {precision.BASE: _row(precision.BASE, 1.0), precision.OV: _row(precision.OV, 1.0),
            precision.NNCF_DEFAULTS: _row(precision.NNCF_DEFAULTS, 0.99),  # fast, misses
            precision.TESS: _row(precision.TESS, 0.9995)}
    latency = {precision.BASE: _ms(8.0), precision.OV: _ms(3.0),
               precision.NNCF_DEFAULTS: _ms(1.0), precision.TESS: _ms(2.0)}
    result = precision.summarise("m", AccuracyBudget.parse("cosine>=0.999"), rows, latency, {})
    assert result["best_hand_int8"] is None and result["tessera_vs_best_hand_int8"] is None
    assert result["best_by_hand"] == precision.OV and result["tessera_vs_best_by_hand"] == 1.5
    summary = precision.summary([result])
    assert summary["tessera_vs_best_by_hand"] == {"m": 1.5}
    table = precision.markdown({"command": "c", "commit": "abc", "machine": "m", "rounds": 1,
                                "seconds": 0.1, "results": [result], "summary": summary})
    assert "vs the best by hand within the budget, native or int8 (higher: tessera " \
           "faster): m 1.50x" in table
    assert "best hand int8: none meets the budget (–); best by hand: OpenVINO defaults." \
        in table


def test_tessera_missing_the_budget_is_left_out_of_the_geometric_mean() -> None:
    rows = {precision.BASE: _row(precision.BASE, 1.0), precision.TESS: _row(precision.TESS, 0.9)}
    latency = {precision.BASE: _ms(4.0), precision.TESS: _ms(1.0)}
    result = precision.summarise("m", AccuracyBudget.parse("cosine>=0.999"), rows, latency, {})
    assert result["tessera_met_budget"] is False and result["tessera_vs_best_hand_int8"] is None
    assert precision.summary([result])["tessera_latency_vs_ort_geomean"] is None
    table = precision.markdown({"command": "c", "commit": "abc", "machine": "m", "rounds": 1,
                                "seconds": 0.1, "results": [result],
                                "summary": precision.summary([result])})
    assert "| tessera latency | 1.000 | 4.00x | 0.90000 | – | ✗ misses budget |" in table


def test_the_throughput_ratio_is_paired_against_the_latency_plan() -> None:
    rows = {label: _row(label, 1.0) for label in (precision.BASE, precision.TESS,
                                                  precision.TESS_THROUGHPUT)}
    concurrent = {precision.BASE: _ms(8.0, 8.0), precision.TESS: _ms(4.0, 8.0),
                  precision.TESS_THROUGHPUT: _ms(2.0, 4.0)}  # twice as many per second
    result = precision.summarise("resnet-tiny", AccuracyBudget.parse("cosine>=0.999"), rows,
                                 {}, concurrent)
    assert result["throughput"][precision.TESS_THROUGHPUT]["vs_latency_plan"] == 2.0
    per_call = precision.CONCURRENCY * precision.PER_CALLER
    assert result["throughput"][precision.BASE]["per_second"] == per_call * 1e3 / 8.0
    summary = precision.summary([result])
    assert summary["throughput_vs_latency_plan_cnn_geomean"] == 2.0
    table = precision.markdown({"command": "c", "commit": "abc", "machine": "m", "rounds": 1,
                                "seconds": 0.1, "results": [result], "summary": summary})
    assert ("| row | inferences/s | vs ORT fp32 (higher is faster) | vs tessera latency plan "
            "(higher is faster) |") in table


@pytest.mark.slow  # ~40 s of cold compiles in fresh processes; the rendering is checked below
@needs_both
def test_the_cold_compile_table_runs_each_compile_in_a_fresh_process(tmp_path: Path) -> None:
    from bench import precision_cold

    out = tmp_path / "out"
    assert precision_cold.main(["--models", "mlp", "--rounds", "2", "--out", str(out)]) == 0
    result = json.loads((out / "precision-cold.json").read_text())
    assert result["rounds"] == 2 and result["config"] == precision.CONFIG
    (row,) = result["rows"]
    assert row["model"] == "mlp" and len(row["fp32_seconds"]) == 2
    assert len(row["precision_seconds"]) == 2 and row["warm_seconds"] > 0
    assert row["ratio"] == round(row["precision_median"] / row["fp32_median"], 2)
    text = (out / "precision-cold.md").read_text()
    assert "| mlp | " in text and "ratio to fp32 (lower is cheaper)" in text
    assert len(row["exact_seconds"]) == 2 and row["exact_ratio"] > 0
    assert "python -m bench.precision_cold --models mlp --rounds 2" in text


def test_the_cold_compile_table_renders_the_committed_figures() -> None:
    from bench import precision_cold

    result = json.loads((Path(precision_cold.__file__).parent / "results" /
                         "precision-cold.json").read_text())
    text = precision_cold.table(result)
    assert f"at commit `{result['commit']}`" in text
    assert "ratio to fp32 (lower is cheaper)" in text
    for row in result["rows"]:
        assert f"| {row['model']} | " in text


def test_the_cold_compile_table_says_when_the_exact_search_was_skipped() -> None:
    from bench import precision_cold

    committed = json.loads((Path(precision_cold.__file__).parent / "results" /
                            "precision-cold.json").read_text())
    row = {**committed["rows"][0], "exact_seconds": [], "exact_median": None,
           "exact_ratio": None}
    text = precision_cold.table({**committed, "rows": [row]})
    line = next(x for x in text.splitlines() if x.startswith(f"| {row['model']} | "))
    assert "| – (--no-exact) | " in line and f"| {row['ratio']}x | – | " in line
