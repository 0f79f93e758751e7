"""Known deviations: cases where a backend accepts a node but computes something other than
the ONNX standard. Each was found by the ONNX node-test suite (docs/coverage.md) and is
checked before the backend's own table, so `supports()` stays honest about them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera.backends._protocol import Support
from tessera.ir import _dtypes as dtypes

if TYPE_CHECKING:
    import onnx

    from tessera.ir import ValueType

__all__ = ["Deviation", "NodeFacts", "first_deviation"]

FLOAT64 = dtypes.DOUBLE
FLOAT16 = dtypes.FLOAT16
BFLOAT16 = dtypes.BFLOAT16
FLOAT8 = dtypes.MINIFLOATS  # float8 variants, float4e2m1, float8e8m0
SIGNED_INTEGERS = dtypes.SIGNED_INTEGERS
STRING = dtypes.STRING


@dataclass(frozen=True)
class NodeFacts:
    """What a deviation may look at: the node, its tensor types and its constant inputs."""

    node: onnx.NodeProto
    opset: int
    types: Mapping[str, ValueType]
    constants: Mapping[str, onnx.TensorProto]

    def elem_types(self) -> list[int]:
        names = [*self.node.input, *self.node.output]
        return [t.elem_type for n in names if n and (t := self.types.get(n)) is not None]

    def attr(self, name: str) -> object:
        from onnx import helper

        for attribute in self.node.attribute:
            if attribute.name == name:
                value = helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else value
        return None

    def has_input(self, index: int) -> bool:
        return len(self.node.input) > index and bool(self.node.input[index])

    def is_constant(self, index: int) -> bool:
        return self.has_input(index) and self.node.input[index] in self.constants


@dataclass(frozen=True)
class Deviation:
    """`ops` ('*' for every op) deviate from ONNX whenever `applies` holds, for `reason`."""

    ops: tuple[str, ...]
    reason: str
    applies: Callable[[NodeFacts], bool] = lambda facts: True


def first_deviation(
    deviations: tuple[Deviation, ...],
    label: str,
    node: onnx.NodeProto,
    opset: int,
    types: Mapping[str, ValueType] | None,
    constants: Mapping[str, onnx.TensorProto] | None,
) -> Support | None:
    """A refusal naming the first deviation that applies to `node`, or None."""
    facts = NodeFacts(node, opset, types or {}, constants or {})
    for deviation in deviations:
        if ("*" in deviation.ops or node.op_type in deviation.ops) and deviation.applies(facts):
            return Support(False, f"{label} deviates from ONNX on {node.op_type} here: "
                                  f"{deviation.reason}")
    return None


def any_type(kinds: frozenset[int]) -> Callable[[NodeFacts], bool]:
    return lambda facts: any(t in kinds for t in facts.elem_types())


def resize_align_corners_with_scales(facts: NodeFacts) -> bool:
    """ONNX (since Resize-13) scales align_corners by length x scale; backends use the
    rounded output length, which differs whenever that product is not whole."""
    return (facts.attr("coordinate_transformation_mode") == "align_corners"
            and facts.has_input(2) and not facts.has_input(3))


def flattens_before_13(facts: NodeFacts) -> bool:
    """Softmax, LogSoftmax and Hardmax before opset 13 coerce their input to 2-D at `axis`
    (default 1): true where that differs from normalising along `axis` alone, i.e. where
    the axis is not the last one (or the rank is unknown)."""
    if facts.opset >= 13:
        return False
    value_type = facts.types.get(facts.node.input[0]) if facts.node.input else None
    if value_type is None or value_type.shape is None:
        return True
    rank = len(value_type.shape)
    axis = facts.attr("axis")
    axis = 1 if axis is None else int(axis)  # type: ignore[call-overload]
    return (axis + rank if axis < 0 else axis) != rank - 1
