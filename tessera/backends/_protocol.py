"""The backend protocol: availability, an honest per-node support table with reasons, and
compile() returning something that runs numpy inputs. Shared input checks live here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera._private.registry import Registry
from tessera.errors import (
    BackendUnavailableError,
    CompileError,
    ExecutionError,
    InputError,
    TesseraError,
)
from tessera.target import Availability, Target, TargetKind

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.ir import ValueType

__all__ = ["BACKENDS", "Backend", "Compiled", "Support", "TensorSpec"]


@dataclass(frozen=True)
class Support:
    """A backend's answer for one node: whether it runs it, and why (not)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name, e.g. 'float32'
    shape: tuple[int | str | None, ...] | None


class Compiled:
    """A compiled submodel. `run` validates inputs, then calls the backend's `_run`."""

    def __init__(self, backend: str, model: onnx.ModelProto, target: Target) -> None:
        self.backend = backend
        self.target = target
        weights = {t.name for t in model.graph.initializer}
        self.inputs = [_spec(v) for v in model.graph.input if v.name not in weights]
        self.outputs = [_spec(v) for v in model.graph.output]
        self.node_names = [n.name or n.op_type for n in model.graph.node]

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = check_inputs(self.inputs, inputs)
        try:
            return self._run(feeds)
        except TesseraError:
            raise
        except Exception as err:
            raise ExecutionError(
                f"{self.backend} failed running nodes {self.node_names[:6]}"
                f"{' ...' if len(self.node_names) > 6 else ''}: {type(err).__name__}: {err}"
            ) from err

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class Backend:
    """One backend. Subclasses set `kind` and implement `supports` and `_compile`."""

    kind: TargetKind

    @property
    def name(self) -> str:
        return self.kind.name

    def is_available(self) -> Availability:
        return self.kind.is_available()

    def supports(
        self,
        node: onnx.NodeProto,
        opset: int,
        types: Mapping[str, ValueType] | None = None,
        constants: Mapping[str, onnx.TensorProto] | None = None,
    ) -> Support:
        raise NotImplementedError

    def compile(self, submodel: onnx.ModelProto, target: Target | str | None = None) -> Compiled:
        chosen = Target(target) if target is not None else Target(self.name)
        if chosen.kind != self.kind:
            raise CompileError(f"backend {self.name!r} cannot compile for target {str(chosen)!r}")
        availability = self.is_available()
        if not availability.ok:
            raise BackendUnavailableError(f"backend {self.name!r} is unavailable: "
                                          f"{availability.reason}")
        try:
            return self._compile(submodel, chosen)
        except TesseraError:
            raise
        except Exception as err:
            nodes = [n.name or n.op_type for n in submodel.graph.node][:6]
            raise CompileError(
                f"{self.name} failed to compile nodes {nodes}: {type(err).__name__}: "
                f"{_first_line(str(err))}"
            ) from err

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        raise NotImplementedError


BACKENDS: Registry[Backend] = Registry("backend")


def check_inputs(
    specs: list[TensorSpec], inputs: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Inputs as arrays, or an InputError listing what was expected."""
    import numpy as np

    expected = ", ".join(f"{s.name}: {s.dtype}{list(s.shape or [])}" for s in specs)
    names = [s.name for s in specs]
    missing = [n for n in names if n not in inputs]
    extra = [n for n in inputs if n not in names]
    if missing or extra:
        raise InputError(f"inputs do not match: missing {missing}, unexpected {extra}; "
                         f"expected {expected}")
    feeds = {}
    for spec in specs:
        value = inputs[spec.name]
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        if array.dtype.name != spec.dtype:
            raise InputError(f"input {spec.name!r} has dtype {array.dtype.name}, expected "
                             f"{spec.dtype}; expected inputs: {expected}")
        if spec.shape is not None and (
            array.ndim != len(spec.shape)
            or any(isinstance(d, int) and d != a for d, a in zip(spec.shape, array.shape,
                                                                  strict=True))
        ):
            raise InputError(f"input {spec.name!r} has shape {list(array.shape)}, expected "
                             f"{list(spec.shape)}; expected inputs: {expected}")
        feeds[spec.name] = array
    return feeds


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    import onnx

    tensor = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type \
        else "float32"
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tensor.shape.dim)
    return TensorSpec(value.name, dtype, shape)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
