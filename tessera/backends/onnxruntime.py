"""ONNX Runtime backend: the CPU execution provider, and CUDA with the onnxruntime-gpu build."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tessera.backends._availability import library_availability
from tessera.backends._protocol import BACKENDS, Backend, Compiled, Support
from tessera.backends._schema import input_type_strings, schema_for
from tessera.errors import BackendUnavailableError
from tessera.target import AttrSpec, AttrType, Target, register_kind

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.ir import ValueType

KIND = register_kind(
    "onnxruntime",
    serves=("cpu", "cuda"),
    aliases=("ort",),
    doc="ONNX Runtime sessions (CPU EP; CUDA EP with onnxruntime-gpu).",
    availability=library_availability("onnxruntime", ("onnxruntime", "onnxruntime-gpu"), "all"),
    attrs=(
        AttrSpec("opt-level", AttrType.STR, "all", "graph optimisation level",
                 choices=("disable", "basic", "extended", "all")),
        AttrSpec("num-threads", AttrType.INT, 0, "intra-op threads (0: the plan decides)",
                 minimum=0),
        AttrSpec("spinning", AttrType.BOOL, False, "let idle pool threads spin"),
        AttrSpec("execution-mode", AttrType.STR, "sequential", "operator scheduling",
                 choices=("sequential", "parallel")),
    ),
)


# -- support table and compile --------------------------------------------------------------
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
               "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


@functools.cache
def _kernels(provider: str) -> dict[tuple[str, str], list[tuple[int, int, dict[str, list[str]]]]]:
    """ORT's own kernel registry for one execution provider: (domain, op) -> version ranges
    and type constraints. This is what makes `supports` honest."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    table: dict[tuple[str, str], list[tuple[int, int, dict[str, list[str]]]]] = {}
    for kernel in ort_state.get_all_opkernel_def():
        if kernel.provider == provider:
            start, end = kernel.version_range
            table.setdefault((kernel.domain, kernel.op_name), []).append(
                (start, end, dict(kernel.type_constraints)))
    return table


class OnnxRuntimeBackend(Backend):
    kind = KIND

    def supports(
        self,
        node: onnx.NodeProto,
        opset: int,
        types: Mapping[str, ValueType] | None = None,
        constants: Mapping[str, onnx.TensorProto] | None = None,
        device: str = "cpu",
    ) -> Support:
        provider = _PROVIDERS[device]
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        kernels = _kernels(provider).get((domain, node.op_type))
        if domain:
            if kernels:
                return Support(True, f"ONNX Runtime {provider} kernel {domain}.{node.op_type}")
            return Support(False, f"ONNX Runtime has no {provider} kernel for "
                                  f"{domain}.{node.op_type}")
        schema = schema_for(node, opset)
        if schema is None:
            return Support(False, f"{node.op_type} is not an ONNX op at opset {opset}")
        if node.op_type == "Constant":
            return Support(True, "ONNX Runtime folds Constant into an initializer")
        if not kernels:
            if schema.has_function or schema.has_context_dependent_function:
                return Support(True, f"ONNX Runtime expands the function op {node.op_type} "
                                     "into its body")
            return Support(False, f"ONNX Runtime has no {provider} kernel for {node.op_type}")
        since = schema.since_version
        in_range = [k for k in kernels if k[0] <= since <= k[1]]
        if not in_range:
            ranges = ", ".join(f"{a}-{b}" for a, b, _ in kernels)
            return Support(False, f"ONNX Runtime has no {node.op_type} kernel for version {since} "
                                  f"(kernels cover {ranges})")
        known = input_type_strings(node, types)
        params = [p.type_str for p in schema.inputs]
        for _, _, constraints in in_range:
            if all(_allowed(constraints, params, i, t) for i, t in known.items()):
                return Support(True, f"ONNX Runtime {provider} kernel {node.op_type}-{since}")
        wanted = ", ".join(sorted(set(known.values())))
        return Support(False, f"ONNX Runtime has no {node.op_type}-{since} kernel for {wanted}")

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, _OPT_LEVELS[target.attrs["opt-level"]])
        if target.attrs["num-threads"]:
            options.intra_op_num_threads = target.attrs["num-threads"]
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if target.attrs["spinning"] else "0")
        options.execution_mode = (ort.ExecutionMode.ORT_PARALLEL
                                  if target.attrs["execution-mode"] == "parallel"
                                  else ort.ExecutionMode.ORT_SEQUENTIAL)
        options.log_severity_level = 4  # errors reach the user as CompileError/ExecutionError
        provider = _PROVIDERS[target.device_type]
        if provider not in ort.get_available_providers():
            raise BackendUnavailableError(
                f"ONNX Runtime here has no {provider}; install onnxruntime-gpu on a CUDA machine")
        session = ort.InferenceSession(submodel.SerializeToString(), options,
                                       providers=[provider])
        return _OrtCompiled(self.name, submodel, target, session)


class _OrtCompiled(Compiled):
    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, session: Any):
        super().__init__(backend, model, target)
        self.session = session
        self._names = [o.name for o in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._names, self.session.run(self._names, feeds), strict=True))


def _allowed(constraints: dict[str, list[str]], params: list[str], index: int, type_str: str
             ) -> bool:
    param = params[min(index, len(params) - 1)] if params else ""
    allowed = constraints.get(param)
    return allowed is None or type_str in allowed


BACKEND = BACKENDS.register("onnxruntime", OnnxRuntimeBackend())
