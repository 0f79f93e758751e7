"""Per-backend behaviour as hooks on the backend objects: support for the target asked about,
thread settings, native runners, `-t all`, pip extras; and compile's support check."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera import CompilationConfig, backends, load_model
from tessera.backends import Backend, Compiled, ProbedBackend, Support
from tessera.backends._threads import ThreadPolicy
from tessera.errors import CompileError
from tessera.ir import ValueType
from tessera.placement.search._support import SupportTable
from tessera.target import KINDS, AttrSpec, AttrType, Target, register_kind

from ..ir.models import mlp
from ..registering import registered

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE = [n for n in backends.names() if backends.get(n).is_available().ok]
FLOATS = {"x": ValueType(TensorProto.FLOAT, (2, 8)), "y": ValueType(TensorProto.FLOAT, (2, 8))}
RELU = helper.make_node("Relu", ["x"], ["y"], name="relu")


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


# -- support for the target asked about ----------------------------------------------------
def test_onnxruntime_judges_each_device_by_its_own_providers_kernels() -> None:
    ort = backends.get("onnxruntime")
    matmul = helper.make_node("MatMul", ["x", "x"], ["y"])  # an op with no function body
    square = {"x": ValueType(TensorProto.FLOAT, (8, 8)), "y": ValueType(TensorProto.FLOAT, (8, 8))}
    cpu = ort.supports(matmul, 17, square, target=Target("onnxruntime"))
    assert cpu and "CPUExecutionProvider" in cpu.reason
    assert ort.supports(matmul, 17, square).reason == cpu.reason  # None: the default target
    cuda = ort.supports(matmul, 17, square, target=Target("onnxruntime -device=cuda"))
    assert "CUDAExecutionProvider" in cuda.reason


class _Targeted(Backend):
    """TEST-ONLY backend claiming the ops its target's `-ops` attribute lists."""

    def supports(self, node: onnx.NodeProto, opset: int, types: Any = None,
                 constants: Any = None, *, target: Target | None = None) -> Support:
        ops = (target or Target(self.name)).attrs["ops"]
        return Support(node.op_type in ops, f"claims {','.join(ops)}")


@pytest.fixture
def targeted() -> Iterator[Backend]:
    ops = AttrSpec("ops", AttrType.STR_LIST, ("Relu",), "claimed ops")
    with registered("test-targeted", _Targeted(), attrs=(ops,)) as backend:
        yield backend


def test_the_support_table_asks_each_target_not_each_kind(targeted: Backend) -> None:
    model = load_model(mlp())
    pinned = Target("test-targeted -ops=MatMul")
    table = SupportTable.build(model, CompilationConfig.create("test-targeted"),
                               pins={model.dataflow.names.index("mm1"): pinned})
    assert table.reasons["mm2"]["test-targeted"] == "claims Relu"
    assert table.reasons["mm2"][str(pinned)] == "claims MatMul"
    assert pinned in table.allowed[model.dataflow.names.index("mm2")]


class _Recording(ProbedBackend):
    """TEST-ONLY probed backend that takes every node and records each probe's target."""

    probe_label = "recording"
    probe_attrs = ("mcpu",)

    def __init__(self) -> None:
        self.probed: list[str] = []
        super().__init__()

    def _probe(self, model: onnx.ModelProto, target: Target) -> None:
        self.probed.append(str(target))

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        raise NotImplementedError


def test_probes_compile_for_the_target_and_are_cached_per_probed_target() -> None:
    kind = register_kind("test-recording", serves=("cpu",), doc="test-only",
                         attrs=(AttrSpec("mcpu", AttrType.STR, doc="target CPU"),
                                AttrSpec("num-threads", AttrType.INT, 0, "threads")))
    backend = _Recording()
    backend.kind = kind
    try:
        for text in ("test-recording -mcpu=a -num-threads=2", "test-recording -mcpu=a",
                     "test-recording -mcpu=b", "test-recording"):
            assert backend.supports(RELU, 17, FLOATS, target=Target(text))
        assert backend.supports(RELU, 17, FLOATS)  # the default target: probed already
        assert backend.probed == ["test-recording -mcpu=a", "test-recording -mcpu=b",
                                  "test-recording"]
    finally:
        KINDS.unregister("test-recording")


def test_probed_targets_keep_what_can_change_what_compiles() -> None:
    iree, tvm, ov = (backends.get(n) for n in ("iree", "tvm", "openvino"))
    assert isinstance(iree, ProbedBackend) and isinstance(tvm, ProbedBackend)
    assert isinstance(ov, ProbedBackend)
    assert iree.probe_target(Target("iree -cpu-features=znver4 -num-threads=2 -opt-level=O3")
                             ) == Target("iree -cpu-features=znver4")
    assert iree.probe_target(Target("iree -device=cuda")) == Target("iree -device=cuda")
    assert tvm.probe_target(Target("tvm -mcpu=skylake -opt-level=1 -num-threads=3")
                            ) == Target("tvm -mcpu=skylake -opt-level=1")
    assert ov.probe_target(Target("openvino -num-threads=2 -precision=bf16")) == Target(
        "openvino")


# -- thread settings, native runners, -t all, extras ---------------------------------------
def test_thread_settings_are_each_backends_own() -> None:
    native, shared = ThreadPolicy("native", 4), ThreadPolicy("shared", 4)
    expected_shared = {"onnxruntime": "onnxruntime -num-threads=4 -spinning -spin-stop",
                       "openvino": "openvino -num-threads=4 -cpu-pinning=false",
                       "reference": "reference"}
    for name in backends.names():
        assert str(native.apply(Target(name))) == (
            "onnxruntime -spinning" if name == "onnxruntime" else name)
        want = expected_shared.get(name, f"{name} -num-threads=4")
        assert str(shared.apply(Target(name))) == want
    assert shared.apply(Target("openvino -num-streams=2")).attrs["num-streams"] == 2  # user's
    assert shared.apply(Target("cpu")) == Target("cpu")  # a device: no pool of its own


@pytest.mark.parametrize("name", AVAILABLE)
def test_each_native_runner_runs_the_whole_model(name: str) -> None:
    model = mlp()
    want = backends.get("reference").compile(model).run(_feeds())["y"]
    got = backends.get(name).native_runner(model.SerializeToString())(_feeds())
    assert len(got) == 1  # the outputs in the model's order
    # natively OpenVINO runs in its default precision: bf16 on a CPU that has it
    rtol = 1e-4 if _native_precision(name) == "f32" else 2e-2
    np.testing.assert_allclose(got[0], want, rtol=rtol, atol=1e-5 if rtol == 1e-4 else 1e-3)


def test_the_native_runner_is_the_librarys_own_where_it_has_an_onnx_entry() -> None:
    own = {n for n in backends.names() if backends.get(n).native_import}
    assert {"onnxruntime", "openvino", "iree", "tvm", "reference"} <= own
    assert "torch" not in own  # tessera's converter is the only way into torch


def _native_precision(name: str) -> str:
    if name != "openvino":
        return "f32"
    import openvino as ov

    return str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name())


def test_all_is_every_available_backend_that_takes_part_by_rank() -> None:
    chosen = backends.for_all()
    assert chosen == [n for n in ("onnxruntime", "openvino", "torch", "iree", "tvm")
                      if n in AVAILABLE]
    assert "reference" not in chosen
    from tessera.cli._build import expand_targets

    assert expand_targets("all") == ",".join(chosen)
    assert expand_targets("torch,onnxruntime") == "torch,onnxruntime"


def test_every_backend_extra_is_in_pyproject_and_in_all() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    [everything] = extras["all"]
    in_all = set(re.fullmatch(r"tessera\[(.*)\]", everything).group(1).split(","))  # type: ignore[union-attr]
    own = [backends.get(n) for n in backends.names()
           if type(backends.get(n)).__module__.startswith("tessera.backends.")]
    wanted = {b.pip_extra for b in own} - {None, "all"}
    assert wanted and wanted <= set(extras) and wanted == in_all


def test_an_availability_says_which_extra_installs_it_whether_installed_or_not() -> None:
    from tessera.backends._availability import library_availability

    missing = library_availability("no_such_library_here", ("no-such-dist",), "openvino")()
    assert not missing.ok and missing.extra == "openvino" and "tessera[openvino]" in missing.reason
    present = library_availability("numpy", ("numpy",), None)()
    assert present.ok and present.extra is None and present.version is not None
    assert backends.get("openvino").pip_extra == "openvino"  # installed here or not


# -- compile's support check ---------------------------------------------------------------
@pytest.fixture(scope="module")
def cases() -> dict[str, onnx.ModelProto]:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {case.name: case.model for case in collect_testcases()}


# Node-suite cases each backend compiles although its supports() refuses them
REFUSED = {
    "openvino": {"test_reduce_sum_default_axes_keepdims_example": "empty axes tensor",
                 "test_reduce_l2_default_axes_keepdims_example": "empty axes tensor",
                 "test_spacetodepth_crd_mode_example": "mode=CRD",
                 "test_resize_downsample_scales_cubic_antialias": "antialias",
                 "test_dft_inverse": "axis given at run time",
                 "test_reduce_max_default_axes_keepdim_example": "row of infinities"},
    "torch": {"test_add_uint16": "ONNX type 4", "test_add_uint32": "ONNX type 12",
              "test_add_uint64": "ONNX type 13",
              "test_layer_normalization_2d_axis_negative_1": "LayerNormalization",
              "test_averagepool_2d_pads_count_include_pad": "AveragePool",
              "test_argmin_default_axis_example_select_last_index": "select_last_index"},
}


@pytest.mark.parametrize(("name", "case"), [(b, c) for b, cs in REFUSED.items() for c in cs])
def test_compile_refuses_what_supports_refuses(name: str, case: str,
                                               cases: dict[str, onnx.ModelProto]) -> None:
    if name not in AVAILABLE:
        pytest.skip(f"{name} is not installed")
    model = cases[case]
    node = model.graph.node[0]
    backend = backends.get(name)
    with pytest.raises(CompileError) as info:
        backend.compile(model, name)
    message = str(info.value)
    assert f"{node.op_type}_0 ({node.op_type}): " in message
    assert REFUSED[name][case] in message and "check=False" in message
    assert backend.compile(model, name, check=False).outputs  # the backend itself takes it


@pytest.mark.parametrize("name", [n for n in ("openvino", "torch") if n in AVAILABLE])
def test_a_supported_model_compiles_with_the_check_and_matches(name: str) -> None:
    want = backends.get("reference").compile(mlp()).run(_feeds())["y"]
    got = backends.get(name).compile(mlp(), name).run(_feeds())["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_check_infers_the_types_the_model_leaves_out() -> None:
    """A uint16 Add between two Casts, with no value_info: its types come from inference."""
    if "torch" not in AVAILABLE:
        pytest.skip("torch is not installed")
    nodes = [helper.make_node("Cast", ["x"], ["u"], name="to_u16", to=TensorProto.UINT16),
             helper.make_node("Add", ["u", "u"], ["s"], name="add_u16"),
             helper.make_node("Cast", ["s"], ["y"], name="to_f32", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "casts",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=r"3 node\(s\).*\n  to_u16 \(Cast\): .*type 4.*\n"
                                           r"  add_u16 \(Add\): .*type 4.*\n  to_f32 \(Cast\)"):
        backends.get("torch").compile(model)


def test_compile_warm_checks_too(tmp_path: Path, cases: dict[str, onnx.ModelProto]) -> None:
    if "openvino" not in AVAILABLE:
        pytest.skip("openvino is not installed")
    model = cases["test_spacetodepth_crd_mode_example"]
    ov = backends.get("openvino")
    with pytest.raises(CompileError, match="mode=CRD"):
        ov.compile_warm(model, Target("openvino"), tmp_path, reuse=False)
    assert ov.compile_warm(model, Target("openvino"), tmp_path, reuse=False,
                           check=False).outputs
