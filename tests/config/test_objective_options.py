"""The race's objective as flow options: objective, latency-percentile, concurrency and
latency-budget parse every spelling they document, round-trip through the config's JSON,
enter the cache key, and a bad value is a ConfigError naming the option, the value and the
valid forms."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import CompilationConfig
from tessera.errors import ConfigError

percentiles = st.floats(min_value=0, max_value=100, exclude_min=True, allow_nan=False)
budgets = st.floats(min_value=0, exclude_min=True, allow_nan=False, allow_infinity=False)


def test_the_defaults_are_the_median_latency_of_one_caller() -> None:
    options = CompilationConfig.create("reference").options
    assert (options.objective, options.latency_percentile, options.concurrency,
            options.latency_budget) == ("latency", 50, 1, None)


@given(percentiles)
def test_a_percentile_parses_as_a_number_a_string_and_a_p_name(q: float) -> None:
    for given_as in (q, repr(q), f"p{q!r}", f" P{q!r} "):
        options = CompilationConfig.create("reference", latency_percentile=given_as).options
        assert options.latency_percentile == q


def test_a_whole_percentile_is_kept_whole() -> None:
    options = CompilationConfig.create("reference", latency_percentile="99.0").options
    assert options.latency_percentile == 99 and isinstance(options.latency_percentile, int)


@given(budgets)
def test_a_latency_budget_parses_with_or_without_its_unit(ms: float) -> None:
    for given_as in (ms, repr(ms), f"{ms!r}ms", f"{ms!r} ms"):
        options = CompilationConfig.create("reference", objective="throughput",
                                           latency_budget=given_as).options
        assert options.latency_budget == ms


@given(st.integers(min_value=1, max_value=10_000))
def test_concurrency_parses_as_a_number_and_a_string(n: int) -> None:
    for given_as in (n, str(n)):
        assert CompilationConfig.create("reference", concurrency=given_as).options.concurrency \
            == n


@given(st.sampled_from(["latency", "throughput"]), percentiles,
       st.integers(min_value=1, max_value=64), st.none() | budgets)
def test_the_objective_round_trips_through_the_config_json(
        objective: str, q: float, n: int, budget: float | None) -> None:
    if objective == "latency":
        budget = None  # a budget is for throughput
    config = CompilationConfig.create("onnxruntime", objective=objective, latency_percentile=q,
                                      concurrency=n, latency_budget=budget)
    again = CompilationConfig.from_json(config.to_json())
    assert again == config and again.cache_key() == config.cache_key()


def test_each_option_enters_the_cache_key() -> None:
    keys = {CompilationConfig.create("onnxruntime", **options).cache_key() for options in (
        {}, {"objective": "throughput"}, {"latency_percentile": 99}, {"concurrency": 2},
        {"objective": "throughput", "latency_budget": 5})}
    assert len(keys) == 5


def test_options_pass_through_to_a_config_given_as_one() -> None:
    base = CompilationConfig.create("onnxruntime")
    options = CompilationConfig.create(base, objective="throughput", concurrency=2).options
    assert (options.objective, options.concurrency) == ("throughput", 2)


@pytest.mark.parametrize(("option", "value", "words"), [
    ("objective", "speed", ["'speed'", "latency, throughput"]),
    ("objective", "throughpt", ["did you mean 'throughput'"]),
    ("objective", 3, ["3 is not one of latency, throughput"]),
    ("latency_percentile", 0, ["got 0", "(0, 100]", "p99"]),
    ("latency_percentile", "101", ["got '101'", "(0, 100]"]),
    ("latency_percentile", "p", ["got 'p'", "50 (the median)"]),
    ("latency_percentile", math.nan, ["(0, 100]"]),
    ("latency_percentile", True, ["got True"]),
    ("concurrency", 0, ["expected an integer >= 1, got 0"]),
    ("concurrency", "two", ["expected an integer, got 'two'"]),
    ("latency_budget", -1, ["got -1", "milliseconds > 0", "2.5ms"]),
    ("latency_budget", "fast", ["got 'fast'", "or none"]),
    ("latency_budget", math.inf, ["got inf"]),
])
def test_a_bad_value_names_the_option_the_value_and_the_valid_forms(
        option: str, value: object, words: list[str]) -> None:
    extra = {"objective": "throughput"} if option == "latency_budget" else {}
    with pytest.raises(ConfigError) as caught:
        CompilationConfig.create("reference", **extra, **{option: value})
    message = str(caught.value)
    assert f"bad value for option '{option}'" in message
    for word in words:
        assert word in message


def test_a_latency_budget_needs_the_throughput_objective() -> None:
    with pytest.raises(ConfigError, match=r"latency-budget.*objective=throughput"):
        CompilationConfig.create("reference", latency_budget=5)
    throughput = CompilationConfig.create("reference", objective="throughput", latency_budget=5)
    assert throughput.options.latency_budget == 5.0
    # dropping the budget again is how one goes back to the latency objective
    back = CompilationConfig.create(throughput, objective="latency", latency_budget="none")
    assert back.options.latency_budget is None
