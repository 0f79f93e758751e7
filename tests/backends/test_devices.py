"""The crossover from a backend target to its partition's device target: `-num-cores` caps
every backend's threads, -mcpu/-mattr/-mtriple reach the code generators that take them, what
a backend cannot honour is a note, tuning keys change exactly when the build does, and while a
backend compiles, its target and the device target are current (here and in the worker)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import backends
from tessera.backends import ProbedBackend
from tessera.backends._threads import ThreadPolicy, core_budget
from tessera.config import CompilationConfig
from tessera.errors import TargetError
from tessera.placement.measure._protocol import MeasureSettings
from tessera.placement.measure._worker import MeasureWorker
from tessera.target import Target

from ..ir.models import mlp
from . import scope_spy

POOLED = ("onnxruntime", "openvino", "torch", "iree", "tvm")  # a pool of threads each
ONE = Target("cpu -num-cores=1")
FEEDS = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}


def _needs(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not backends.get(name).is_available().ok,
                              reason=f"{name} is not installed")


@pytest.fixture
def spy() -> Iterator[scope_spy.ScopeSpy]:
    backend = scope_spy.register()
    try:
        yield backend
    finally:
        scope_spy.unregister()


# -- threads ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", POOLED)
def test_num_cores_caps_every_backends_threads_under_both_policies(name: str) -> None:
    shared, native = ThreadPolicy("shared", 8), ThreadPolicy("native", 8)
    assert shared.apply(Target(name), ONE).attrs["num-threads"] == 1
    assert shared.apply(Target(name), Target("cpu -num-cores=64")).attrs["num-threads"] == 8
    # natively a pool takes every core of this process: capped where there are more
    assert native.apply(Target(name), ONE).attrs["num-threads"] == (
        1 if core_budget() > 1 else 0)
    assert native.apply(Target(name), Target("cpu -num-cores=64")).attrs["num-threads"] == 0
    # a count the user set above the cap is lowered, and the note says so
    backend = backends.get(name)
    assert native.apply(Target(f"{name} -num-threads=4"), ONE).attrs["num-threads"] == 1
    assert backend.device_settings(Target(f"{name} -num-threads=4"), ONE).notes == (
        f"-num-threads=4 of {name} lowered to 1 by -num-cores=1",)
    # no device, or a device that says nothing: the policy alone, as before
    assert shared.apply(Target(name), Target("cpu")) == shared.apply(Target(name))


def test_openvino_streams_are_capped_by_the_cores_too() -> None:
    ov = backends.get("openvino")
    two = Target("cpu -num-cores=2")
    built = ov.for_device(Target("openvino -num-streams=4 -performance-hint=throughput"), two)
    assert (built.attrs["num-streams"], built.attrs["num-threads"]) == (
        2, 2 if core_budget() > 2 else 0)
    assert ov.device_settings(Target("openvino -num-streams=4"), two).notes[-1] == \
        "-num-streams=4 of openvino lowered to 2 by -num-cores=2"


def test_a_backend_without_a_thread_setting_says_its_threads_are_not_capped() -> None:
    assert backends.get("reference").device_settings(Target("reference"), ONE).notes == (
        "-num-cores=1: reference has no thread setting; its library's own threads are not "
        "capped",)
    assert backends.get("reference").for_device(Target("reference"), ONE) == \
        Target("reference")


@given(cores=st.integers(1, 64), threads=st.integers(0, 64),
       name=st.sampled_from(POOLED))
def test_the_cap_holds_and_specialising_twice_changes_nothing(cores: int, threads: int,
                                                               name: str) -> None:
    backend = backends.get(name)
    device = Target(f"cpu -num-cores={cores} -mcpu=znver3")
    once = backend.for_device(Target(f"{name} -num-threads={threads}"), device)
    assert (once.attrs["num-threads"] or core_budget()) <= cores
    assert backend.for_device(once, device) == once


# -- code generation ----------------------------------------------------------------------
def test_mcpu_mattr_and_mtriple_reach_iree_and_tvm() -> None:
    from tessera.backends.iree import compiler_flags
    from tessera.backends.tvm import tvm_target_string

    device = Target("cpu -mcpu=skylake -mattr=+avx2,+fma -mtriple=x86_64-linux-gnu")
    iree = backends.get("iree").for_device(Target("iree"), device)
    assert iree == Target("iree -cpu-features=skylake -mattr=+avx2,+fma "
                          "-mtriple=x86_64-linux-gnu")
    assert compiler_flags(iree) == [
        "--iree-opt-level=O2", "--iree-llvmcpu-target-cpu=skylake",
        "--iree-llvmcpu-target-cpu-features=+avx2,+fma",
        "--iree-llvmcpu-target-triple=x86_64-linux-gnu"]
    # another machine's triple with no CPU named: a generic CPU, not this one
    assert compiler_flags(Target("iree -mtriple=aarch64-linux-gnu"))[1] == \
        "--iree-llvmcpu-target-cpu=generic"
    tvm = backends.get("tvm").for_device(Target("tvm"), device)
    assert tvm == Target("tvm -mcpu=skylake -mattr=+avx2,+fma -mtriple=x86_64-linux-gnu")
    assert tvm_target_string(tvm) == \
        "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake -mattr=+avx2,+fma"
    assert tvm_target_string(Target("tvm")) == "llvm"


def test_what_a_backend_cannot_honour_is_a_note_never_dropped() -> None:
    device = Target("cpu -mcpu=skylake -mattr=+avx2 -mtriple=x86_64-linux-gnu")
    for name, why in (
            ("onnxruntime", "its kernels are prebuilt and choose their instructions on the "
                            "CPU they run on"),
            ("torch", "its kernels are prebuilt and choose their instructions on the CPU "
                      "they run on"),
            ("openvino", "its CPU plugin chooses its kernels for the CPU it runs on")):
        backend = backends.get(name)
        settings = backend.device_settings(Target(name), device)
        assert settings.attrs == ()  # nothing changes its build...
        assert settings.notes == (  # ...and the note says what is not honoured, and why
            f"-mcpu=skylake -mattr=+avx2 -mtriple=x86_64-linux-gnu: not honoured by {name}: "
            f"{why}",)
    # a backend attribute the user set wins over the device's, with a note
    iree = backends.get("iree")
    mine = Target("iree -cpu-features=znver3")
    assert iree.for_device(mine, Target("cpu -mcpu=skylake")) == mine
    assert iree.device_settings(mine, Target("cpu -mcpu=skylake")).notes == (
        "-mcpu=skylake: not applied to iree, whose target sets -cpu-features=znver3",)


def test_tuning_keys_change_exactly_when_the_build_does() -> None:
    """The rule: a backend's build target is its target specialised for the device, and
    every key (compiled caches, measured costs) is that target's. -num-cores is a runtime
    setting (num-threads): it changes cost keys but no probe key, which keeps only what can
    change generated code (`probe_attrs`). -mcpu changes keys only where code is generated
    for it. The device target's own key holds both: the plan depends on each."""
    skylake, shared = Target("cpu -mcpu=skylake"), ThreadPolicy("shared", 8)
    ort = backends.get("onnxruntime")
    assert ort.for_device(Target("onnxruntime"), skylake).tuning_key() == \
        Target("onnxruntime").tuning_key()
    for name in ("iree", "tvm", "openvino"):
        backend = backends.get(name)
        assert isinstance(backend, ProbedBackend)
        plain, capped = shared.apply(Target(name)), shared.apply(Target(name), ONE)
        assert plain.tuning_key() != capped.tuning_key()  # what it costs differs
        assert backend.probe_target(plain).tuning_key() == \
            backend.probe_target(capped).tuning_key()  # what compiles does not
        generated = backend.for_device(Target(name), skylake)
        changes_code = name in ("iree", "tvm")
        assert (generated.tuning_key() != Target(name).tuning_key()) is changes_code
        assert (backend.probe_target(generated).tuning_key() !=
                backend.probe_target(Target(name)).tuning_key()) is changes_code
    assert ONE.tuning_key() != Target("cpu").tuning_key()
    assert CompilationConfig.create("onnxruntime,cpu -num-cores=1").cache_key() != \
        CompilationConfig.create("onnxruntime,cpu").cache_key()


@pytest.mark.parametrize("name", POOLED)
def test_runtime_settings_change_the_tuning_key_but_never_the_code_key(name: str) -> None:
    """The code key (`Target.codegen_key`, what compiled partitions are kept under) leaves
    out runtime settings (`AttrSpec.runtime`): -num-cores reaches a backend as num-threads,
    which changes what a partition costs, never its code."""
    plain = Target(name)
    capped = ThreadPolicy("shared", 8).apply(plain, ONE)
    assert capped.tuning_key() != plain.tuning_key()
    assert capped.codegen_key() == plain.codegen_key()
    assert ONE.codegen_key() == Target("cpu").codegen_key()
    generated = backends.get(name).for_device(plain, Target("cpu -mcpu=skylake"))
    assert (generated.codegen_key() != plain.codegen_key()) is (name in ("iree", "tvm"))
    runtime = {spec.name for spec in plain.kind.attrs if spec.runtime}
    assert "num-threads" in runtime and runtime <= {
        "num-threads", "spinning", "spin-stop", "execution-mode", "performance-hint",
        "num-streams", "cpu-pinning"}


# -- the current target and device target while compiling ---------------------------------
def test_while_a_backend_compiles_its_target_and_the_device_target_are_current(
        spy: scope_spy.ScopeSpy) -> None:
    compiled = spy.compile(mlp(), scope_spy.NAME, device="cpu -mcpu=znver3 -num-cores=1")
    built = Target(f"{scope_spy.NAME} -num-threads=1") if core_budget() > 1 else \
        Target(scope_spy.NAME)
    assert spy.seen == [(built, Target("cpu -mcpu=znver3 -num-cores=1"))]
    assert compiled.target == built and compiled.device_target == Target(
        "cpu -mcpu=znver3 -num-cores=1")
    assert Target.current() is None and Target.current_device() is None
    spy.compile(mlp(), scope_spy.NAME)  # no device given: the plain device kind
    assert spy.seen[-1] == (Target(scope_spy.NAME), Target("cpu"))
    with Target("cpu -mcpu=znver3"):  # or the device target in effect
        spy.compile(mlp(), scope_spy.NAME)
    assert spy.seen[-1] == (Target(scope_spy.NAME), Target("cpu -mcpu=znver3"))
    with pytest.raises(TargetError, match="runs on device 'cpu'"):
        spy.compile(mlp(), scope_spy.NAME, device="cuda")


def test_a_compiled_plan_compiles_each_partition_on_its_device_target(
        spy: scope_spy.ScopeSpy) -> None:
    import tessera

    compiled = tessera.compile(mlp(), f"{scope_spy.NAME},cpu -mcpu=znver3 -num-cores=1",
                               partitioner="greedy", fallback=False)
    device = Target("cpu -mcpu=znver3 -num-cores=1")
    assert [p.device for p in compiled.plan.partitions] == [device]
    assert [(str(current), str(seen)) for current, seen in spy.seen] == [
        (str(compiled.parts[0].target), str(device))]
    assert compiled.parts[0].device_target == device
    want = backends.get("reference").compile(mlp()).run(FEEDS)["y"]
    np.testing.assert_allclose(compiled.run(FEEDS)["y"], want, rtol=1e-6)


def test_the_measuring_worker_compiles_in_the_scope_of_the_device_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_PLUGINS", ",".join(filter(None, (
        os.environ.get("TESSERA_PLUGINS"), "tests.backends.scope_spy"))))
    worker = MeasureWorker()  # a fresh process, which registers the spy
    scope_spy.register()  # the kind, so the target string parses here
    try:
        cost = worker.measure(mlp().SerializeToString(), f"{scope_spy.NAME} -num-threads=1",
                              MeasureSettings(warmup=1, min_runs=1, max_runs=1),
                              device="cpu -mcpu=znver3 -num-cores=1")
    finally:
        worker.close()
        scope_spy.unregister()
    assert not cost.ok
    assert cost.invalid == (f"current={scope_spy.NAME} -num-threads=1; "
                            "device=cpu -mcpu=znver3 -num-cores=1")


# -- real backends: the library is given what the target says ----------------------------
@_needs("openvino")
def test_openvino_runs_one_thread_on_a_one_core_device() -> None:
    if core_budget() > 1:  # natively OpenVINO takes every core: capped at one
        compiled = backends.get("openvino").compile(mlp(), "openvino", device=ONE)
        assert compiled.compiled.get_property("INFERENCE_NUM_THREADS") == 1
    compiled = backends.get("openvino").compile(mlp(), ThreadPolicy("shared", 8).apply(
        Target("openvino"), ONE), device=ONE)
    assert compiled.compiled.get_property("INFERENCE_NUM_THREADS") == 1


@_needs("onnxruntime")
def test_onnxruntime_sessions_keep_to_the_devices_cores() -> None:
    target = ThreadPolicy("shared", 8).apply(Target("onnxruntime"), ONE)
    compiled = backends.get("onnxruntime").compile(mlp(), target, device=ONE)
    options = compiled.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)


@_needs("torch")
def test_torch_runs_on_the_devices_cores() -> None:
    import torch

    from tessera.backends.torch import _library_threads

    before = torch.get_num_threads()
    target = ThreadPolicy("shared", 8).apply(Target("torch"), ONE)
    try:
        backends.get("torch").compile(mlp(), target, device=ONE).run(FEEDS)
        assert torch.get_num_threads() == 1
        # the count is process-wide: a partition left to torch's default restores it
        backends.get("torch").compile(mlp(), "torch").run(FEEDS)
        assert torch.get_num_threads() == _library_threads()
    finally:
        torch.set_num_threads(before)


@_needs("iree")
def test_iree_compiles_for_the_device_cpu_and_runs_without_a_pool() -> None:
    from tessera.backends.iree import _driver_for

    device = Target("cpu -mcpu=x86-64 -mattr=+sse2 -num-cores=1")
    target = ThreadPolicy("shared", 8).apply(Target("iree"), device)
    assert target == Target("iree -cpu-features=x86-64 -mattr=+sse2 -num-threads=1")
    assert _driver_for("cpu", 1) == "local-sync"  # one worker: no task system at all
    compiled = backends.get("iree").compile(mlp(), target, device=device)
    want = backends.get("reference").compile(mlp()).run(FEEDS)["y"]
    np.testing.assert_allclose(compiled.run(FEEDS)["y"], want, rtol=1e-5, atol=1e-6)
