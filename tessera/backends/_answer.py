"""What a backend answers: for one node, whether it runs it and why (not) (`Support`); for
a subgraph, that it asks to run it as one partition (`Proposal`). `NodeJudge` is what asks a
backend for its answers (the support check, regions), without the rest of `Backend`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from tessera.errors import ModelError

if TYPE_CHECKING:
    import onnx

    from tessera.ir import ValueType
    from tessera.target import Target

# what supports() may look at besides the node: value types and constant inputs, by name
ValueTypes: TypeAlias = "Mapping[str, ValueType]"
Constants: TypeAlias = "Mapping[str, onnx.TensorProto]"


@dataclass(frozen=True)
class Support:
    """A backend's answer for one node: whether it runs it, and why (not)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Proposal:
    """Nodes (by name, as `model.dataflow.names` has them) that a backend asks to run as one
    partition, why, and a short label naming the rule that found them ('query_model',
    'attention'). Placement keeps a proposal only when its target may run every node of it;
    one that is not convex is split into convex parts."""

    nodes: tuple[str, ...]
    reason: str
    label: str = ""

    def __post_init__(self) -> None:
        given: object = self.nodes  # any iterable of names, or one name
        nodes = (given,) if isinstance(given, str) else \
            tuple(given) if isinstance(given, Iterable) else None
        if nodes is None or not all(isinstance(n, str) for n in nodes):
            raise ModelError(f"a Proposal names its nodes by their names (str), as "
                             f"model.dataflow.names has them; got {given!r}")
        object.__setattr__(self, "nodes", tuple(dict.fromkeys(nodes)))


class NodeJudge(Protocol):
    """A backend as the support check asks it about nodes."""

    @property
    def name(self) -> str: ...

    @property
    def runs_whole_regions(self) -> bool: ...

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support: ...


__all__ = ["Constants", "NodeJudge", "Proposal", "Support", "ValueTypes"]
