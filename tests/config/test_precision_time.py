"""The precision search's time as a flow option: auto, unlimited or seconds, round-tripped
through the config's JSON and its cache key; a bad value names the option and the forms."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import CompilationConfig
from tessera.errors import ConfigError
from tessera.placement.judge._precision import _seconds, auto_seconds

seconds = st.floats(min_value=0, exclude_min=True, allow_nan=False, allow_infinity=False)


def test_the_default_is_auto_as_long_as_the_fp32_plan_took() -> None:
    assert CompilationConfig.create("reference").options.precision_time == "auto"
    assert auto_seconds(12.5) == 12.5  # the tests' own fixture lifts it for other tests
    assert _seconds("unlimited", 12.5) == math.inf
    assert _seconds(3.0, 12.5) == 3.0


@given(st.one_of(seconds, st.sampled_from(["auto", "unlimited", " Unlimited ", "AUTO"])))
def test_precision_time_round_trips_through_the_json_and_enters_the_cache_key(
        value: float | str) -> None:
    config = CompilationConfig.create("onnxruntime", precision_time=value)
    expected = value.strip().lower() if isinstance(value, str) else value
    assert config.options.precision_time == expected
    again = CompilationConfig.from_json(config.to_json())
    assert again == config and again.cache_key() == config.cache_key()
    if expected != "auto":
        assert config.cache_key() != CompilationConfig.create("onnxruntime").cache_key()


@pytest.mark.parametrize("value", [0, -1, "soon", math.inf, math.nan, ""])
def test_a_bad_precision_time_names_the_option_and_the_forms(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        CompilationConfig.create("reference", precision_time=value)
    message = str(caught.value)
    assert "bad value for option 'precision_time'" in message
    assert "auto, unlimited or a number of seconds > 0" in message
