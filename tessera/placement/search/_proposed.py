"""Proposed subgraphs as Collage candidates. Each target's backend proposes first
(`Backend.propose`), then the proposers registered for it, in registration order. A proposal
becomes a candidate on that target when the support table lets the target run every node of
it and the set is convex; one that is not convex is split into convex parts (dropped when no
part is larger than a node, since single nodes are candidates already); any other is refused.
Each outcome is kept, with its reason, for `tessera explain`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tessera import backends
from tessera._private.registry import did_you_mean
from tessera.backends import Proposal
from tessera.backends._proposals import proposers_for
from tessera.ir import DataflowGraph, Model, NodeSet, bits, members
from tessera.placement.record._records import ProposalRecord, ProposalStatus
from tessera.placement.search._candidates import Candidate
from tessera.placement.search._groups import GroupGraph, fuse
from tessera.placement.search._support import FALLBACK, SupportTable
from tessera.target import Target


@dataclass(frozen=True)
class _Offer:
    source: str
    proposal: Proposal | None
    failure: str = ""  # why the proposer gave nothing usable


def proposed_candidates(model: Model, table: SupportTable
                        ) -> tuple[list[Candidate], tuple[ProposalRecord, ...]]:
    """Every target's proposals judged: the candidates made, and a record of each."""
    flow = model.dataflow
    index = {name: i for i, name in enumerate(flow.names)}
    candidates: list[Candidate] = []
    records: list[ProposalRecord] = []
    for target in table.targets:
        if target == FALLBACK:  # the reference runs what nothing else runs, node by node
            continue
        for offer in _offers(model, target):
            made, record = _judged(flow, index, table, target, offer)
            candidates += made
            records.append(record)
    return candidates, tuple(records)


def _offers(model: Model, target: Target) -> list[_Offer]:
    backend = backends.get(target.kind.name)
    found = _called(backend.name, functools.partial(backend.propose, model, target))
    for proposer in proposers_for(backend.name):
        found += _called(proposer.name, functools.partial(proposer.propose, model, target))
    return found


def _called(source: str, propose: Callable[[], object]) -> list[_Offer]:
    """What one proposer offers. A proposal is optional: a proposer that fails or returns
    something else is recorded as refused, and the compile goes on without it."""
    try:
        got = propose()
    except Exception as err:
        return [_Offer(source, None, f"the proposer failed: {type(err).__name__}: {err}")]
    if isinstance(got, Proposal):
        got = [got]
    if not isinstance(got, Sequence) or isinstance(got, str):
        return [_Offer(source, None, f"the proposer returned {type(got).__name__}, not a "
                                     "list of Proposal")]
    return [_Offer(source, p) if isinstance(p, Proposal) else
            _Offer(source, None, f"the proposer returned a {type(p).__name__}, not a Proposal")
            for p in got]


def _judged(flow: DataflowGraph, index: dict[str, int], table: SupportTable, target: Target,
            offer: _Offer) -> tuple[list[Candidate], ProposalRecord]:
    proposal = offer.proposal
    if proposal is None:
        return [], ProposalRecord(offer.source, str(target), "", (), ProposalStatus.REFUSED,
                                  offer.failure)
    label = proposal.label

    def refused(why: str, nodes: tuple[str, ...] = proposal.nodes
                ) -> tuple[list[Candidate], ProposalRecord]:
        return [], ProposalRecord(offer.source, str(target), label, nodes, ProposalStatus.REFUSED,
                                  f"{proposal.reason}; refused: {why}")

    if not proposal.nodes:
        return refused("it names no node")
    unknown = [n for n in proposal.nodes if n not in index]
    if unknown:
        return refused(f"no node named {unknown[0]!r} in the model"
                       f"{did_you_mean(unknown[0], flow.names)}"
                       + (f" (and {len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""))
    mask = bits(index[n] for n in proposal.nodes)
    nodes = tuple(flow.names[i] for i in members(mask))  # the model's order, not the given
    barred = [i for i in members(mask) if target not in table.allowed[i]]
    if barred:
        first = flow.names[barred[0]]
        return refused(f"{target} may not run {first} ({flow.nodes[barred[0]].op_type}): "
                       f"{_why_not(table, barred[0], first, target)}"
                       + (f" (and {len(barred) - 1} more node(s))" if len(barred) > 1 else ""),
                       nodes)
    origin = f"{offer.source} ({label})" if label else offer.source
    if flow.is_convex(mask):
        return [Candidate(mask, target, origin)], ProposalRecord(
            offer.source, str(target), label, nodes, ProposalStatus.CANDIDATE, proposal.reason, 1)
    parts = [part for part in _convex_parts(flow, mask) if part & (part - 1)]
    why = _not_convex(flow, mask)
    if not parts:
        return [], ProposalRecord(offer.source, str(target), label, nodes, ProposalStatus.REFUSED,
                                  f"{proposal.reason}; refused: {why}, and no convex part of "
                                  "it has more than one node")
    return [Candidate(part, target, f"{origin}, split") for part in parts], ProposalRecord(
        offer.source, str(target), label, nodes, ProposalStatus.SPLIT, f"{proposal.reason}; {why}",
        len(parts))


def _why_not(table: SupportTable, i: int, name: str, target: Target) -> str:
    pinned = table.pinned.get(i)
    if pinned is not None:
        return f"it is pinned to {pinned}"
    return table.reasons.get(name, {}).get(str(target), "the support table does not allow it")


def _convex_parts(flow: DataflowGraph, mask: NodeSet) -> list[NodeSet]:
    """`mask` as convex parts: its nodes merged along their edges (and siblings) wherever the
    graph of parts stays acyclic, which keeps every part convex."""
    groups = GroupGraph(flow)
    ids = fuse(groups, list(members(mask)))
    return [groups.masks[g] for g in ids if flow.is_convex(groups.masks[g])]


def _not_convex(flow: DataflowGraph, mask: NodeSet) -> str:
    """Where a path leaves `mask` and comes back (the caller knows one does)."""
    descendants = flow.descendants
    for i in members(mask):
        for c in flow.consumers[i]:
            if not mask >> c & 1 and descendants[c] & mask:
                back = next(j for j in members(descendants[c] & mask))
                return (f"not convex: a path from {flow.names[i]} leaves it through "
                        f"{flow.names[c]} and comes back to {flow.names[back]}")
    return "not convex"
