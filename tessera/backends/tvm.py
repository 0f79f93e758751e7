"""TVM backend: the Relax ONNX frontend, built untuned for llvm (or cuda) and run by the Relax
VM. Support is the frontend's converter table, confirmed by probing each kind of node."""

from __future__ import annotations

import functools
import os
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tessera.backends import _deviations as dev
from tessera.backends._answer import Constants, Support, ValueTypes
from tessera.backends._availability import library_availability
from tessera.backends._probe import ProbedBackend
from tessera.backends._protocol import BACKENDS, Compiled, NativeRunner
from tessera.backends._threads import threads_attr
from tessera.errors import BackendUnavailableError
from tessera.ir import _dtypes as dtypes
from tessera.target import AttrSpec, AttrType, Availability, Target, register_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    import onnx



def _check_opt_level(value: int) -> str | None:
    return None if 0 <= value <= 3 else f"{value} is not an optimisation level between 0 and 3"


# untuned, TVM is slow on CPU: it is here for correctness and for devices others lack
KIND = register_kind(
    "tvm", doc="Apache TVM Relax, untuned (slow on CPU; correctness only).",
    availability=library_availability("tvm", ("apache-tvm",), "tvm"), serves=("cpu", "cuda"),
    attrs=(
        AttrSpec("opt-level", AttrType.INT, 3, "Relax pass optimisation level",
                 check=_check_opt_level),
        AttrSpec("mcpu", AttrType.STR, doc="llvm -mcpu for generated code"),
        AttrSpec("mattr", AttrType.STR_LIST, doc="llvm -mattr for generated code, e.g. "
                 "+avx2,+fma"),
        AttrSpec("mtriple", AttrType.STR, doc="llvm -mtriple for generated code"),
        threads_attr("runtime threads"),
    ),
)


@functools.cache
def _converters() -> frozenset[str]:
    from tvm.relax.frontend.onnx import onnx_frontend

    return frozenset(onnx_frontend._get_convert_map())


def build(model: onnx.ModelProto, target: Target) -> Any:
    """The Relax VM executable for `model`."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    module = from_onnx(model, keep_params_in_input=False, sanitize_input_names=False)
    module = relax.transform.DecomposeOpsForInference()(module)
    tvm_target = tvm.target.Target(tvm_target_string(target))
    with tvm.transform.PassContext(opt_level=target.attrs["opt-level"]):
        return tvm.compile(module, target=tvm_target)


def tvm_target_string(target: Target) -> str:
    """TVM's target for `target`: a cpu device target's -mcpu, -mattr and -mtriple arrive
    here as the backend's own attributes (`Backend.for_device`)."""
    if target.device_type == "cuda":
        return "cuda"
    parts = ["llvm"]
    for name in ("mtriple", "mcpu"):
        if target.attrs.get(name):
            parts.append(f"-{name}={target.attrs[name]}")
    if target.attrs.get("mattr"):
        parts.append(f"-mattr={','.join(target.attrs['mattr'])}")
    return " ".join(parts)


def _probe(model: onnx.ModelProto, target: Target) -> None:
    build(model, target)


# Found by the node suite (docs/coverage.md): TVM compiles these and computes something else.
DEVIATIONS = (
    dev.Deviation(("*",), "float8 tensors convert with other rounding and saturation",
                  dev.any_type(dev.FLOAT8)),
    dev.Deviation(("ReduceMax", "ReduceMin"), "a row of infinities does not reduce to that "
                  "infinity (fully masked attention rows come out NaN)"),
    dev.Deviation(("Mod",), "the remainder of floats differs at zeros and infinities",
                  dev.any_type(frozenset({dtypes.FLOAT, dtypes.FLOAT16, dtypes.DOUBLE,
                                          dtypes.BFLOAT16}))),
    dev.Deviation(("RoiAlign",), "mode=max follows an older definition",
                  lambda facts: facts.attr("mode") == "max"),
)


class TvmBackend(ProbedBackend):
    kind = KIND
    dynamic_shapes = False  # compiles for the shapes it is given
    in_all, rank, colour = True, 50, "#d62728"
    probe_label = "TVM"
    probe_attrs = ("mcpu", "mattr", "mtriple", "opt-level")
    # a cpu device target's code-generation attributes, as TVM's llvm target takes them
    device_attrs = MappingProxyType({"mcpu": "mcpu", "mattr": "mattr", "mtriple": "mtriple"})
    _probe = staticmethod(_probe)
    deviations = DEVIATIONS

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        if node.domain not in ("", "ai.onnx"):
            return Support(False, f"the TVM ONNX frontend has no {node.domain}.{node.op_type}")
        if node.op_type not in _converters():
            return Support(False, f"the TVM ONNX frontend has no converter for {node.op_type}")
        return super().supports(node, opset, types, constants, target=target)

    def device_available(self, target: Target) -> Availability:
        found = super().device_available(target)
        if not found.ok or target.device_type == "cpu":
            return found
        import tvm

        return found if tvm.cuda().exist else Availability(
            False, "TVM here has no CUDA device (it needs a TVM built with CUDA)")

    native_import = True

    def native_runner(self, model: bytes) -> NativeRunner:
        """TVM's documented route: the Relax ONNX frontend, tvm.compile for llvm, the Relax
        VM."""
        os.environ.setdefault("TVM_BIND_THREADS", "0")  # as in _compile: other rows run after
        import onnx as onnx_module
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        proto = onnx_module.load_from_string(model)
        weights = {t.name for t in proto.graph.initializer}
        inputs = [i.name for i in proto.graph.input if i.name not in weights]
        module = relax.transform.DecomposeOpsForInference()(from_onnx(proto))
        machine = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())

        def run(feeds: Mapping[str, np.ndarray]) -> list[Any]:
            results = machine["main"](*(tvm.runtime.tensor(feeds[name]) for name in inputs))
            if isinstance(results, tvm.runtime.Tensor | tvm.runtime.ShapeTuple):
                results = (results,)  # one output; several come as a sequence
            return [_host(value) for value in results]
        return run

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        # TVM's pool pins the thread that first runs a module to one core, and every thread
        # that thread starts later inherits the pin: an ONNX Runtime session made afterwards
        # in the same process ran ResNet-50 3.4x slower. Unless the user asked for pinning,
        # TVM leaves the caller's affinity alone.
        os.environ.setdefault("TVM_BIND_THREADS", "0")
        import tvm
        from tvm import relax

        if target.device_type == "cuda" and not tvm.cuda().exist:
            raise BackendUnavailableError("TVM here has no CUDA device")
        device = tvm.cuda() if target.device_type == "cuda" else tvm.cpu()
        threads = target.attrs["num-threads"]
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        machine = relax.VirtualMachine(build(submodel, target), device)
        return _TvmCompiled(self.name, submodel, target, machine, device)


class _TvmCompiled(Compiled):
    thread_safe = False  # one VM (and its registers) per compiled module
    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, machine: Any,
                 device: Any) -> None:
        super().__init__(backend, model, target)
        self.machine = machine
        self.device = device
        self._names = [o.name for o in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np
        import tvm

        args = [tvm.runtime.tensor(np.require(feeds[s.name], requirements="C"), self.device)
                for s in self.inputs]
        results = self.machine["main"](*args)
        if isinstance(results, tvm.runtime.Tensor | tvm.runtime.ShapeTuple):
            results = (results,)  # one output; several come as a sequence
        return {name: _host(value) for name, value in zip(self._names, results, strict=True)}


def _host(value: Any) -> np.ndarray:
    """A tensor as numpy; a shape (what Shape computes on static shapes) as int64."""
    import numpy as np
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return value.numpy()  # type: ignore[no-any-return]
    return np.asarray(list(value), np.int64)


BACKEND = BACKENDS.register("tvm", TvmBackend())
