"""A bounded selection of the ONNX backend test suite, run through tessera and through ONNX
Runtime alone in one run (`bench.onnx_suite`; the whole suite is
`python -m bench.onnx_suite`). Every category is in it, and every kind of case that tessera
once failed where ONNX Runtime alone passed: ai.onnx.ml, sequences and optionals, Resize,
Range and attention in their expanded forms, MeanVarianceNormalization, float16 split across
backends."""

from __future__ import annotations

import re

import pytest

from bench.onnx_suite import CATEGORIES, Comparison, compare, is_random

# every 12th node case by name: spread over op families
NODE_SAMPLE = 12
CASES = [
    r"test_ai_onnx_ml_.*", r"test_sequence_.*", r"test_optional_.*",
    r"test_split_to_sequence_.*", r"test_loop16_seq_none", r"test_if_opt",
    r"test_identity_(opt|sequence)", r"test_resize_upsample_sizes_nearest_not_.*",
    r"test_resize_.*cubic.*exclude.*", r"test_range_.*_expanded", r"test_mvn.*",
    r"test_attention_4d_causal_fp16_expanded", r"test_flexattention_double_expanded_ver26",
    r"test_linear_attention_linear_expanded", r"test_dynamicquantizelinear_expanded",
    r"test_softmax_(default|negative)_axis_expanded", r"test_bernoulli",
    r"test_shufflenet",  # a real model
    r"test_sign_model", r"test_single_relu_model", r"test_expand_shape_model[0-9]",
    r"test_Conv2d_.*", r"test_PReLU_.*", r"test_operator_(add|conv|maxpool|view).*",
]


def _node_sample() -> list[str]:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = sorted(case.name for case in collect_testcases())
    return [re.escape(name) for name in names[::NODE_SAMPLE]]


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return compare([*CASES, *_node_sample()])[0]


def test_every_category_runs(comparison: Comparison) -> None:
    categories = {r.category for r in comparison.tessera}
    assert categories == set(CATEGORIES)
    assert len(comparison.tessera) == len(comparison.onnxruntime) > 250


def test_tessera_fails_no_case_that_onnxruntime_alone_passes(comparison: Comparison) -> None:
    assert [(t.case, t.error, t.message) for t, _ in comparison.worse()] == []
    # the random ops stand outside the bar: no run reproduces the recorded draws
    assert all(is_random(t.case) for t in comparison.tessera
               if t.status != "pass" and t.case.startswith("test_bernoulli"))


def test_every_failure_is_a_tessera_error_or_an_answer_the_suite_rejects(
        comparison: Comparison) -> None:
    assert comparison.untyped() == []
    for t in comparison.tessera:
        if t.status == "error":
            assert t.error.startswith("tessera."), t


def test_the_kinds_once_refused_now_pass(comparison: Comparison) -> None:
    passed = {t.case for t in comparison.tessera if t.status == "pass"}
    ml = [t.case for t in comparison.tessera if t.case.startswith("test_ai_onnx_ml_")]
    assert len(ml) >= 8 and set(ml) <= passed
    for case in ("test_sequence_map_add_2_sequences", "test_split_to_sequence_2",
                 "test_optional_get_element_sequence", "test_mvn",
                 "test_attention_4d_causal_fp16_expanded",
                 "test_resize_upsample_sizes_nearest_not_larger",
                 "test_softmax_negative_axis_expanded", "test_shufflenet"):
        assert case in passed, case
    # and tessera does better than ONNX Runtime alone somewhere in the selection
    assert comparison.better()


def test_the_committed_whole_suite_run_meets_the_bar() -> None:
    """`python -m bench.onnx_suite`'s committed run: its table is its JSON rendered, tessera
    fails nothing ONNX Runtime alone passes, and each failure they share has its reason."""
    import json
    from pathlib import Path

    from bench.onnx_suite import RESULTS, from_json, markdown

    results = json.loads((RESULTS / "onnx-suite.json").read_text())
    run = from_json(results)
    section = markdown(run, results["meta"])
    assert (RESULTS / "onnx-suite.md").read_text() == "# " + section.removeprefix("## ")
    coverage = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"
    assert section in coverage.read_text()
    assert len(run.tessera) == len(run.onnxruntime) > 2000
    assert run.worse() == [] and run.untyped() == []
    assert "other" not in run.shared_failures()
    assert f"at {results['meta']['commit']} on " in section
