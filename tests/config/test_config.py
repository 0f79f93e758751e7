"""CompilationConfig: every input form canonicalises; lookups, host rules, errors, JSON."""

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import CompilationConfig, Target, backends
from tessera.config import split_target_option
from tessera.errors import ConfigError, TargetError

from ..target.strategies import TEXT

OV_ORT_SKYLAKE = ["cpu -mcpu=skylake", "openvino", "onnxruntime"]


def strings(config: CompilationConfig) -> list[str]:
    return [str(t) for t in config.targets]


# -- every input form ---------------------------------------------------------------------
def test_single_target() -> None:
    for value in ("cpu", Target("cpu"), {"kind": "cpu"}, '{"kind": "cpu"}'):
        config = CompilationConfig.create(value)
        assert strings(config) == ["cpu"]
        assert config.host == Target("cpu")


def test_single_backend_gets_its_device_target_added() -> None:
    config = CompilationConfig.create("onnxruntime")
    assert strings(config) == ["cpu", "onnxruntime"]
    cuda = CompilationConfig.create("onnxruntime -device=cuda")
    assert strings(cuda) == ["cuda", "onnxruntime -device=cuda"]
    assert cuda.host == Target("cpu")  # default host


def test_priority_list() -> None:
    config = CompilationConfig.create(["openvino", "onnxruntime", "cpu -mcpu=skylake"])
    assert strings(config) == OV_ORT_SKYLAKE
    assert [str(t) for t in config.priority] == ["openvino", "onnxruntime"]
    assert [e.name for e in config.entries] == ["cpu", "openvino", "onnxruntime"]


def test_cli_string_keeps_commas_inside_values() -> None:
    config = CompilationConfig.create("openvino,onnxruntime,cpu -mcpu=skylake")
    assert strings(config) == OV_ORT_SKYLAKE
    with_mattr = CompilationConfig.create("cpu -mattr=+avx2,+fma,openvino, ort")
    assert strings(with_mattr) == ["cpu -mattr=+avx2,+fma", "openvino", "onnxruntime"]
    quoted = CompilationConfig.create('cpu -mcpu="a,openvino",ort')
    assert strings(quoted) == ['cpu -mcpu="a,openvino"', "onnxruntime"]


def test_legacy_device_dict() -> None:
    config = CompilationConfig.create({"cpu": "llvm -mcpu=skylake", "cuda": "cuda -arch=sm_80"})
    assert strings(config) == ["cpu -mcpu=skylake", "cuda -arch=sm_80"]
    assert config.host == Target("cpu -mcpu=skylake")
    assert strings(CompilationConfig.create({1: "llvm", 2: "cuda"})) == ["cpu", "cuda"]
    with pytest.raises(ConfigError, match="maps device 'cuda' to 'cpu'"):
        CompilationConfig.create({"cuda": "cpu"})
    with pytest.raises(ConfigError, match="unknown device type 'gpu'"):
        CompilationConfig.create({"gpu": "cuda"})


def test_json_text_and_file(tmp_path: Path) -> None:
    full = {"targets": ["openvino", {"kind": "cpu", "mcpu": "skylake"}, "onnxruntime"],
            "options": {"fallback": False}, "executor": "graph"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(full))
    for value in (json.dumps(full), str(path), path, full):
        config = CompilationConfig.create(value)
        assert strings(config) == OV_ORT_SKYLAKE
        assert config.options.fallback is False
    with pytest.raises(ConfigError, match="cannot read config file"):
        CompilationConfig.create(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConfigError, match="invalid config file"):
        CompilationConfig.create(tmp_path / "bad.json")


def test_named_targets_a1a_form() -> None:
    config = CompilationConfig.create({
        "targets": {"dsp-cpu": {"kind": "llvm", "mcpu": "cortex-a72"}, "ov": "openvino"},
        "host": {"kind": "cpu", "mcpu": "cortex-a72"},
    })
    assert config.named_targets == {"dsp-cpu": Target("cpu -mcpu=cortex-a72"),
                                    "ov": Target("openvino")}
    assert config.get("ov") == Target("openvino")
    with pytest.raises(ConfigError, match="did you mean 'ov'"):
        config.get("ovv")


def test_composite_target_expands() -> None:
    config = CompilationConfig.create(Target("ov-cpu"))
    assert strings(config) == ["cpu", "openvino"]
    assert strings(CompilationConfig.create("cpu-all")) == [
        "cpu", "openvino", "onnxruntime", "torch"]
    composite = Target({"kind": "composite", "host": "cpu -mcpu=znver3",
                        "devices": ["onnxruntime -device=cuda", "cuda -arch=sm_80"]})
    config = CompilationConfig.create(composite)
    assert strings(config) == ["cuda -arch=sm_80", "onnxruntime -device=cuda"]
    assert config.host == Target("cpu -mcpu=znver3")


def test_composite_aliases_combine() -> None:
    config = CompilationConfig.create(["ov-cpu", "ort-cpu"])
    assert strings(config) == ["cpu", "openvino", "onnxruntime"]
    assert config.backends_for_device("cpu") == [Target("openvino"), Target("onnxruntime")]
    assert strings(CompilationConfig.create(["ort-cpu", "ov-cpu"])) == [
        "cpu", "onnxruntime", "openvino"]
    assert strings(CompilationConfig.create(["ort-cpu", "cpu-all"])) == [
        "cpu", "onnxruntime", "openvino", "torch"]
    assert strings(CompilationConfig.create("ort-cuda,ort-cpu")) == [
        "cuda", "onnxruntime -device=cuda", "cpu", "onnxruntime"]
    # What a composite brings merges with what is listed; a target listed twice by hand
    # is still an error.
    assert strings(CompilationConfig.create(["cpu", "ov-cpu"])) == ["cpu", "openvino"]
    with pytest.raises(ConfigError, match="'openvino' is listed twice"):
        CompilationConfig.create(["openvino", "ov", "ort-cpu"])


def test_a_config_is_a_composite_target_and_back() -> None:
    config = CompilationConfig.create("openvino,onnxruntime -num-threads=2,cpu -mcpu=skylake")
    composite = Target(config)
    assert composite == config.to_target() == Target(
        {"kind": "composite", "target_host": "cpu -mcpu=skylake",
         "accelerators": ["cpu -mcpu=skylake", "openvino", "onnxruntime -num-threads=2"]})
    assert CompilationConfig.create(composite) == config
    assert CompilationConfig.create(Target("ort-cuda")).to_target() == Target(
        "composite -devices=\"cuda;onnxruntime -device=cuda\" -host=cpu")


def test_existing_config_with_overrides() -> None:
    base = CompilationConfig.create("openvino,cpu")
    again = CompilationConfig.create(base, fallback="off")
    assert again.targets == base.targets and again.options.fallback is False
    assert CompilationConfig.create(base) == base


def test_tvmc_style_target_options() -> None:
    config = CompilationConfig.create(
        "openvino,onnxruntime,cpu",
        target_options={"onnxruntime": {"num-threads": "2"}, "ov": {"precision": "bf16"}},
    )
    assert strings(config) == ["cpu", "openvino -precision=bf16", "onnxruntime -num-threads=2"]
    assert split_target_option("--target-onnxruntime-num-threads") == (
        "onnxruntime", "num-threads")
    assert split_target_option("target-cuda-max-threads-per-block") == (
        "cuda", "max-threads-per-block")
    with pytest.raises(ConfigError, match="names no known target kind"):
        split_target_option("--target-foo-bar")
    with pytest.raises(ConfigError, match="no such target is configured"):
        CompilationConfig.create("cpu", target_options={"openvino": {"num-threads": 1}})


# -- canonical form ----------------------------------------------------------------------
def test_canonical_order_groups_by_device() -> None:
    config = CompilationConfig.create(
        ["onnxruntime -device=cuda", "openvino", "cuda -arch=sm_80", "torch", "cpu"]
    )
    assert strings(config) == ["cuda -arch=sm_80", "onnxruntime -device=cuda",
                               "cpu", "openvino", "torch"]
    assert config.devices == ("cuda", "cpu")
    assert config.target_for_device("cuda") == Target("cuda -arch=sm_80")
    assert config.backends_for_device("cpu") == [Target("openvino"), Target("torch")]
    assert config.backends_for_device(Target("cuda")) == [Target("onnxruntime -device=cuda")]


def test_specialised_device_targets_are_kept() -> None:
    config = CompilationConfig.create(["cpu -mcpu=skylake -num-cores=2", "openvino",
                                       "cpu -mcpu=skylake"])
    assert config.target_for_device("cpu") == Target("cpu -mcpu=skylake")
    assert config.specialized_targets_for_device("cpu") == [
        Target("cpu -mcpu=skylake -num-cores=2")]
    assert strings(config) == ["cpu -mcpu=skylake", "openvino", "cpu -mcpu=skylake -num-cores=2"]
    assert [e.name for e in config.entries] == ["cpu", "openvino", "cpu-1"]


def test_unrelated_device_targets_are_rejected() -> None:
    with pytest.raises(ConfigError, match="neither specialises the other"):
        CompilationConfig.create(["cpu -mcpu=skylake", "cpu -mcpu=znver3"])


def test_duplicates_are_rejected_but_variants_of_one_backend_are_not() -> None:
    with pytest.raises(ConfigError, match="'onnxruntime' is listed twice"):
        CompilationConfig.create(["onnxruntime", "ort"])
    variants = CompilationConfig.create(["onnxruntime", "onnxruntime -opt-level=basic"])
    assert [str(t) for t in variants.priority] == ["onnxruntime",
                                                   "onnxruntime -opt-level=basic"]
    with pytest.raises(ConfigError, match="'cpu' is listed twice"):
        CompilationConfig.create(["cpu", "llvm"])


# -- host rules --------------------------------------------------------------------------
def test_host_rules() -> None:
    assert CompilationConfig.create(["cuda", "cpu -mcpu=x"], host="cpu -mcpu=x -num-cores=4"
                                    ).host == Target("cpu -mcpu=x -num-cores=4")
    assert CompilationConfig.create(["cuda", "cpu -mcpu=x"], host="cpu -num-cores=4").host == (
        Target("cpu -num-cores=4"))  # no attribute set two ways: one CPU can be both
    assert CompilationConfig.create(["cuda", "cpu -mcpu=x"]).host == Target("cpu -mcpu=x")
    assert CompilationConfig.create(["cuda"]).host == Target("cpu")
    carried = CompilationConfig.create([Target("cuda", host="cpu -mcpu=z")])
    assert carried.host == Target("cpu -mcpu=z")
    assert all(t.host is None for t in carried.targets)
    # With a host and a cpu backend but no cpu device target, the host serves the cpu.
    assert CompilationConfig.create("openvino", host="cpu -mcpu=y").target_for_device(
        "cpu") == Target("cpu -mcpu=y")


def test_host_errors() -> None:
    with pytest.raises(ConfigError, match="different hosts"):
        CompilationConfig.create([Target("cuda", host="cpu -mcpu=a"),
                                  Target("onnxruntime -device=cuda", host="cpu -mcpu=b")])
    with pytest.raises(ConfigError, match="host must be a CPU device target"):
        CompilationConfig.create("cpu", host="openvino")


def test_a_gpu_is_no_host() -> None:
    with pytest.raises(ConfigError) as info:
        CompilationConfig.create("onnxruntime", host="cuda -arch=sm_80")
    assert str(info.value) == (
        "the host must be a CPU device target such as 'cpu' or 'cpu -mcpu=skylake', not "
        "'cuda -arch=sm_80'; list 'cuda -arch=sm_80' as a target and give a cpu host")
    assert CompilationConfig.create(["onnxruntime", "cuda -arch=sm_80"], host="cpu").devices == (
        "cpu", "cuda")  # the fix the message names


def test_a_host_contradicting_a_cpu_target_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        CompilationConfig.create(["openvino", "cpu -mcpu=skylake"], host="cpu -mcpu=cortex-m0")
    assert str(info.value) == (
        "the host 'cpu -mcpu=cortex-m0' contradicts the cpu target 'cpu -mcpu=skylake': -mcpu "
        "is 'cortex-m0' on one and 'skylake' on the other, so they cannot be the same CPU; give "
        "the host the target's -mcpu, or leave the host out (the first cpu target hosts then)")
    with pytest.raises(ConfigError, match="contradicts the cpu target 'cpu -mcpu=a'"):
        CompilationConfig.create([Target("cpu -mcpu=a", host="cpu -mcpu=b")])
    # A host that specialises the target, or that the target specialises, is the same CPU.
    for host in ("cpu -mcpu=skylake -num-cores=2", "cpu"):
        config = CompilationConfig.create(["openvino", "cpu -mcpu=skylake"], host=host)
        assert config.host == Target(host)
        assert config.target_for_device("cpu") == Target("cpu -mcpu=skylake")
    with pytest.raises(ConfigError, match="contradicts"):
        dataclasses.replace(CompilationConfig.create("cpu -mcpu=a"), host=Target("cpu -mcpu=b"))


def test_legacy_target_host_warns() -> None:
    with pytest.warns(DeprecationWarning, match="target_host"):
        config = CompilationConfig.create("cuda", target_host="cpu -mcpu=q")
    assert config.host == Target("cpu -mcpu=q")


# -- options, executor, runtime ----------------------------------------------------------
def test_flow_options_and_partitioner() -> None:
    config = CompilationConfig.create("openvino,onnxruntime", min_block_size="3",
                                      fallback="off", link_params=False)
    assert config.options.min_block_size == 3
    assert config.options.fallback is False
    assert config.partitioner == "collage"
    assert CompilationConfig.create("onnxruntime").partitioner == "greedy"
    assert CompilationConfig.create("openvino,ort", partitioner="greedy").partitioner == "greedy"


def test_option_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown option 'fallbak'.*did you mean 'fallback'"):
        CompilationConfig.create("cpu", fallbak=True)
    with pytest.raises(ConfigError, match="bad value for option 'min_block_size'"):
        CompilationConfig.create("cpu", min_block_size=0)
    with pytest.raises(ConfigError, match="did you mean 'greedy'"):
        CompilationConfig.create("cpu", partitioner="gredy")
    with pytest.raises(ConfigError, match=r"unknown executor 'grap'.*did you mean 'graph'"):
        CompilationConfig.create("cpu", executor="grap")
    with pytest.raises(ConfigError, match="unknown runtime 'cpp'"):
        CompilationConfig.create("cpu", runtime="cpp")


def test_no_targets_and_bad_forms() -> None:
    for empty in (None, [], ""):
        with pytest.raises((ConfigError, TargetError)):
            CompilationConfig.create(empty)
    with pytest.raises(ConfigError, match="empty target in the list"):
        CompilationConfig.create("openvino,,cpu")
    with pytest.raises(ConfigError, match="cannot build a CompilationConfig from int"):
        CompilationConfig.create(3)
    with pytest.raises(ConfigError, match="unknown config entries"):
        CompilationConfig.create({"targets": ["cpu"], "hots": "cpu"})
    with pytest.raises(TargetError, match="unknown target kind or tag 'opnevino'"):
        CompilationConfig.create("opnevino,cpu")


def test_replace_revalidates() -> None:
    config = CompilationConfig.create("openvino,cpu")
    with pytest.raises(ConfigError, match="unknown executor"):
        dataclasses.replace(config, executor="nope")
    with pytest.raises(ConfigError, match="canonical order"):
        dataclasses.replace(config, entries=tuple(reversed(config.entries)))


def test_options_stay_out_of_tuning_keys_and_declare_cache_key() -> None:
    base = CompilationConfig.create("openvino,onnxruntime")
    deploy_only = CompilationConfig.create("openvino,onnxruntime", link_params=False)
    placement = CompilationConfig.create("openvino,onnxruntime", fallback=False)
    assert [t.tuning_key() for t in base.targets] == [t.tuning_key() for t in placement.targets]
    assert deploy_only.cache_key() == base.cache_key()
    # The executor kind and the runtime are no target attributes: other spellings of the
    # one executor and runtime change nothing, keys included.
    renamed = CompilationConfig.create("openvino,onnxruntime", executor="aot", runtime="c++")
    assert (renamed.executor, renamed.runtime) == ("graph", "python")
    assert renamed == base and renamed.cache_key() == base.cache_key()
    assert placement.cache_key() != base.cache_key()


def test_json_round_trip_and_lookup_errors() -> None:
    config = CompilationConfig.create(["onnxruntime", "openvino -num-threads=2", "cpu -mcpu=k"],
                                      host="cpu -mcpu=k", fallback=False)
    assert CompilationConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError, match="no target serves device 'cuda'"):
        config.target_for_device("cuda")
    with pytest.raises(ConfigError, match="'targets' entry"):
        CompilationConfig.from_json("[1]")


BACKENDS = [n for n in backends.names() if "cpu" in backends.get(n).kind.serves]


@given(
    backends=st.permutations(BACKENDS).flatmap(
        lambda p: st.integers(1, len(p)).map(lambda n: p[:n])),
    mcpu=st.none() | st.sampled_from(["skylake", "x,y", "a,openvino", ",", "a,", ",,x"]) | TEXT,
    cuda=st.booleans(),
    fallback=st.booleans(),
)
def test_config_round_trips(backends: list[str], mcpu: str | None, cuda: bool,
                            fallback: bool) -> None:
    targets = list(backends)
    if mcpu is not None:
        targets.append(str(Target({"kind": "cpu", "mcpu": mcpu})))
    if cuda:
        targets += ["cuda -arch=sm_80", "onnxruntime -device=cuda"] if "onnxruntime" not in \
            backends else ["cuda -arch=sm_80"]
    config = CompilationConfig.create(targets, fallback=fallback)
    assert CompilationConfig.from_json(config.to_json()) == config
    composite = Target(config)
    assert CompilationConfig.create(composite, fallback=fallback) == config
    assert Target(composite.to_dict()) == composite
    assert CompilationConfig.create(str(config), fallback=fallback).targets == config.targets
    assert [t.kind.name for t in config.backends_for_device("cpu")] == list(backends)
    assert config.target_for_device("cpu") == (
        Target({"kind": "cpu", "mcpu": mcpu}) if mcpu is not None else Target("cpu"))


def test_the_host_may_be_named_as_one_of_the_targets() -> None:
    config = CompilationConfig.create({"targets": {"dsp-cpu": "cpu -mcpu=cortex-a72",
                                                   "gpu": "cuda", "ort": "onnxruntime"},
                                       "host": "dsp-cpu"})
    assert config.host == Target("cpu -mcpu=cortex-a72")
    assert config.get("dsp-cpu") == config.host
    assert CompilationConfig.from_json(config.to_json()) == config
    named = CompilationConfig.create({"targets": {"fast": "cpu -mcpu=skylake"}}, host="fast")
    assert named.host == Target("cpu -mcpu=skylake")
    with pytest.raises(ConfigError, match="the host must be a CPU device target"):
        CompilationConfig.create({"targets": {"gpu": "cuda", "ort": "onnxruntime"},
                                  "host": "gpu"})
