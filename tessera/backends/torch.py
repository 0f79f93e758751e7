"""PyTorch backend: ONNX nodes converted to torch operations by tessera's own converter
(`_torch_ops`), run eagerly or through torch.compile with `-compile`."""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any

from tessera.backends._availability import library_availability
from tessera.backends._protocol import BACKENDS, Backend, Compiled, Constants, Support, ValueTypes
from tessera.backends._schema import standard_schema
from tessera.backends._threads import threads_attr
from tessera.errors import BackendUnavailableError
from tessera.target import AttrSpec, AttrType, Availability, Target, register_kind

if TYPE_CHECKING:
    import numpy as np
    import onnx


KIND = register_kind(
    "torch",
    serves=("cpu", "cuda"),
    aliases=("pytorch",),
    doc="PyTorch eager, or torch.compile with -compile.",
    availability=library_availability("torch", ("torch",), "torch"),
    attrs=(
        AttrSpec("compile", AttrType.BOOL, False, "wrap the module in torch.compile"),
        AttrSpec("compile-mode", AttrType.STR, "default", "torch.compile mode",
                 choices=("default", "reduce-overhead", "max-autotune")),
        threads_attr("intra-op threads"),
    ),
)


class TorchBackend(Backend):
    """`supports` is exactly the converter table: op, schema version, dtypes, attributes."""

    kind = KIND
    in_all, rank, colour = True, 30, "#ff7f0e"
    device_note = "its kernels are prebuilt and choose their instructions on the CPU they run on"
    # torch has no ONNX import of its own: tessera's converter is the only way in
    native_import = False

    # the converter is the same on every device: `target` changes nothing
    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        from tessera.backends._torch_ops import DTYPES, OPS, Ctx

        if node.domain not in ("", "ai.onnx"):
            return Support(False, f"the torch converter handles only standard ONNX ops, not "
                                  f"{node.domain}.{node.op_type}")
        schema, settled = standard_schema(node, opset, "folded into a constant tensor")
        if settled is not None:
            return settled
        definition = OPS.find(node.op_type)
        if definition is None:
            return Support(False, f"the torch converter has no rule for {node.op_type}")
        if schema.since_version < definition.since:
            return Support(False, f"the torch converter handles {node.op_type} from version "
                                  f"{definition.since}, not {schema.since_version}")
        known = types or {}
        in_types = [known[n].elem_type if n in known else 0 for n in node.input if n]
        shapes = [known[n].shape if n in known else None for n in node.input if n]
        ranks = [None if shape is None else len(shape) for shape in shapes]
        for name in (*node.input, *node.output):
            elem = known[name].elem_type if name and name in known else 0
            if elem and elem not in DTYPES:
                return Support(False, f"the torch converter does not handle ONNX type {elem} "
                                      f"(value {name!r})")
        if in_types and in_types[0] and in_types[0] not in definition.dtypes:
            return Support(False, f"the torch converter's {node.op_type} does not handle "
                                  f"ONNX type {in_types[0]}")
        if definition.check is not None:
            import onnx as onnx_module

            attrs = {a.name: onnx_module.helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            outputs = [1] * len(node.output)
            while outputs and not node.output[len(outputs) - 1]:
                outputs.pop()
            ctx = Ctx(node.op_type, schema.since_version, attrs, {}, outputs)
            reason = definition.check(ctx, in_types, ranks)
            if reason:
                return Support(False, f"the torch converter's {node.op_type}: {reason}")
        return Support(True, f"the torch converter maps {node.op_type}-{schema.since_version}")

    def device_available(self, target: Target) -> Availability:
        found = super().device_available(target)
        if not found.ok or target.device_type == "cpu":
            return found
        import torch

        if torch.cuda.is_available():
            return found
        return Availability(False, f"torch {torch.__version__} here has no CUDA device; "
                                   "install a CUDA build of torch")

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        import torch

        from tessera.backends._torch_convert import Program

        _library_threads()  # before any run of this backend sets the count

        if target.device_type == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailableError("torch here has no CUDA device; use 'torch' on cpu")
        device = torch.device("cuda" if target.device_type == "cuda" else "cpu")
        with torch.inference_mode():
            program = Program(submodel, device)
        return _TorchCompiled(self.name, submodel, target, program)


@functools.cache
def _library_threads() -> int:
    """torch's own thread count, read before any compiled partition of this backend set it."""
    import torch

    return int(torch.get_num_threads())


class _TorchCompiled(Compiled):
    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, program: Any):
        import torch

        super().__init__(backend, model, target)
        self.program = program
        # torch's count is process-wide: a partition left to the default restores it after
        # one capped by its own target or device (-num-cores) ran
        self._threads = target.attrs["num-threads"] or _library_threads()
        self._call = program
        if target.attrs["compile"]:
            self._call = torch.compile(program.__call__, mode=target.attrs["compile-mode"],
                                       dynamic=False)
            self._warm_up()

    def _warm_up(self) -> None:
        """torch.compile compiles on the first call: make that part of compile()."""
        import numpy as np

        if all(s.shape is not None and all(isinstance(d, int) for d in s.shape)
               for s in self.inputs):
            self._run({s.name: np.zeros(s.shape, dtype=s.dtype)  # type: ignore[arg-type]
                       for s in self.inputs})

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np
        import torch

        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        device = self.program.device
        with warnings.catch_warnings():  # read-only arrays are fine: nothing writes inputs
            warnings.simplefilter("ignore", UserWarning)
            args = [torch.from_numpy(feeds[name]).to(device) for name in self.program.inputs]
        guard = torch.no_grad() if self.target.attrs["compile"] else torch.inference_mode()
        with guard:
            results = self._call(*args)
        outputs = {}
        input_ptrs = {a.untyped_storage().data_ptr() for a in args}
        for name, value, dtype, spec in zip(self.program.outputs, results,
                                            self.program.output_dtypes, self.outputs,
                                            strict=True):
            if dtype is not None and value.dtype != dtype:
                value = value.to(dtype)
            shared = name in self.program.static or value.untyped_storage().data_ptr() in \
                input_ptrs
            array = value.detach().cpu().numpy()
            outputs[name] = np.array(array, copy=True) if shared else array
            if spec.shape is not None and len(spec.shape) != array.ndim:
                raise ValueError(f"output {name!r} has rank {array.ndim}, the model says "
                                 f"{len(spec.shape)}")
        return outputs


BACKEND = BACKENDS.register("torch", TorchBackend())
