"""Shape profiles: the string form parses back to the same profile (sums and zeros included),
the config keeps it, and each bad profile is a ConfigError naming the dimension and the
value."""

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


def _is_number(name: str) -> bool:  # a sum reads such a part as a constant, not a name
    return name.lstrip("-").isdigit()


@st.composite
def dims(draw: st.DrawFn, name: str) -> DimProfile:
    if draw(st.booleans()):
        low, opt, high = sorted(draw(st.tuples(sizes, sizes, sizes)))
        return DimProfile(name, (opt,), (1.0,), draw(st.sampled_from([0, low])), high)
    values = draw(st.lists(sizes, min_size=1, max_size=2, unique=True))
    if draw(st.booleans()):  # a listed 0: checked, never measured, no weight
        values.insert(draw(st.integers(0, len(values))), 0)
    return DimProfile(name, tuple(values), tuple(1.0 if v == 0 else draw(weights)
                                                 for v in values))


@st.composite
def profiles_with_sums(draw: st.DrawFn) -> ShapeProfile:
    """Dimensions with sizes, then sums of them (and of earlier sums), so never a cycle."""
    given = draw(st.lists(names.filter(lambda n: not _is_number(n)), min_size=1, max_size=3,
                          unique=True))
    made = [draw(dims(n)) for n in given]
    extra = draw(st.lists(names, max_size=2, unique=True).map(
        lambda ns: [n for n in ns if n not in given]))
    for name in extra:
        terms = draw(st.lists(st.sampled_from([d.name for d in made if not _is_number(d.name)]),
                              min_size=1, max_size=3))
        made.append(DimProfile(name, (), (), terms=tuple(sorted(terms)),
                               constant=draw(st.integers(0, 9))))
    return ShapeProfile(tuple(sorted(made, key=lambda d: d.name)))


profiles = st.one_of(
    st.lists(names, min_size=1, max_size=3, unique=True).flatmap(
        lambda ns: st.tuples(*(dims(n) for n in sorted(ns)))).map(ShapeProfile),
    profiles_with_sums())


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
    given = [d for d in profile.dims if not d.is_sum]
    assert len(points) == math.prod(len(d.measured) for d in given) <= MAX_POINTS
    assert sum(p.weight for p in points) == pytest.approx(
        math.prod(sum(w for _, w in d.measured) for d in given))
    for point in points:  # every sum computed from the sizes measured; no size 0 measured
        sizes = point.as_dict()
        assert all(sizes[d.name] >= 1 for d in given)
        for dim in profile.dims:
            if dim.is_sum:
                assert sizes[dim.name] == sum(sizes[t] for t in dim.terms) + dim.constant


def test_the_forms_read_as_written() -> None:
    profile = ShapeProfile.parse({"batch": [1, 4], "sequence": (1, 128, 512)})
    assert str(profile) == "batch=1,4;sequence=1:128:512"
    assert ShapeProfile.parse("sequence=1:128:512 batch=1,4") == profile
    weighted = ShapeProfile.parse("sequence=32@1,128@3")
    assert weighted == ShapeProfile.parse({"sequence": {32: 1, 128: 3}})
    assert [(p.as_dict(), p.weight) for p in weighted.points(["sequence", "batch"])] == [
        ({"sequence": 32, "batch": 1}, 1.0), ({"sequence": 128, "batch": 1}, 3.0)]


@pytest.mark.parametrize(("spec", "words"), [
    ("batch=-1,4", ["dimension 'batch'", "at least 0", "'-1'"]),
    ("batch=0", ["dimension 'batch'", "never measured", "a size of at least 1", "batch=0,1"]),
    ("past=0:0:63", ["dimension 'past'", "range 0:0:63", "optimum of at least 1", "0:1:63"]),
    ("past=0@2,16", ["dimension 'past'", "size 0", "takes no weight"]),
    ("sequence=512:128:1", ["dimension 'sequence'", "min <= opt <= max", "512:128:1"]),
    ("sequence=1:2", ["dimension 'sequence'", "min:opt:max", "'1:2'"]),
    ("batch=1,1", ["dimension 'batch'", "size 1 is given twice"]),
    ("batch=1@0", ["dimension 'batch'", "weights are numbers above 0"]),
    ("batch", ["entry 'batch'", "NAME=VALUES"]),
    ("batch=1;batch=2", ["names dimension 'batch' twice"]),
    ("batch=1,2,3;sequence=1,2,3", ["has 9 points", f"at most {MAX_POINTS}"]),
    # sums
    ("total=past+sequence;sequence=1", ["dimension 'total'", "the sum past+sequence",
                                        "dimension 'past'", "does not give"]),
    ("total=pats+1;past=0:16:63", ["dimension 'pats'", "did you mean 'past'"]),
    ("total=total+1", ["dimension 'total'", "'total' itself"]),
    ("a=b+1;b=c+1;c=a+1", ["'a', 'b', 'c'", "cycle", "a=b+1; b=c+1; c=a+1",
                           "sizes of its own"]),
    ("total=1+2", ["dimension 'total'", "names no dimension", "total=3"]),
    ("total=past+-1;past=4", ["dimension 'total'", "at least 0", "'-1'"]),
    ("total=past++sequence;past=4;sequence=1", ["dimension 'total'", "joined by '+'",
                                                "'past++sequence'"]),
    ("batch=x", ["dimension 'batch'", "'x'", "past_sequence+sequence"]),
])
def test_a_bad_profile_is_a_config_error_naming_it(spec: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        CompilationConfig.create("reference", shapes=spec)
    message = str(caught.value)
    assert "option 'shapes'" in message
    for word in words:
        assert word in message


def test_a_sum_and_an_empty_past_read_as_written() -> None:
    spec = "batch=1;sequence=1:1:64;past_sequence=0:16:63;total_sequence=past_sequence+sequence"
    profile = ShapeProfile.parse(spec)
    assert str(profile) == ("batch=1;past_sequence=0:16:63;sequence=1:1:64;"
                            "total_sequence=past_sequence+sequence")  # sorted by name
    assert ShapeProfile.parse("total_sequence = sequence + past_sequence  batch=1 "
                              "sequence=1:1:64 past_sequence=0:16:63") == profile
    assert ShapeProfile.parse({"batch": [1], "sequence": (1, 1, 64),
                               "past_sequence": (0, 16, 63),
                               "total_sequence": "past_sequence+sequence"}) == profile
    total = profile.get("total_sequence")
    assert total is not None and total.is_sum and total.values == () and not total.is_range
    symbols = ["batch", "sequence", "total_sequence", "past_sequence"]
    assert [p.as_dict() for p in profile.points(symbols)] == [
        {"batch": 1, "sequence": 1, "total_sequence": 17, "past_sequence": 16}]
    # a range's end, the others at the point, the sum computed again
    assert profile.complete({"batch": 1, "sequence": 64, "past_sequence": 16,
                             "total_sequence": 17})["total_sequence"] == 80
    # a constant, and a listed 0: checked, not measured
    plus = ShapeProfile.parse("past=0,4@3;total=1+past+2")
    assert str(plus) == "past=0,4@3;total=past+3"
    assert [(p.as_dict(), p.weight) for p in plus.points(["past", "total"])] == [
        ({"past": 4, "total": 7}, 3.0)]
    past = plus.get("past")
    assert past is not None and past.checked == (0,) and past.measured == ((4, 3.0),)
    assert ShapeProfile.parse("a=b+0;b=2").points(["a", "b"])[0].as_dict() == {"a": 2, "b": 2}
    assert str(ShapeProfile.parse("a=b+0;b=2")) == "a=b+0;b=2"  # still reads as a sum


def test_the_sum_enters_the_cache_key() -> None:
    keys = {CompilationConfig.create("reference", shapes=spec).cache_key() for spec in (
        "past=0:16:63;sequence=1;total=past+sequence",
        "past=0:16:63;sequence=1;total=past+sequence+1",
        "past=0:16:63;sequence=1;total=17")}
    assert len(keys) == 3


def test_a_sum_the_inputs_break_is_an_input_error_naming_it() -> None:
    profile = ShapeProfile.parse("past=0:16:63;sequence=1:1:64;total=past+sequence")
    profile.check_sums({"sequence": (5, "ids"), "past": (0, "cache"), "total": (5, "mask")})
    profile.check_sums({"sequence": (5, "ids"), "total": (9, "mask")})  # past unseen
    with pytest.raises(InputError) as raised:
        profile.check_sums({"sequence": (2, "ids"), "past": (4, "cache"),
                            "total": (7, "mask")})
    message = str(raised.value)
    for words in ("input 'mask'", "dimension 'total' is 7", "past+sequence = 4+2 = 6",
                  "past=4 in 'cache'", "sequence=2 in 'ids'"):
        assert words in message


def test_a_size_outside_the_range_is_an_input_error_naming_it() -> None:
    profile = ShapeProfile.parse("sequence=8:64:128")
    profile.check_size("sequence", 128, "input 'ids'")
    profile.check_size("batch", 1000, "input 'ids'")  # not in the profile: any size
    with pytest.raises(InputError, match=r"input 'ids': dimension 'sequence' is 129, outside "
                                         r"the profile's range 8\.\.128.*sequence=8:64:129"):
        profile.check_size("sequence", 129, "input 'ids'")
    with pytest.raises(InputError, match=r"dimension 'sequence' is 7, outside .* 8\.\.128"):
        profile.check_size("sequence", 7, "input 'ids'")
