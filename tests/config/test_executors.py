"""Named executors: one config describing several executors, each with its named targets,
host by name, executor kind, runtime and flow options; loading, validation, picking one,
round trips and what stays out of tuning keys."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tessera
from tessera import CompilationConfig, Target, backends
from tessera.config import ExecutorConfig
from tessera.errors import ConfigError

from ..ir.models import mlp
from ..target.strategies import TEXT

ROOT = Path(__file__).parent.parent.parent
EXAMPLE_FILE = ROOT / "docs" / "examples" / "executors.json"

# As such configs are often written by hand: `llvm` for the CPU, lists of one host name,
# executor and runtime names of other compilers, commas before closing brackets.
AS_WRITTEN = """
{
"targets": {
"dsp-cpu": {
"kind": "llvm",
"mcpu": "cortex-a72",
},
"gpu": {
"kind": "cuda",
},
"low-power-cpu": {
"kind": "llvm",
"mcpu": "cortex-m0",
},
},
"executors": {
"dsp": {
"targets": ["dsp-cpu", "gpu"],
"target_host": ["dsp-cpu"],
"executor": "vm",
"runtime": "c++",
},
"low-power": {
"targets": ["low-power-cpu"],
"target_host": ["low-power-cpu"],
"executor": "aot",
"runtime": "c",
"flow-config": {
"link-params": true,
"enable-byoc": ["onnxruntime"],
},
},
},
}
"""


def strings(config: CompilationConfig) -> list[str]:
    return [str(t) for t in config.targets]


# -- loading ------------------------------------------------------------------------------
def test_the_example_loads_as_written() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    assert config.executor_names == ("dsp", "low-power")
    assert config.named_targets == {
        "dsp-cpu": Target("cpu -mcpu=cortex-a72"), "gpu": Target("cuda"),
        "low-power-cpu": Target("cpu -mcpu=cortex-m0"), "onnxruntime": Target("onnxruntime")}
    dsp = config.executor_config("dsp")
    assert strings(dsp) == ["cpu -mcpu=cortex-a72", "cuda"]
    assert [e.name for e in dsp.entries] == ["dsp-cpu", "gpu"]
    assert dsp.host == Target("cpu -mcpu=cortex-a72")
    assert (dsp.executor, dsp.runtime, dsp.priority, dsp.executors) == ("graph", "python", (), ())
    low = config.executor_config("low-power")
    assert strings(low) == ["cpu -mcpu=cortex-m0", "onnxruntime"]
    assert low.host == Target("cpu -mcpu=cortex-m0")
    assert low.priority == (Target("onnxruntime"),)  # enable-byoc is the backend list
    assert low.options.link_params is True
    assert str(config) == ("dsp: cpu -mcpu=cortex-a72,cuda; "
                           "low-power: cpu -mcpu=cortex-m0,onnxruntime")
    # The flat fields read as the first executor's.
    assert (config.entries, config.host) == (dsp.entries, dsp.host)


def test_every_input_form_of_the_example_agrees(tmp_path: Path) -> None:
    expected = CompilationConfig.create(AS_WRITTEN)
    documented = json.loads(EXAMPLE_FILE.read_text())
    path = tmp_path / "executors.json"
    path.write_text(AS_WRITTEN)
    for value in (documented, json.dumps(documented), EXAMPLE_FILE, str(EXAMPLE_FILE), path,
                  expected, expected.to_dict()):
        assert CompilationConfig.create(value) == expected
    assert CompilationConfig.from_json(AS_WRITTEN) == expected


def test_the_readme_shows_the_documented_example() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == json.loads(EXAMPLE_FILE.read_text())


def test_commas_before_closing_brackets_only() -> None:
    assert CompilationConfig.create('{"targets": ["cpu", "openvino",],}') == (
        CompilationConfig.create("cpu,openvino"))
    assert CompilationConfig.create('{"targets": {"a,]": "cpu",}}').named_targets == {
        "a,]": Target("cpu")}  # a comma inside a string stays
    with pytest.raises(ConfigError, match="invalid config JSON"):
        CompilationConfig.create('{"targets": ["cpu",, "openvino"]}')


# -- each executor on its own ----------------------------------------------------------------
def test_unrelated_cpu_targets_in_two_executors_are_fine_in_one_they_are_not() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    assert config.executor_config("dsp").target_for_device("cpu") == Target(
        "cpu -mcpu=cortex-a72")
    assert config.executor_config("low-power").target_for_device("cpu") == Target(
        "cpu -mcpu=cortex-m0")
    together = json.loads(EXAMPLE_FILE.read_text())
    together["executors"]["dsp"]["targets"].append("low-power-cpu")
    with pytest.raises(ConfigError) as info:
        CompilationConfig.create(together)
    assert str(info.value).startswith(
        "executor 'dsp': two cpu device targets, 'cpu -mcpu=cortex-a72' and "
        "'cpu -mcpu=cortex-m0', where neither specialises the other")


def test_the_host_is_one_of_the_named_targets() -> None:
    base = json.loads(EXAMPLE_FILE.read_text())
    for spelled in ("dsp-cpu", ["dsp-cpu"]):
        base["executors"]["dsp"]["target_host"] = spelled
        assert CompilationConfig.create(base).executor_config("dsp").host == Target(
            "cpu -mcpu=cortex-a72")
    del base["executors"]["dsp"]["target_host"]  # the first cpu target hosts
    assert CompilationConfig.create(base).executors[0].host.name == "dsp-cpu"
    # The host needs not be among the executor's targets.
    base["executors"]["dsp"] = {"targets": ["gpu"], "target_host": "dsp-cpu"}
    only_gpu = CompilationConfig.create(base).executor_config("dsp")
    assert strings(only_gpu) == ["cuda"] and only_gpu.host == Target("cpu -mcpu=cortex-a72")


@pytest.mark.parametrize(("host", "message"), [
    ("dsp-cpuu", "no target named 'dsp-cpuu'; did you mean 'dsp-cpu'? (names: dsp-cpu, gpu, "
                 "low-power-cpu); executor 'dsp' names it as its host; define it under the "
                 "top-level 'targets'"),
    ("gpu", "executor 'dsp''s host 'gpu': the host must be a CPU device target such as 'cpu'"),
    (["dsp-cpu", "gpu"], "executor 'dsp''s 'target_host' names one target, got ['dsp-cpu', "
                         "'gpu']"),
    ("low-power-cpu", "executor 'dsp': the host 'cpu -mcpu=cortex-m0' contradicts the cpu "
                      "target 'cpu -mcpu=cortex-a72'"),
    ({"kind": "cpu"}, "executor 'dsp''s 'target_host' is the name of one of the targets"),
])
def test_host_errors(host: Any, message: str) -> None:
    data = json.loads(EXAMPLE_FILE.read_text())
    data["executors"]["dsp"]["target_host"] = host
    with pytest.raises(ConfigError) as info:
        CompilationConfig.create(data)
    assert str(info.value).startswith(message)


def test_an_executor_without_a_cpu_target_names_its_host() -> None:
    data = {"targets": {"gpu": "cuda"}, "executors": {"g": {"targets": ["gpu"]}}}
    with pytest.raises(ConfigError, match="executor 'g' has no cpu target to host it; add "
                                          "\"target_host\""):
        CompilationConfig.create(data)


def test_enable_byoc_is_the_backend_list_in_priority_order() -> None:
    data: dict[str, Any] = {
        "targets": {"cpu0": "cpu -mcpu=skylake", "ov": "openvino -num-threads=2",
                    "gpu": "cuda -arch=sm_80"},
        "executors": {
            "a": {"targets": ["cpu0", "gpu"],
                  "flow-config": {"enable-byoc": ["onnxruntime -device=cuda", "ov",
                                                  {"kind": "onnxruntime"}]}},
            "b": {"targets": ["ov", "cpu0"], "flow_config": {"enable_byoc": "onnxruntime"}},
            "c": {"targets": ["cpu0"],
                  "flow-config": {"enable-byoc": ["onnxruntime -num-threads=1", "torch"]}},
        }}
    config = CompilationConfig.create(data)
    a, b, c = (config.executor_config(n) for n in "abc")
    assert strings(a) == ["cpu -mcpu=skylake", "openvino -num-threads=2", "onnxruntime",
                          "cuda -arch=sm_80", "onnxruntime -device=cuda"]
    assert [str(t) for t in b.priority] == ["openvino -num-threads=2", "onnxruntime"]
    assert [str(t) for t in c.priority] == ["onnxruntime -num-threads=1", "torch"]
    # A backend listed by value is named after its kind; the same value shares the name.
    assert [b.name for b in config.executors[0].backends] == ["ov", "onnxruntime-1",
                                                              "onnxruntime"]
    assert config.named_targets["onnxruntime"] == Target("onnxruntime -device=cuda")
    assert [x.name for x in config.executors[1].backends] == ["ov", "onnxruntime-1"]
    assert [x.name for x in config.executors[2].backends] == ["onnxruntime-2", "torch"]
    assert CompilationConfig.from_json(config.to_json()) == config


def test_a_backend_alone_is_served_by_the_host() -> None:
    config = CompilationConfig.create({
        "targets": {"board": "cpu -mcpu=cortex-a72"},
        "executors": {"x": {"target_host": "board", "flow-config": {"enable-byoc": ["ort"]}}}})
    flat = config.executor_config()
    assert [(e.name, str(e.target)) for e in flat.entries] == [
        ("board", "cpu -mcpu=cortex-a72"), ("onnxruntime", "onnxruntime")]
    assert CompilationConfig.create(config.to_dict()) == config


@pytest.mark.parametrize(("change", "message"), [
    ({"host": "cpu"}, "with 'executors', each executor names its host in 'target_host'; "
                      "remove the top-level 'host'"),
    ({"executor_s": 1}, "unknown entry 'executor_s' in a config with executors; did you mean "
                        "'executors' or 'executor'?"),
    ({"targets": ["cpu"]}, "with 'executors', 'targets' must name every target"),
    ({"executors": {}}, "'executors' must be an object of named executors"),
    ({"executors": {"x": {"targets": ["dsp"]}}},
     "no target named 'dsp'; did you mean 'dsp-cpu'?"),
    ({"executors": {"x": {"targets": ["gpu"], "target_host": "dsp-cpu", "flowconfig": {}}}},
     "unknown entry 'flowconfig' in executor 'x'; did you mean 'flow-config'?"),
    ({"executors": {"x": {"targets": "dsp-cpu", "target_host": "dsp-cpu",
                          "flow-config": {"enable-byoc": ["gpu"]}}}},
     "executor 'x': 'enable-byoc' lists backends such as 'onnxruntime' or 'openvino', but "
     "'gpu' is the device target 'cuda'"),
    ({"executors": {"x": {"targets": ["dsp-cpu"], "flow-config": {"enable-byoc": ["cmsis"]}}}},
     "executor 'x': 'enable-byoc' entry 'cmsis': unknown target kind or tag 'cmsis'"),
    ({"executors": {"x": {"targets": ["dsp-cpu"], "executor": "grpah"}}},
     "executor 'x': unknown executor 'grpah'; did you mean 'graph'?"),
    ({"executors": {"x": {"targets": ["dsp-cpu"], "flow-config": {"fallbak": False}}}},
     "executor 'x': unknown option 'fallbak'; did you mean 'fallback'?"),
    ({"executors": {"x": {"targets": [{"kind": "cpu"}]}}},
     "executor 'x''s 'targets' lists targets by name"),
    ({"executors": {"x": {"targets": []}}}, "executor 'x' has no targets"),
    ({"executors": {"x": ["dsp-cpu"]}}, "executor 'x' must be an object"),
    ({"targets": {"both": "ov-cpu"}}, "the named target 'both' is a composite target"),
])
def test_errors_say_what_and_where(change: dict[str, Any], message: str) -> None:
    data = {**json.loads(EXAMPLE_FILE.read_text()), **change}
    with pytest.raises(ConfigError) as info:
        CompilationConfig.create(data)
    assert str(info.value).startswith(message), str(info.value)


# -- picking one ---------------------------------------------------------------------------
def test_picking_an_executor() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    with pytest.raises(ConfigError) as info:
        config.executor_config()
    assert str(info.value) == (
        "this config has 2 executors (dsp, low-power); pick one, e.g. tessera.compile(model, "
        "config, executor='dsp'), config.executor_config('dsp') or --executor dsp on the "
        "command line")
    with pytest.raises(ConfigError, match=r"no executor named 'dps'; did you mean 'dsp'\? "
                                          r"\(names: dsp, low-power\)"):
        config.executor_config("dps")
    with pytest.raises(ConfigError, match="'graph' is an executor kind, which each executor "
                                          "sets with 'executor' in the config"):
        config.executor_config("graph")
    one = CompilationConfig.create({**json.loads(EXAMPLE_FILE.read_text()),
                                    "executors": {"dsp": {"targets": ["dsp-cpu"]}}})
    assert one.executor_config() == one.executor_config("dsp")
    assert strings(one.executor_config()) == ["cpu -mcpu=cortex-a72"]


def test_a_config_without_named_executors_takes_the_executor_kind() -> None:
    plain = CompilationConfig.create("openvino,cpu")
    assert plain.executor_config() is plain
    assert plain.executor_config("graph") is plain
    assert plain.executor_config("vm").executor == "graph"
    with pytest.raises(ConfigError) as info:
        plain.executor_config("dsp")
    assert str(info.value) == (
        "unknown executor 'dsp' (known: graph); this config has no named executors, so "
        "executor= (--executor) is taken as the executor kind (name executors under "
        "'executors' in the config to pick one by name)")


def test_compile_and_partition_pick_one_executor() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    compiled = tessera.compile(mlp(), config, executor="low-power", partitioner="greedy")
    assert [str(p.target) for p in compiled.plan.partitions] == ["onnxruntime"]
    assert compiled.config == config.executor_config("low-power").__class__.create(
        config.executor_config("low-power"), partitioner="greedy")
    plan = tessera.partition(mlp(), AS_WRITTEN, executor="low-power")
    assert [str(p.target) for p in plan.partitions] == ["onnxruntime"]
    with pytest.raises(ConfigError, match=r"this config has 2 executors \(dsp, low-power\)"):
        tessera.compile(mlp(), config)
    with pytest.raises(ConfigError, match="did you mean 'low-power'"):
        tessera.partition(mlp(), config, executor="lowpower")
    single = {**json.loads(EXAMPLE_FILE.read_text()),
              "executors": {"only": {"targets": ["low-power-cpu"],
                                     "flow-config": {"enable-byoc": ["onnxruntime"]}}}}
    assert [str(p.target) for p in tessera.partition(mlp(), single).partitions] == [
        "onnxruntime"]  # with one executor nothing needs naming


# -- conversions and keys ------------------------------------------------------------------
def test_executor_runtime_and_flow_options_stay_out_of_tuning_keys() -> None:
    base = json.loads(EXAMPLE_FILE.read_text())
    changed = json.loads(EXAMPLE_FILE.read_text())
    changed["executors"]["low-power"].update(
        {"executor": "graph", "runtime": "python",
         "flow-config": {"link-params": False, "enable-byoc": ["onnxruntime"],
                         "compile-cache": False}})
    a, b = CompilationConfig.create(base), CompilationConfig.create(changed)
    assert a != b
    assert {n: t.tuning_key() for n, t in a.named_targets.items()} == {
        n: t.tuning_key() for n, t in b.named_targets.items()}
    # Deployment-only options leave the cache key alone; placement options do not.
    assert a.cache_key() == b.cache_key()
    changed["executors"]["low-power"]["flow-config"]["fallback"] = False
    assert CompilationConfig.create(changed).cache_key() != a.cache_key()
    assert CompilationConfig.create(changed).executor_config("dsp").cache_key() == (
        a.executor_config("dsp").cache_key())


def test_create_keywords_apply_to_every_executor() -> None:
    config = CompilationConfig.create(AS_WRITTEN, fallback=False,
                                      target_options={"cpu": {"num-cores": 2}})
    for name in config.executor_names:
        flat = config.executor_config(name)
        assert flat.options.fallback is False
        assert flat.target_for_device("cpu").attrs["num-cores"] == 2
    with pytest.raises(ConfigError, match="takes no host="):
        CompilationConfig.create(AS_WRITTEN, host="cpu")


def test_what_an_executor_sets_wins_over_the_top_level_and_create_wins_over_both() -> None:
    data = json.loads(EXAMPLE_FILE.read_text())
    data.update({"executor": "no-such-kind", "runtime": "no-such-runtime",
                 "options": {"fallback": False, "min-block-size": 4}})
    data["executors"]["dsp"]["flow-config"] = {"fallback": True}
    config = CompilationConfig.create(data)  # every executor sets its own kind and runtime
    dsp, low = config.executor_config("dsp"), config.executor_config("low-power")
    assert (dsp.options.fallback, dsp.options.min_block_size) == (True, 4)
    assert (low.options.fallback, low.options.min_block_size) == (False, 4)
    again = CompilationConfig.create(data, fallback=False, min_block_size=2)
    assert again.executor_config("dsp").options.fallback is False
    assert again.executor_config("dsp").options.min_block_size == 2
    del data["executors"]["dsp"]["executor"]
    with pytest.raises(ConfigError, match="executor 'dsp': unknown executor 'no-such-kind'"):
        CompilationConfig.create(data)
    assert CompilationConfig.create(data, executor="graph").executor_names == ("dsp",
                                                                               "low-power")


def test_conversions_to_a_composite_target() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    with pytest.raises(ConfigError, match=r"config.executor_config\('dsp'\).to_target\(\)"):
        Target(config)
    dsp = config.executor_config("dsp")
    assert Target(dsp) == Target({"kind": "composite", "target_host": "cpu -mcpu=cortex-a72",
                                  "accelerators": ["cpu -mcpu=cortex-a72", "cuda"]})
    assert CompilationConfig.create(Target(dsp)).targets == dsp.targets


def test_the_flat_fields_follow_the_first_executor() -> None:
    config = CompilationConfig.create(AS_WRITTEN)
    with pytest.raises(ConfigError, match="those of its first executor"):
        dataclasses.replace(config, executors=tuple(reversed(config.executors)))
    assert dataclasses.replace(config, executors=()) == config.executor_config("dsp")
    assert isinstance(config.executors[0], ExecutorConfig)


# -- round trips ---------------------------------------------------------------------------
CPU_BACKENDS = [n for n in backends.names() if "cpu" in backends.get(n).kind.serves]


@st.composite
def executor_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Named cpus (any -mcpu, unrelated to each other), an optional gpu, and 1-3 executors,
    each with one cpu, maybe the gpu, and some backends listed by value or by name."""
    mcpus = draw(st.lists(TEXT, min_size=1, max_size=3, unique=True))
    targets: dict[str, Any] = {f"cpu{i}": {"kind": "llvm", "mcpu": m}
                               for i, m in enumerate(mcpus)}
    targets["gpu"] = "cuda -arch=sm_80"
    targets["ov"] = "openvino -num-threads=2"
    executors = {}
    for index in range(draw(st.integers(1, 3))):
        cpu = f"cpu{draw(st.integers(0, len(mcpus) - 1))}"
        listed = [cpu] + (["gpu"] if draw(st.booleans()) else [])
        byoc = draw(st.permutations([*CPU_BACKENDS, "ov", "onnxruntime -device=cuda"]).map(
            lambda p: p[:2]))
        entry: dict[str, Any] = {"targets": draw(st.permutations(listed)),
                                 "executor": draw(st.sampled_from(["graph", "vm", "aot"])),
                                 "runtime": draw(st.sampled_from(["python", "c", "c++"])),
                                 "flow-config": {"enable-byoc": byoc,
                                                 "link-params": draw(st.booleans())}}
        if draw(st.booleans()):
            entry["target_host"] = cpu
        executors[f"e{index}"] = entry
    return {"targets": targets, "executors": executors}


@given(data=executor_configs())
def test_named_executors_round_trip(data: dict[str, Any]) -> None:
    config = CompilationConfig.create(data)
    assert CompilationConfig.from_json(config.to_json()) == config
    assert CompilationConfig.create(config.to_dict()) == config
    assert CompilationConfig.create(config) == config
    assert json.loads(config.to_json()) == config.to_dict()
    for name, entry in data["executors"].items():
        flat = config.executor_config(name)
        cpu = next(t for t in entry["targets"] if t.startswith("cpu"))
        assert flat.target_for_device("cpu") == Target(data["targets"][cpu])
        assert flat.host == Target(data["targets"][cpu])
        assert (flat.executor, flat.runtime) == ("graph", "python")
        assert flat.options.link_params is entry["flow-config"]["link-params"]
        # the same backends in the listed order, on each device
        listed = [str(Target(data["targets"].get(b, b))) for b in entry["flow-config"][
            "enable-byoc"]]
        for device in flat.devices:
            assert [str(t) for t in flat.backends_for_device(device)] == [
                b for b in listed if Target(b).device_type == device]
        assert CompilationConfig.create(flat.to_dict()) == flat
