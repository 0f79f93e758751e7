"""The ONNX node-test suite on the implemented backends (a sample in CI; the full run is
`python -m tests.backends.node_suite --out docs/coverage.md`)."""

import collections

import pytest

from .node_suite import BACKENDS, collect_cases, run_suite, sample


@pytest.fixture(scope="module")
def outcomes() -> list:  # type: ignore[type-arg]
    cases = sample(collect_cases(), 300)
    assert len(cases) >= 300
    families = {case.name.removeprefix("test_").split("_")[0] for case in cases}
    assert len(families) >= 100  # the sample spans op families
    return run_suite(cases)


def test_every_claimed_case_passes_or_fails_natively_too(outcomes: list) -> None:  # type: ignore[type-arg]
    bugs = [o for o in outcomes if o.status == "fail"]
    assert bugs == [], bugs[:5]


def test_unclaimed_cases_are_skipped_with_a_reason(outcomes: list) -> None:  # type: ignore[type-arg]
    skips = [o for o in outcomes if o.status == "skip"]
    assert skips and all(o.reason for o in skips)


def test_coverage_is_high(outcomes: list) -> None:  # type: ignore[type-arg]
    counts = {b: collections.Counter(o.status for o in outcomes if o.backend == b)
              for b in BACKENDS}
    total = sum(counts["reference"].values())
    assert counts["reference"]["pass"] >= 0.9 * total
    assert counts["onnxruntime"]["pass"] >= 0.75 * total
