"""target_options: a mapping of target kind to a mapping of attribute to value; anything else
is a ConfigError naming the key and the expected form."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import CompilationConfig
from tessera.errors import ConfigError, TesseraError


def test_a_mapping_of_attributes_applies() -> None:
    config = CompilationConfig.create("openvino", target_options={"ov": {"num-threads": 3}})
    assert [str(t) for t in config.backends_for_device("cpu")] == ["openvino -num-threads=3"]


@pytest.mark.parametrize(("options", "message"), [
    ({"openvino": 3}, "target_options['openvino'] must be a mapping of attribute name to "
                      "value, e.g. {'num-threads': 2}; got 3"),
    ({"openvino": ["num-threads", 2]}, "target_options['openvino'] must be a mapping"),
    ({"openvino": {2: 3}}, "got {2: 3}"),
    ({3: {"num-threads": 2}}, "target_options keys are target kind names, got 3"),
    (3, "target_options must map a target kind to a mapping of attribute to value, e.g. "
        "target_options={'onnxruntime': {'num-threads': 2}}; got 3"),
    ("openvino", "got 'openvino'"),
    ([], "got []"),
])
def test_a_malformed_target_options_is_a_config_error(options: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        CompilationConfig.create("openvino", target_options=options)  # type: ignore[arg-type]


values = st.one_of(st.none(), st.integers(), st.text(max_size=8), st.booleans(), st.floats())


@given(st.one_of(
    values,
    st.lists(values, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(["openvino", "ov", "onnxruntime"]), st.integers(),
                              st.text(max_size=8)),
                    st.one_of(values, st.lists(values, max_size=2),
                              st.dictionaries(st.one_of(st.text(max_size=12), st.integers()),
                                              values, max_size=2)),
                    max_size=2),
))
def test_any_target_options_builds_or_is_a_tessera_error(options: object) -> None:
    try:
        config = CompilationConfig.create("openvino",
                                          target_options=options)  # type: ignore[arg-type]
    except TesseraError:
        return
    assert config.backends_for_device("cpu")[0].kind.name == "openvino"
