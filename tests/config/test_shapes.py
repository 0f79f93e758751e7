"""Shape profiles: the string form parses back to the same profile, the config keeps it, and
each bad profile is a ConfigError naming the dimension and the value."""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.config import CompilationConfig
from tessera.config._shapes import MAX_POINTS, DimProfile, ShapeProfile
from tessera.errors import ConfigError, InputError

names = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
sizes = st.integers(1, 2**31 - 1)
weights = st.one_of(st.just(1.0), st.floats(1e-6, 1e6, allow_nan=False, allow_infinity=False))


@st.composite
def dims(draw: st.DrawFn, name: str) -> DimProfile:
    if draw(st.booleans()):
        low, opt, high = sorted(draw(st.tuples(sizes, sizes, sizes)))
        return DimProfile(name, (opt,), (1.0,), low, high)
    values = draw(st.lists(sizes, min_size=1, max_size=2, unique=True))
    return DimProfile(name, tuple(values), tuple(draw(weights) for _ in values))


profiles = st.lists(names, min_size=1, max_size=3, unique=True).flatmap(
    lambda ns: st.tuples(*(dims(n) for n in sorted(ns)))).map(ShapeProfile)


@given(profiles)
def test_a_profile_parses_back_from_its_string(profile: ShapeProfile) -> None:
    assert ShapeProfile.parse(str(profile)) == profile
    config = CompilationConfig.create("reference", shapes=str(profile))
    assert config.options.shapes == profile
    assert CompilationConfig.from_json(config.to_json()).options.shapes == profile


@given(profiles)
def test_the_points_are_every_combination_weighted_by_the_product(profile: ShapeProfile
                                                                  ) -> None:
    points = profile.points(profile.names)
    assert len(points) == math.prod(len(d.values) for d in profile.dims) <= MAX_POINTS
    assert sum(p.weight for p in points) == pytest.approx(
        math.prod(sum(d.weights) for d in profile.dims))


def test_the_forms_read_as_written() -> None:
    profile = ShapeProfile.parse({"batch": [1, 4], "sequence": (1, 128, 512)})
    assert str(profile) == "batch=1,4;sequence=1:128:512"
    assert ShapeProfile.parse("sequence=1:128:512 batch=1,4") == profile
    weighted = ShapeProfile.parse("sequence=32@1,128@3")
    assert weighted == ShapeProfile.parse({"sequence": {32: 1, 128: 3}})
    assert [(p.as_dict(), p.weight) for p in weighted.points(["sequence", "batch"])] == [
        ({"sequence": 32, "batch": 1}, 1.0), ({"sequence": 128, "batch": 1}, 3.0)]


@pytest.mark.parametrize(("spec", "words"), [
    ("batch=-1,4", ["dimension 'batch'", "at least 1", "'-1'"]),
    ("batch=0", ["dimension 'batch'", "at least 1", "'0'"]),
    ("sequence=512:128:1", ["dimension 'sequence'", "min <= opt <= max", "512:128:1"]),
    ("sequence=1:2", ["dimension 'sequence'", "min:opt:max", "'1:2'"]),
    ("batch=1,1", ["dimension 'batch'", "size 1 is given twice"]),
    ("batch=x", ["dimension 'batch'", "'x'"]),
    ("batch=1@0", ["dimension 'batch'", "weights are numbers above 0"]),
    ("batch", ["entry 'batch'", "NAME=VALUES"]),
    ("batch=1;batch=2", ["names dimension 'batch' twice"]),
    ("batch=1,2,3;sequence=1,2,3", ["has 9 points", f"at most {MAX_POINTS}"]),
])
def test_a_bad_profile_is_a_config_error_naming_it(spec: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        CompilationConfig.create("reference", shapes=spec)
    message = str(caught.value)
    assert "option 'shapes'" in message
    for word in words:
        assert word in message


def test_a_size_outside_the_range_is_an_input_error_naming_it() -> None:
    profile = ShapeProfile.parse("sequence=8:64:128")
    profile.check_size("sequence", 128, "input 'ids'")
    profile.check_size("batch", 1000, "input 'ids'")  # not in the profile: any size
    with pytest.raises(InputError, match=r"input 'ids': dimension 'sequence' is 129, outside "
                                         r"the profile's range 8\.\.128.*sequence=8:64:129"):
        profile.check_size("sequence", 129, "input 'ids'")
    with pytest.raises(InputError, match=r"dimension 'sequence' is 7, outside .* 8\.\.128"):
        profile.check_size("sequence", 7, "input 'ids'")
