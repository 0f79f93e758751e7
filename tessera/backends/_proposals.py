"""Proposals: whole subgraphs a backend asks to run as one partition each, besides its
per-node `supports()` answers, as TVM's pattern tables and ONNX Runtime's GetCapability do.

A backend proposes through its own `Backend.propose(model, target)`; anyone can add a
proposer to an existing backend with `register_proposer`. Collage checks each proposal
against the support table and measures it as a candidate partition (docs/backends.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from tessera._private.registry import Registry
from tessera.backends._answer import Proposal
from tessera.errors import RegistryError

if TYPE_CHECKING:
    from tessera.ir import Model
    from tessera.target import Target


ProposeFunction = Callable[["Model", "Target"], Sequence[Proposal]]


@dataclass(frozen=True)
class Proposer:
    """A registered proposer: `propose(model, target)` for the targets of `backend`."""

    name: str
    backend: str
    propose: ProposeFunction


PROPOSERS: Registry[Proposer] = Registry("proposer")


@overload
def register_proposer(name: str, *, backend: str, propose: ProposeFunction) -> ProposeFunction:
    ...
@overload
def register_proposer(name: str, *, backend: str, propose: None = ...
                      ) -> Callable[[ProposeFunction], ProposeFunction]: ...
def register_proposer(name: str, *, backend: str, propose: ProposeFunction | None = None
                      ) -> ProposeFunction | Callable[[ProposeFunction], ProposeFunction]:
    """Register `propose(model, target) -> list[Proposal]` under `name` for every target of
    `backend` (a name or alias of an implemented backend); without `propose`, a decorator.
    Collage asks it after the backend's own `propose`, in registration order."""
    from tessera.backends._protocol import BACKENDS
    from tessera.target import KINDS

    canonical = KINDS.canonical_name(backend) or backend
    if BACKENDS.find(canonical) is None:
        raise RegistryError(f"cannot register proposer {name!r}: "
                            f"{BACKENDS.unknown_message(backend)}")

    def add(function: ProposeFunction) -> ProposeFunction:
        if not callable(function):
            raise RegistryError(f"proposer {name!r} must be a function (model, target) -> "
                                f"list[Proposal], not {type(function).__name__}")
        PROPOSERS.register(name, Proposer(name, canonical, function))
        return function

    return add if propose is None else add(propose)


def proposers_for(backend: str) -> list[Proposer]:
    """The proposers registered for `backend`, in registration order."""
    return [p for _, p in PROPOSERS.items() if p.backend == backend]


__all__ = ["PROPOSERS", "Proposal", "ProposeFunction", "Proposer", "proposers_for",
           "register_proposer"]
