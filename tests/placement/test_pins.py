"""Pins given to the Python API: node names, 're:<regex>' and compiled patterns resolve to
node indices; anything else is a ConfigError that shows the accepted form and the value."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tessera
from tessera.errors import ConfigError, PartitionError, TesseraError
from tessera.ir import load_model
from tessera.placement import resolve_pins
from tessera.target import Target

from ..ir.models import mlp

FLOW = load_model(mlp()).dataflow
FORM = "pins must be a mapping of node name or 're:<regex>' to target"


def test_names_regexes_and_patterns_resolve() -> None:
    pins = {"relu": "onnxruntime", "re:mm.": "openvino", re.compile("add2"): "torch"}
    got = {FLOW.names[i]: str(t) for i, t in resolve_pins(FLOW, pins).items()}
    assert got == {"mm1": "openvino", "relu": "onnxruntime", "mm2": "openvino",
                   "add2": "torch"}
    assert resolve_pins(FLOW, [("softmax", Target("onnxruntime"))]) == {
        5: Target("onnxruntime")}
    assert resolve_pins(FLOW, None) == {} and resolve_pins(FLOW, {}) == {}


@pytest.mark.parametrize(("pins", "detail"), [
    (["relu"], "got ['relu'] (its item 'relu' is not a pair)"),
    ([("relu", "onnxruntime", "x")], "is not a pair"),
    (5, "got 5"),
    ("relu", "got 'relu'"),
    ({3: "onnxruntime"}, "the key 3 in {3: 'onnxruntime'} is neither a node name nor"),
])
def test_a_malformed_pin_spec_is_a_config_error(pins: object, detail: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_pins(FLOW, pins)  # type: ignore[arg-type]
    assert str(caught.value).startswith(FORM) and detail in str(caught.value)


@pytest.mark.parametrize("pins", [["relu"], 5])
def test_compile_reports_a_malformed_pin_spec(pins: object) -> None:
    with pytest.raises(ConfigError, match=re.escape(FORM)):
        tessera.compile(mlp(), "onnxruntime", pins=pins)  # type: ignore[arg-type]


def test_a_bad_regex_names_the_pin_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"pin 're:\(relu': '\(relu' is not a regular "
                                          r"expression \(.*\); escape special characters"):
        resolve_pins(FLOW, {"re:(relu": "onnxruntime"})


def test_a_bare_regex_is_refused_with_the_fix() -> None:
    with pytest.raises(PartitionError, match=r"pin 're.u' names no node; did you mean 'relu'"
                                             r"\?; use a node name, or 're:<regex>'"):
        resolve_pins(FLOW, {"re.u": "onnxruntime"})


junk = st.one_of(
    st.integers(), st.floats(), st.text(), st.binary(), st.booleans(),
    st.lists(st.one_of(st.text(), st.integers(), st.tuples(st.integers(), st.text()),
                       st.tuples(st.text(), st.text(), st.text())), min_size=1),
    st.dictionaries(st.one_of(st.integers(), st.floats(), st.binary()), st.text(),
                    min_size=1),
)


@given(junk)
def test_any_malformed_pin_spec_is_a_config_error(pins: object) -> None:
    with pytest.raises(ConfigError, match=re.escape(FORM)):
        resolve_pins(FLOW, pins)  # type: ignore[arg-type]


@given(st.text(max_size=12), st.sampled_from(["onnxruntime", "openvino", "nosuch", "cpu -x"]))
def test_any_string_pin_resolves_or_is_a_tessera_error(key: str, target: str) -> None:
    for spec in ({key: target}, {f"re:{key}": target}):
        try:
            resolved = resolve_pins(FLOW, spec)
        except TesseraError:
            continue
        assert resolved and all(FLOW.names[i] for i in resolved)
