"""Target semantics: value behaviour, host, keys, context, relations, tuning key, tags."""

import dataclasses
import importlib.util
import json
import subprocess
import sys
import threading

import pytest

from tessera import Target
from tessera.errors import TargetError
from tessera.target import KINDS, TAGS


def test_targets_are_frozen_and_structurally_equal() -> None:
    a = Target("cuda -arch=sm_80 -max-threads-per-block=512")
    b = Target("cuda -max-threads-per-block 512 -arch sm_80")
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.host = Target("cpu")  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.attrs["arch"] = "sm_90"  # type: ignore[index]


def test_attrs_include_defaults_and_explicit_attrs_do_not() -> None:
    target = Target("cuda -arch=sm_80")
    assert target.kind.name == "cuda"
    assert target.attrs["max-threads-per-block"] == 1024
    assert target.attrs["arch"] == "sm_80"
    assert "registers-per-block" not in target.attrs  # no default, not set
    assert target.explicit_attrs == {"arch": "sm_80"}


def test_lists_are_tuples_and_json_lists() -> None:
    target = Target("cpu -mattr=+avx2,+fma")
    assert target.attrs["mattr"] == ("+avx2", "+fma")
    assert json.loads(target.to_json()) == {"kind": "cpu", "mattr": ["+avx2", "+fma"]}


def test_existing_target_and_dict_forms() -> None:
    base = Target("cuda -arch=sm_80")
    assert Target(base) == base
    assert Target({"kind": "cuda", "arch": "sm_80"}) == base
    assert Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "cpu"}}).host == Target("cpu")


def test_tag_with_overrides_in_dict_and_string() -> None:
    via_dict = Target({"tag": "nvidia/a100", "max-threads-per-block": 512})
    via_string = Target("nvidia/a100 -max-threads-per-block=512")
    assert via_dict == via_string
    assert via_dict.attrs["arch"] == "sm_80" and via_dict.attrs["max-threads-per-block"] == 512
    assert via_dict.tag == "nvidia/a100"
    assert via_dict.host == Target("cpu -mcpu=znver2 -mtriple=x86_64-linux-gnu")


def test_at_least_ten_realistic_tags_all_build() -> None:
    names = TAGS.names()
    assert len(names) >= 10
    for required in ("nvidia/h100", "nvidia/a100", "intel/xeon-8259cl", "aws/c5.2xlarge"):
        assert required in names
    for name in names:
        target = Target(name)
        assert target.tag == name
        assert Target(str(target)) == target
    assert Target("nvidia/h100").attrs["arch"] == "sm_90"


def test_host_construction_and_changes() -> None:
    cuda = Target("cuda -arch=sm_80", host="llvm -mcpu=skylake")
    assert cuda.host == Target("cpu -mcpu=skylake")
    assert cuda.without_host() == Target("cuda -arch=sm_80")
    assert cuda.without_host().with_host("cpu -mcpu=skylake") == cuda
    assert str(cuda) == 'cuda -arch=sm_80 -host="cpu -mcpu=skylake"'
    # An explicit host wins over one carried by the value.
    assert Target(cuda, host="cpu").host == Target("cpu")
    # Hosts do not nest.
    nested = Target("cuda", host=Target("cpu", host="cpu -mcpu=x"))
    assert nested.host is not None and nested.host.host is None


def test_legacy_target_host_warns() -> None:
    with pytest.warns(DeprecationWarning, match="target_host"):
        target = Target("cuda", target_host="cpu")
    assert target.host == Target("cpu")
    with pytest.raises(TargetError, match="both"), pytest.warns(DeprecationWarning):
        Target("cuda", host="cpu", target_host="cpu")


def test_keys() -> None:
    assert Target("cpu").keys == ("cpu",)
    assert Target("cuda").keys == ("cuda", "gpu")
    assert Target("onnxruntime").keys == ("onnxruntime",)
    assert Target("cpu -keys=arm,cpu").keys == ("arm", "cpu")


def test_context_is_nested_and_thread_local() -> None:
    assert Target.current() is None
    with pytest.raises(TargetError, match="no current target"):
        Target.current(allow_none=False)
    outer, inner = Target("cpu"), Target("cuda")
    seen: list[object] = []
    with outer:
        assert Target.current() == outer
        with inner as entered:
            assert entered is inner and Target.current() == inner
            worker = threading.Thread(target=lambda: seen.append(Target.current()))
            worker.start()
            worker.join()
        assert Target.current() == outer
    assert Target.current() is None
    assert seen == [None]


def test_a_scope_sets_the_backend_target_and_its_device_target() -> None:
    ort, device = Target("onnxruntime"), Target("cpu -mcpu=skylake -num-cores=2")
    assert Target.current_device() is None
    with pytest.raises(TargetError, match="no current device target"):
        Target.current_device(allow_none=False)
    with ort.scope(device="cpu -mcpu=skylake -num-cores=2") as entered:
        assert entered is ort and Target.current() == ort
        assert Target.current_device() == device
        with Target("openvino"):  # a backend entered alone keeps the device in effect
            assert Target.current() == Target("openvino")
            assert Target.current_device() == device
        with Target("cpu"):  # a device target entered alone is the device
            assert Target.current_device() == Target("cpu")
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(Target.current_device()))
        worker.start()
        worker.join()
        assert seen == [None]
    assert Target.current() is None and Target.current_device() is None
    with Target("onnxruntime").scope():
        assert Target.current_device() is None
    with Target("cpu -num-cores=1").scope():
        assert Target.current_device() == Target("cpu -num-cores=1")


def test_a_scope_refuses_a_device_that_does_not_fit() -> None:
    with pytest.raises(TargetError, match="not a device target"), \
            Target("onnxruntime").scope(device="openvino"):
        pass
    with pytest.raises(TargetError, match=r"runs on device .cpu.*give a cpu device target"), \
            Target("openvino").scope(device="cuda -arch=sm_80"):
        pass
    with pytest.raises(TargetError, match="unknown option '-arch'"), \
            Target("openvino").scope(device="cpu -arch=sm_80"):
        pass
    assert Target.current() is None  # nothing was left entered


def test_external_codegen_relations() -> None:
    ov, cpu, cuda = Target("openvino"), Target("cpu -mcpu=skylake"), Target("cuda -arch=sm_80")
    assert ov.is_external_codegen and not cpu.is_external_codegen
    assert ov.is_external_codegen_for(cpu)
    assert not ov.is_external_codegen_for(cuda)
    assert not cpu.is_external_codegen_for(cpu)
    assert Target("onnxruntime -device=cuda").is_external_codegen_for(cuda)
    assert not Target("onnxruntime").is_external_codegen_for(cuda)
    assert not ov.is_external_codegen_for(Target("onnxruntime"))
    assert Target("tensorrt").is_external_codegen_for("cuda")  # type: ignore[arg-type]


def test_specialization() -> None:
    base = Target("cuda -arch=sm_80")
    special = Target("cuda -arch=sm_80 -max-threads-per-block=512")
    assert special.is_specialization_of(base)
    assert not base.is_specialization_of(special)
    assert base.is_specialization_of(base)
    assert base.is_specialization_of("cuda")
    assert not Target("cuda -arch=sm_90").is_specialization_of(base)
    assert not Target("cpu").is_specialization_of(base)
    assert not Target("cuda -arch=sm_80").is_specialization_of("cuda -arch=sm_80 -host=cpu")
    assert Target("cuda -arch=sm_80 -host=cpu").is_specialization_of(base)


def test_tuning_key_covers_only_codegen_attributes() -> None:
    key = Target("cuda -arch=sm_80").tuning_key()
    assert key.startswith("cuda:")
    assert Target("cuda -arch=sm_80 -host=cpu").tuning_key() == key  # host excluded
    assert Target("cuda -arch=sm_80 -keys=gpu").tuning_key() == key  # keys excluded
    assert Target("cuda -arch=sm_90").tuning_key() != key
    assert Target("openvino -cache-dir=/x").tuning_key() == Target("openvino").tuning_key()
    assert Target("openvino -precision=bf16").tuning_key() != Target("openvino").tuning_key()
    assert Target("onnxruntime -opt-level=basic").tuning_key() != Target("ort").tuning_key()
    # Defaults are part of the key whether written or not.
    assert Target("cuda -max-threads-per-block=1024").tuning_key() == Target("cuda").tuning_key()


def test_tuning_key_is_stable_across_processes() -> None:
    code = "import tessera; print(tessera.Target('cuda -arch=sm_80').tuning_key())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == Target("cuda -arch=sm_80").tuning_key()
    # A fixed value: changing it invalidates every stored cost, so it must be deliberate.
    assert Target("cuda -arch=sm_80").tuning_key() == "cuda:92b49d60540041d3"


def test_with_attrs_validates() -> None:
    target = Target("onnxruntime")
    assert target.with_attrs(num_threads=2) == Target("onnxruntime -num-threads=2")
    with pytest.raises(TargetError, match="not one of"):
        target.with_attrs(opt_level="fast")


def test_kind_registry_lists_and_suggests() -> None:
    assert "cpu" in KINDS and "llvm" in KINDS
    assert KINDS.get("llvm").name == "cpu"
    with pytest.raises(TargetError, match="did you mean 'openvino'"):
        KINDS.get("openvnio")


def test_availability_does_not_import_libraries() -> None:
    code = (
        "import sys, tessera\n"
        "from tessera.target import KINDS\n"
        "[k.is_available() for _, k in KINDS.items()]\n"
        "print(','.join(m for m in ('onnxruntime','openvino','torch','tvm','iree') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    assert KINDS.get("onnxruntime").is_available().ok
    if importlib.util.find_spec("tensorrt") is None:  # CI and CPU machines
        assert not KINDS.get("tensorrt").is_available().ok
        assert "pip install tensorrt" in KINDS.get("tensorrt").is_available().reason


# -- composite spellings ------------------------------------------------------------------
def test_composite_accepts_target_host_and_accelerators() -> None:
    expected = Target({"kind": "composite", "host": {"kind": "cpu", "mcpu": "cortex-a72"},
                       "devices": ["openvino", "cpu"]})
    spelled = Target({"kind": "composite", "target_host": {"kind": "llvm", "mcpu": "cortex-a72"},
                      "accelerators": [{"kind": "openvino"}, {"kind": "cpu"}]})
    assert spelled == expected
    assert spelled.host == Target("cpu -mcpu=cortex-a72")
    assert [str(t) for t in spelled.attrs["devices"]] == ["openvino", "cpu"]
    # Output keeps the one canonical spelling.
    assert spelled.to_dict() == {"kind": "composite", "devices": [{"kind": "openvino"},
                                                                  {"kind": "cpu"}],
                                 "host": {"kind": "cpu", "mcpu": "cortex-a72"}}
    assert Target('composite -accelerators="openvino;cpu" -target-host="cpu -mcpu=cortex-a72"'
                  ) == expected
    assert Target("ov-cpu").with_attrs(accelerators=["onnxruntime", "cpu"]) == Target(
        "ort-cpu")
    assert Target({"kind": "cuda", "target-host": "cpu -mcpu=x"}).host == Target("cpu -mcpu=x")


def test_a_host_is_a_cpu_target() -> None:
    for host in ("cuda -arch=sm_80", "openvino", "ov-cpu"):
        with pytest.raises(TargetError, match="the host must be a CPU device target"):
            Target("cpu", host=host)


class _Describes:
    """Not a Target, but able to give one (as CompilationConfig does)."""

    def to_target(self) -> Target:
        return Target("ov-cpu")


def test_anything_with_to_target_builds_a_target() -> None:
    assert Target(_Describes()) == Target("ov-cpu")
    assert Target(_Describes(), host="cpu -mcpu=z").host == Target("cpu -mcpu=z")
