"""Verdicts against the consensus, and the narrowing of a disagreement to the smallest
subgraph that still shows it (a bisection over the partition's nodes in topological order:
first the shortest prefix, then the latest start of a window ending there; every such window
of a convex node set is convex)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.oracle._consensus import Oracle, Outputs, Truth, agree_all

if TYPE_CHECKING:
    import onnx

    from tessera.ir import Model

AGREED, DISAGREED, UNDECIDED = "agreed", "disagreed", "undecided"


@dataclass(frozen=True)
class Verdict:
    """An implementation's answer judged against the consensus: `agreed`, `disagreed`
    (`why` says how, `truth` who decided) or `undecided` (no majority; `truth` says who
    said what)."""

    status: str
    implementation: str
    truth: Truth
    max_abs_error: float = 0.0
    why: str = ""
    shared: bool = True  # some other implementation gave the same answer (undecided ones)

    @property
    def agreed(self) -> bool:
        return self.status == AGREED

    @property
    def disagreed(self) -> bool:
        return self.status == DISAGREED

    @property
    def untrusted(self) -> bool:
        """What the numeric guard bans on: the consensus against it, or, with no majority,
        an answer no other implementation that answered shares."""
        return self.disagreed or (self.status == UNDECIDED and not self.shared)

    def __str__(self) -> str:
        if self.status == UNDECIDED:
            return f"{self.implementation}: {self.truth.summary()}"
        if self.status == AGREED:
            judges = self.truth.judges if self.truth.decided else \
                next(v.voter for v in self.truth.votes if v.answered)
            return (f"{self.implementation} agrees with {judges} (max abs error "
                    f"{self.max_abs_error:.3g})")
        return f"{self.implementation} disagrees with {self.truth.judges}: {self.why}"


def judge(implementation: str, got: Sequence[Outputs], truth: Truth) -> Verdict:
    """`got` (one result per feed the truth was taken on) against `truth`. Where the truth is
    undecided, one that agrees with the only implementation that answered makes two that
    agree; anything else is undecided: no majority is against it (`why` says where it sides
    with none)."""
    if truth.answers is None:
        answered = [v for v in truth.votes if v.answers is not None]
        sides = [agree_all(got, v.answers) for v in answered]  # type: ignore[arg-type]
        if len(answered) == 1 and sides[0].ok:  # the only other answer, and it agrees
            return Verdict(AGREED, implementation, truth, sides[0].max_abs_error)
        if answered and not any(side.ok for side in sides):
            names = ", ".join(v.voter for v in answered)
            why = sides[0].why.replace("the other", "theirs")
            return Verdict(UNDECIDED, implementation, truth, sides[0].max_abs_error,
                           f"agrees with none of {names} (against {answered[0].voter}: {why})",
                           shared=False)
        return Verdict(UNDECIDED, implementation, truth)
    compared = agree_all(got, truth.answers)
    why = compared.why.replace("the other", "the consensus")
    return Verdict(AGREED if compared.ok else DISAGREED, implementation, truth,
                   compared.max_abs_error, why)


@dataclass(frozen=True)
class Disagreement:
    """A disagreement with the consensus, narrowed: the implementation, the ops of the
    smallest subgraph that shows it (model order), their opset, its nodes, its inputs'
    shapes, how the answers differ and who decided."""

    implementation: str
    ops: tuple[str, ...]
    opset: int
    nodes: tuple[str, ...]
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    errors: str
    judges: str

    def __str__(self) -> str:
        ops = ", ".join(dict.fromkeys(self.ops))
        shapes = ", ".join(f"{n}{list(s)}" for n, s in self.shapes[:4])
        where = f"{len(self.nodes)} node(s) from {self.nodes[0]}" if len(self.nodes) > 1 \
            else self.nodes[0]
        return (f"{self.implementation} on {ops} (opset {self.opset}; {where}; inputs "
                f"{shapes or '-'}): {self.errors}; decided by {self.judges}")

    def to_dict(self) -> dict[str, Any]:
        return {"implementation": self.implementation, "ops": list(self.ops),
                "opset": self.opset, "nodes": list(self.nodes),
                "shapes": [[n, list(s)] for n, s in self.shapes], "errors": self.errors,
                "judges": self.judges}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Disagreement:
        return cls(str(data["implementation"]), tuple(data.get("ops", ())),
                   int(data.get("opset", 0)), tuple(data.get("nodes", ())),
                   tuple((str(n), tuple(int(d) for d in s)) for n, s in data.get("shapes", ())),
                   str(data.get("errors", "")), str(data.get("judges", "")))


Run = Callable[["onnx.ModelProto", Mapping[str, Any]], Outputs]


@dataclass(frozen=True)
class Narrowed:
    nodes: tuple[str, ...]
    verdict: Verdict
    feeds: Mapping[str, Any]  # the window's inputs, as the consensus computes them


def narrow(model: Model, nodes: Sequence[str], feeds: Mapping[str, Any], run: Run,
           oracle: Oracle, implementation: str, verdict: Verdict) -> Narrowed:
    """The smallest window of `nodes` (topological order) on which `run` is still untrusted
    (`Verdict.untrusted`); `verdict` is the verdict on all of them. A step the consensus
    cannot decide, or where `run` fails, counts as not shown, so the window only grows."""
    order = list(nodes)

    def verdict_on(window: Sequence[str], given: Mapping[str, Any]) -> Verdict | None:
        from tessera.ir import extract_submodel

        sub = extract_submodel(model, model.node_set(window))
        names = [i.name for i in sub.graph.input]
        if any(n not in given for n in names):
            return None
        window_feeds = {n: given[n] for n in names}
        truth = oracle.truth(sub, [window_feeds])
        try:
            got = run(sub, window_feeds)
        except Exception:  # failing on a part is not disagreeing on it
            return None
        return judge(implementation, [got], truth)

    end, best = len(order), verdict
    low = 1
    while low < end:  # the shortest disagreeing prefix
        middle = (low + end) // 2
        found = verdict_on(order[:middle], feeds)
        if found is not None and found.untrusted:
            end, best = middle, found
        else:
            low = middle + 1
    start, high, best_feeds = 0, end - 1, dict(feeds)
    while start < high:  # the latest start of a window ending there
        middle = (start + high + 1) // 2
        given = _with_prefix(model, order[:middle], feeds, oracle)
        found = verdict_on(order[middle:end], given) if given is not None else None
        if found is not None and found.untrusted:
            start, best, best_feeds = middle, found, given  # type: ignore[assignment]
        else:
            high = middle - 1
    window = tuple(order[start:end])
    return Narrowed(window, best, best_feeds)


def _with_prefix(model: Model, prefix: Sequence[str], feeds: Mapping[str, Any],
                 oracle: Oracle) -> dict[str, Any] | None:
    """`feeds` and every value `prefix` passes on, as the consensus computes them."""
    from tessera.ir import extract_submodel

    sub = extract_submodel(model, model.node_set(prefix))
    names = [i.name for i in sub.graph.input]
    if any(n not in feeds for n in names):
        return None
    truth = oracle.truth(sub, [{n: feeds[n] for n in names}])
    if truth.answers is None:
        return None
    return {**feeds, **truth.answers[0]}


def disagreement(model: Model, narrowed: Narrowed) -> Disagreement:
    """The record of a narrowed disagreement, for the plan and `explain`."""
    import numpy as np

    flow = model.dataflow
    index = {name: i for i, name in enumerate(flow.names)}
    ops = tuple(flow.nodes[index[n]].op_type for n in narrowed.nodes)
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")),
                 0)
    shapes = tuple((name, tuple(int(d) for d in np.shape(value)))
                   for name, value in narrowed.feeds.items()
                   if name in _inputs_of(model, narrowed.nodes))
    verdict = narrowed.verdict
    return Disagreement(verdict.implementation, ops, opset, narrowed.nodes, shapes,
                        verdict.why, verdict.truth.judges)


def _inputs_of(model: Model, nodes: Sequence[str]) -> tuple[str, ...]:
    flow = model.dataflow
    inputs, _ = flow.boundary(model.node_set(nodes))
    return tuple(n for n in inputs if n not in flow.initializers)


__all__ = ["AGREED", "DISAGREED", "UNDECIDED", "Disagreement", "Narrowed", "Verdict",
           "disagreement", "judge", "narrow"]
