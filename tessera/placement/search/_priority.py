"""Priority order: the order in which a config lists its targets. Greedy placement walks it
(`_greedy`); under Collage's search and in the end-to-end race it breaks ties within noise:
where a later-listed target runs the same nodes less than `TIE` faster than an earlier-listed
one, the earlier-listed target keeps them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from tessera.ir import NodeSet
from tessera.target import Target

# The same candidate measured again differs by 2-5% between the quartiles of its repeats (a
# small MLP measured 8 times on ONNX Runtime and on OpenVINO here), and by more on a busy
# machine; the race treats 5% as close for the same reason (`_race.CLOSE`). A target less
# than 5% faster is not measurably faster: the order the user listed the targets in decides.
TIE = 0.05
# The end-to-end race times whole plans in alternating rounds, with more rounds where it is
# close (`_race.CLOSE`), so it tells apart smaller differences than a candidate's cost: a
# whole plan 2% faster is kept, and giving a plan up to priority costs at most that much.
RACE_TIE = 0.02

_C = TypeVar("_C")


def within_noise(earlier_ms: float, later_ms: float, tie: float = TIE) -> bool:
    """Whether `later_ms`, the later-listed target's cost, is no measurable gain over
    `earlier_ms` (by more than `tie`)."""
    return earlier_ms <= later_ms * (1 + tie)


def tie_broken(candidates: Sequence[tuple[NodeSet, Target, float, _C]],
               priority: Sequence[Target]) -> list[_C]:
    """The candidates (node set, target, cost, payload) the search may choose from, as their
    payloads: one of a later-listed target is dropped where an earlier-listed target's
    candidate of the same nodes costs at most `TIE` more. Dropping it loses nothing the
    noise could tell apart, and a dropped candidate is never cheaper beyond it. Targets not
    in `priority` rank after it, in the order given."""
    rank = {str(t): r for r, t in enumerate(priority)}
    order = sorted(range(len(candidates)),
                   key=lambda i: (rank.get(str(candidates[i][1]), len(rank)), i))
    kept_by_mask: dict[NodeSet, list[float]] = {}
    keep = [False] * len(candidates)
    for i in order:
        mask, _, cost, _ = candidates[i]
        earlier = kept_by_mask.setdefault(mask, [])
        if not any(within_noise(e, cost) for e in earlier):
            earlier.append(cost)
            keep[i] = True
    return [c[3] for c, kept in zip(candidates, keep, strict=True) if kept]


__all__ = ["RACE_TIE", "TIE", "tie_broken", "within_noise"]
