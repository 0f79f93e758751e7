"""Property tests: str() and JSON round-trip to an equal Target, for every kind and type."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import Target
from tessera.target import KINDS, AttrType

from .strategies import ALL_TYPES_KIND, all_types_kind, target_dicts

KIND_NAMES = [name for name in KINDS.names() if not name.startswith("test-")]


def check_round_trips(target: Target) -> None:
    text = str(target)
    assert Target(text) == target, text
    assert str(Target(text)) == text
    assert Target.from_json(target.to_json()) == target
    assert hash(Target(text)) == hash(target)
    assert Target(target.to_dict(include_defaults=True)) == target


@pytest.mark.parametrize("kind_name", KIND_NAMES)
@given(data=st.data())
def test_round_trips_for_every_kind(kind_name: str, data: st.DataObject) -> None:
    check_round_trips(Target(data.draw(target_dicts(kind_name))))


@given(data=st.data())
def test_round_trips_for_every_attribute_type(data: st.DataObject) -> None:
    with all_types_kind() as kind:
        assert {spec.type for spec in kind.attrs} >= set(AttrType)
        check_round_trips(Target(data.draw(target_dicts(ALL_TYPES_KIND))))


@given(data=st.data())
def test_nested_targets_round_trip(data: st.DataObject) -> None:
    devices = data.draw(target_dicts("composite"))
    target = Target(devices)
    assert all(isinstance(t, Target) for t in target.attrs["devices"])
    check_round_trips(target)


def test_every_registered_kind_is_covered() -> None:
    assert set(KIND_NAMES) >= {"cpu", "cuda", "composite", "onnxruntime", "openvino", "torch",
                               "iree", "tvm", "reference", "tensorrt"}


@given(data=st.data())
def test_composite_spellings_give_the_same_target(data: st.DataObject) -> None:
    canonical = data.draw(target_dicts("composite"))
    spelled = {{"devices": "accelerators", "host": "target_host"}.get(k, k): v
               for k, v in canonical.items()}
    assert Target(spelled) == Target(canonical)
    check_round_trips(Target(spelled))
