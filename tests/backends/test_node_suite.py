"""The ONNX node-test suite on every available backend, in three modes (a sample in CI; the
full run is `python -m tests.backends.node_suite --out docs/coverage.md`)."""

import collections

import pytest

from .node_suite import BACKENDS, MODES, collect_cases, fallback_gaps, run_suite, sample

# every case compiles the whole compiler pipeline on these (IREE: about 1 s a case): a
# smaller sample, protocol only
SLOW = {"iree": 16, "tvm": 24}


@pytest.fixture(scope="module")
def cases() -> list:  # type: ignore[type-arg]
    chosen = sample(collect_cases(), 300)
    assert len(chosen) >= 300
    families = {case.name.removeprefix("test_").split("_")[0] for case in chosen}
    assert len(families) >= 100  # the sample spans op families
    return chosen


@pytest.fixture(scope="module")
def outcomes(cases: list) -> list:  # type: ignore[type-arg]
    found = []
    for backend in BACKENDS:
        if backend in SLOW:
            found += run_suite(sample(cases, SLOW[backend]), [backend], ["protocol"])
        else:
            found += run_suite(cases, [backend], MODES)
    return found


def test_every_claimed_case_passes_or_fails_natively_too(outcomes: list) -> None:  # type: ignore[type-arg]
    bugs = [o for o in outcomes if o.status == "fail" and o.mode != "fallback"]
    assert bugs == [], bugs[:5]


def test_with_fallback_every_case_the_reference_passes_passes(outcomes: list) -> None:  # type: ignore[type-arg]
    """The acceptance: tessera with fallback to the reference passes at least every case that
    the reference passes natively (backends refuse their known deviations: DEVIATIONS)."""
    assert fallback_gaps(outcomes) == {}


def test_unclaimed_cases_are_skipped_with_a_reason(outcomes: list) -> None:  # type: ignore[type-arg]
    skips = [o for o in outcomes if o.status == "skip"]
    assert skips and all(o.reason for o in skips)


def test_coverage_is_high(outcomes: list) -> None:  # type: ignore[type-arg]
    counts = {(o.backend, o.mode): collections.Counter() for o in outcomes}
    for o in outcomes:
        counts[o.backend, o.mode][o.status] += 1
    total = sum(counts["reference", "protocol"].values())
    assert counts["reference", "protocol"]["pass"] >= 0.9 * total
    assert counts["onnxruntime", "protocol"]["pass"] >= 0.75 * total
    assert counts["onnxruntime", "fallback"]["pass"] >= 0.9 * total
