"""Pins given to the Python API: node names, 're:<regex>' and compiled patterns resolve to
node indices; anything else is a ConfigError that shows the accepted form and the value."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import tessera
import tessera.placement
from tessera.cli import cli
from tessera.errors import ConfigError, PartitionError, TesseraError
from tessera.ir import load_model
from tessera.placement.search import SupportTable, pinned_devices, resolve_pins
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


# -- a pin names a backend, a device target or a named target of the config ----------------
CONFIG = tessera.CompilationConfig.create(
    {"targets": [{"name": "fast-cpu", "target": "cpu -mcpu=skylake"}, "cpu", "onnxruntime",
                 "openvino"]})
BOTH = all(tessera.backends.get(b).is_available().ok for b in ("onnxruntime", "openvino"))


def _pinned(pins: dict[str, object], config: tessera.CompilationConfig = CONFIG
            ) -> dict[str, str]:
    return {FLOW.names[i]: str(t) for i, t in resolve_pins(FLOW, pins, config).items()}


def test_a_pin_names_a_backend_a_device_target_or_a_named_target() -> None:
    assert _pinned({"relu": "openvino", "mm1": "cpu", "mm2": "fast-cpu", "add1": "llvm",
                    "softmax": "cpu -mcpu=skylake"}) == {
        "mm1": "cpu", "add1": "cpu", "relu": "openvino", "mm2": "cpu -mcpu=skylake",
        "softmax": "cpu -mcpu=skylake"}
    # a named target comes with the config's attributes
    threaded = tessera.CompilationConfig.create(
        "onnxruntime -num-threads=2,onnxruntime -opt-level=basic")
    assert _pinned({"relu": "onnxruntime", "mm1": "onnxruntime-1"}, threaded) == {
        "mm1": "onnxruntime -opt-level=basic", "relu": "onnxruntime -num-threads=2"}
    # a bare device kind is the config's least-specialised target of that device
    specialised = tessera.CompilationConfig.create("onnxruntime,cpu -mcpu=skylake")
    assert _pinned({"relu": "llvm"}, specialised) == {"relu": "cpu -mcpu=skylake"}


def test_the_device_targets_asked_for_are_what_placement_passes_on() -> None:
    pins = resolve_pins(FLOW, {"relu": "openvino", "mm1": "cpu", "mm2": "fast-cpu"}, CONFIG)
    assert {FLOW.names[i]: str(t) for i, t in pinned_devices(pins).items()} == {
        "mm1": "cpu", "mm2": "cpu -mcpu=skylake"}


@pytest.mark.parametrize(("value", "message"), [
    ("dsp-cpu", "pin 'relu': 'dsp-cpu' names no named target of the config, backend or "
                "device target; did you mean 'fast-cpu' or 'cpu'? (named targets: cpu, "
                "onnxruntime, "
                "openvino, fast-cpu; backends: "),
    ("cuda", "pin 'relu': device target 'cuda' is not one of the config's device targets "
             "(cpu, cpu -mcpu=skylake); add it to the targets to pin to it (named targets: "
             "cpu, onnxruntime, openvino, fast-cpu; backends: "),
    ("cpu -mcpu=znver4", "pin 'relu': device target 'cpu -mcpu=znver4' is not one of the "
                         "config's device targets (cpu, cpu -mcpu=skylake)"),
    ("cpu -cores=2", "pin 'relu': device target 'cpu -cores=2' is not valid: unknown option "
                     "'-cores' for target kind 'cpu'"),
    ("onnxruntime -threads=2", "pin 'relu': backend target 'onnxruntime -threads=2' is not "
                               "valid: unknown option '-threads'"),
    ("composite -devices=onnxruntime", "pin 'relu': 'composite -devices=onnxruntime' is a "
                                       "composite target; a pin names one backend, device "
                                       "target or named target (named targets: "),
])
def test_a_pin_error_says_which_kind_of_name_failed_and_lists_the_valid_ones(
        value: str, message: str) -> None:
    with pytest.raises(PartitionError) as caught:
        resolve_pins(FLOW, {"relu": value}, CONFIG)
    assert str(caught.value).startswith(message)
    if "(named targets" in message:
        assert str(caught.value).endswith(
            f"backends: {', '.join(tessera.backends.names())}; device targets: cpu, "
            "cpu -mcpu=skylake)")


def test_without_a_config_a_pin_names_a_backend_or_a_device_kind() -> None:
    assert {FLOW.names[i]: str(t) for i, t in resolve_pins(FLOW, {"relu": "cpu"}).items()} \
        == {"relu": "cpu"}
    with pytest.raises(PartitionError) as caught:
        resolve_pins(FLOW, {"relu": "gpu0"})
    assert str(caught.value).startswith("pin 'relu': 'gpu0' names no backend or device "
                                        "target (backends: ")
    assert str(caught.value).endswith("device targets: cpu, cuda)")


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_a_node_pinned_to_a_device_goes_to_that_devices_first_backend_that_runs_it() -> None:
    plan = tessera.partition(mlp(), "openvino,onnxruntime", partitioner="greedy",
                             pins={"relu": "cpu"}, verify=True)
    assert {n: str(p.target) for p in plan.partitions for n in p.nodes}["relu"] == "openvino"
    assert plan.decisions["relu"] == ("pinned to cpu; greedy: openvino is the first target in "
                                      "priority order that runs it")
    assert list(plan.reasons["relu"]) == ["openvino", "onnxruntime", "reference"]


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_a_named_device_pin_compiles_and_agrees_with_the_reference() -> None:
    compiled = tessera.compile(mlp(), CONFIG, pins={"re:mm.": "fast-cpu"}, verify=True)
    table = SupportTable.build(
        compiled.model, CONFIG, pins=resolve_pins(FLOW, {"re:mm.": "fast-cpu"}, CONFIG))
    assert {FLOW.names[i]: str(t) for i, t in table.devices.items()} == {
        "mm1": "cpu -mcpu=skylake", "mm2": "cpu -mcpu=skylake"}
    assert table.pinned == {}
    device_of = {n: str(p.device) for p in compiled.plan.partitions for n in p.nodes}
    assert device_of["mm1"] == device_of["mm2"] == "cpu -mcpu=skylake"
    assert {device_of[n] for n in device_of if n not in ("mm1", "mm2")} <= {
        "cpu", "cpu -mcpu=skylake"}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    want = tessera.backends.get("reference").compile(mlp()).run(feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], want["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_the_cli_takes_a_device_pin_and_reports_a_bad_one(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    ok = CliRunner().invoke(cli, ["explain", str(model), "-t", "onnxruntime,openvino",
                                  "-O", "partitioner=greedy", "--pin", "relu=cpu"])
    assert ok.exit_code == 0, ok.stderr
    assert "pinned to cpu; greedy: onnxruntime is the first target" in ok.stdout
    bad = CliRunner().invoke(cli, ["explain", str(model), "-t", "onnxruntime,openvino",
                                   "--pin", "relu=gpu"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: pin 'relu': 'gpu' names no named target of the "
                                 "config, backend or device target; did you mean 'cpu'? "
                                 "(named targets: cpu, onnxruntime, openvino; backends: ")


@given(st.text(max_size=16))
def test_any_string_pin_resolves_under_a_config_or_is_a_tessera_error(value: str) -> None:
    try:
        resolved = resolve_pins(FLOW, {"relu": value}, CONFIG)
    except TesseraError:
        return
    target = resolved[FLOW.names.index("relu")]
    assert target.is_external_codegen or target in CONFIG.targets
