"""The inputs a compiled model or partition takes (`TensorSpec`), and the check of a call's
inputs against them (`InputCheck`), shared by every backend's `Compiled.run` and by the
compiled model's `run`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.errors import InputError
from tessera.ir import ValueKind, cuttable, value_kind

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.config import ShapeProfile


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name, e.g. 'float32'
    shape: tuple[int | str | None, ...] | None
    # a tensor, or a value a backend gives as it is: a sequence (a list of arrays), an
    # optional (a value or None), a map (a dict)
    kind: ValueKind = ValueKind.TENSOR


class InputCheck:
    """Inputs as arrays, or an InputError listing what was expected. Prepared once for a list
    of specs. Any shape the specs allow is accepted: fixed sizes exactly, a symbol with one
    size across all inputs, within the range the shape `profile` gives it, and equal to the sum
    it makes it (`total_sequence=past_sequence+sequence`). The signature
    of the last accepted call (each input's name, dtype and shape, `seen`) is kept: a call of
    numpy arrays matching it costs a dict lookup, a dtype compare and a shape compare per
    input (`matches`); only a change of dtype or shape pays for the full check."""

    def __init__(self, specs: list[TensorSpec], profile: ShapeProfile | None = None) -> None:
        import numpy as np

        self.specs = specs
        self.profile = profile
        self._rules = [(s.name, _dtype(s.dtype), s.shape,
                        s.shape is not None and all(isinstance(d, int) for d in s.shape),
                        tuple((axis, d) for axis, d in enumerate(s.shape or ())
                              if isinstance(d, str)))
                       for s in specs if s.kind is ValueKind.TENSOR]
        self._others = [s for s in specs if s.kind is not ValueKind.TENSOR]
        symbols = [d for rule in self._rules for _, d in rule[4]]
        self._ranged = tuple(dict.fromkeys(
            d for d in symbols if profile is not None and (dim := profile.get(d)) is not None
            and dim.is_range))
        self._sums = profile is not None and any(
            (dim := profile.get(d)) is not None and dim.is_sum for d in symbols)
        self._ndarray, self._asarray = np.ndarray, np.asarray  # no import on the hot path
        # (name, dtype, shape) per input of the last accepted call; None before the first
        self.seen: tuple[tuple[str, Any, tuple[int, ...]], ...] | None = None

    def matches(self, inputs: Mapping[str, Any]) -> bool:
        """Whether `inputs` is a dict of numpy arrays with the signature of the last call
        the full check accepted (so it would accept this one too)."""
        seen = self.seen
        if seen is None or type(inputs) is not dict or len(inputs) != len(seen):
            return False
        ndarray = self._ndarray
        for name, dtype, shape in seen:
            value = inputs.get(name)
            if type(value) is not ndarray or value.dtype != dtype or value.shape != shape:
                return False
        return True

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if self.matches(inputs):
            return dict(inputs)
        feeds = self.check(inputs)
        if not self._others:  # a list, None or a dict is checked on every call
            self.seen = tuple((name, array.dtype, array.shape)
                              for name, array in feeds.items())
        return feeds

    def check(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The full check, whatever was seen before."""
        if len(inputs) != len(self.specs):
            self._mismatch(inputs)
        ndarray = self._ndarray
        feeds = {s.name: self._other(s, inputs) for s in self._others}
        seen: dict[str, tuple[int, str]] | None = None  # symbol: its size, and whose
        for name, dtype, shape, static, symbolic in self._rules:
            value = inputs.get(name)
            if value is None:
                self._mismatch(inputs)
            array = value if type(value) is ndarray else self._asarray(value)
            if array.dtype != dtype:
                if array.dtype.kind in "US" and str(dtype) == "object":  # as ORT takes them
                    array = array.astype(object)
                self._check_dtype(name, array)
            if shape is not None and (array.shape != shape if static else not _fits(
                    array.shape, shape)):
                raise InputError(f"input {name!r} has shape {list(array.shape)}, expected "
                                 f"{list(shape)}{_which_dim(array.shape, shape)}; expected "
                                 f"inputs: {_Expected(self.specs)}")
            for axis, symbol in symbolic:
                size = array.shape[axis]
                if seen is None:
                    seen = {}
                first = seen.setdefault(symbol, (size, name))
                if first[0] != size:
                    raise InputError(
                        f"inputs {first[1]!r} and {name!r} disagree on dimension {symbol!r}: "
                        f"{symbol}={first[0]} in {first[1]!r}, {symbol}={size} in {name!r}; "
                        f"one symbol has one size in a call")
            feeds[name] = array
        if seen is not None and self.profile is not None:
            for symbol in self._ranged:
                if symbol in seen:
                    size, where = seen[symbol]
                    self.profile.check_size(symbol, size, f"input {where!r}")
            if self._sums:
                self.profile.check_sums(seen)
        return feeds

    def _other(self, spec: TensorSpec, inputs: Mapping[str, Any]) -> Any:
        """A sequence as a list of arrays, an optional as a value or None, a map as a dict:
        as ONNX Runtime takes and gives them."""
        if spec.name not in inputs:
            self._mismatch(inputs)
        value = inputs[spec.name]
        if spec.kind is ValueKind.OPTIONAL:
            return value
        if spec.kind is ValueKind.SEQUENCE and isinstance(value, list | tuple):
            return [self._asarray(v) for v in value]
        if spec.kind is ValueKind.MAP and isinstance(value, Mapping):
            return dict(value)
        wanted = {ValueKind.SEQUENCE: "a list of arrays", ValueKind.MAP: "a dict"}.get(
            spec.kind, str(spec.kind))
        raise InputError(f"input {spec.name!r} is a {spec.kind}: give {wanted}, not "
                         f"{type(value).__name__}; expected inputs: {_Expected(self.specs)}")

    def _mismatch(self, inputs: Mapping[str, Any]) -> None:
        names = [s.name for s in self.specs]
        missing = [n for n in names if n not in inputs or inputs[n] is None]
        extra = [n for n in inputs if n not in names]
        raise InputError(f"inputs do not match: missing {missing}, unexpected {extra}; "
                         f"expected {_Expected(self.specs)}")

    def _check_dtype(self, name: str, array: np.ndarray) -> None:
        spec = next(s for s in self.specs if s.name == name)
        if array.dtype.name != spec.dtype:  # ml_dtypes types compare by name
            raise InputError(f"input {name!r} has dtype {array.dtype.name}, expected "
                             f"{spec.dtype}; expected inputs: {_Expected(self.specs)}")


def _fits(actual: tuple[int, ...], declared: tuple[int | str | None, ...]) -> bool:
    return len(actual) == len(declared) and all(
        not isinstance(d, int) or d == a for d, a in zip(declared, actual, strict=True))


def _which_dim(actual: tuple[int, ...], declared: tuple[int | str | None, ...]) -> str:
    """' (dimension 1 is 7, expected 8)': where a shape the specs refuse first differs."""
    if len(actual) != len(declared):
        return f" ({len(actual)} dimensions, expected {len(declared)})"
    for axis, (a, d) in enumerate(zip(actual, declared, strict=True)):
        if isinstance(d, int) and a != d:
            return f" (dimension {axis} is {a}, expected {d})"
    return ""


@functools.cache
def _dtype(name: str) -> Any:
    """numpy's dtype for a name; comparing dtypes is far cheaper than reading `.name`."""
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:  # an ml_dtypes name before ml_dtypes is loaded: compare by name
        return name


class _Expected:
    """The expected inputs, formatted only when an error message needs them."""

    def __init__(self, specs: list[TensorSpec]) -> None:
        self.specs = specs

    def __str__(self) -> str:
        return ", ".join(f"{s.name}: {s.dtype}{list(s.shape or [])}"
                         if s.kind is ValueKind.TENSOR else f"{s.name}: {s.kind}"
                         for s in self.specs)


def tensor_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    import onnx

    kind = value_kind(value.type)
    if not cuttable(kind):
        return TensorSpec(value.name, "object", None, kind)
    tensor = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type \
        else "float32"
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tensor.shape.dim)
    return TensorSpec(value.name, dtype, shape)


__all__ = ["InputCheck", "TensorSpec", "tensor_spec"]
