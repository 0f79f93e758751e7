"""The numeric guard: each partition not on the reference runs once on random inputs of its
shapes and is judged against the consensus oracle (`tessera.oracle`) on the same inputs. A
backend is banned where the consensus is against it, or, where no majority exists, where no
other implementation shares its answer; only from the smallest subgraph that still shows it
(bisected). A backend that fails to run gives the whole partition back. Undecided verdicts
are recorded, as is every implementation the majority outvoted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tessera import backends
from tessera._private.text import first_line
from tessera.backends import Compiled, random_inputs
from tessera.errors import TesseraError
from tessera.ir import Model, extract_submodel
from tessera.oracle import Disagreement, Oracle, disagreement, judge, narrow
from tessera.placement._context import PlacementContext
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Plan
from tessera.placement.search._support import FALLBACK
from tessera.target import Target


@dataclass(frozen=True)
class Finding:
    """What the guard takes from a partition's backend: the `nodes` banned from it (the
    narrowed window, or the whole partition where it failed), why, and the evidence."""

    nodes: tuple[str, ...]
    reason: str
    evidence: Disagreement | None = None


@dataclass(frozen=True)
class Check:
    """The guard on one partition: the finding that bans (None: trusted), and what it saw
    besides (undecided verdicts, implementations the majority outvoted)."""

    finding: Finding | None = None
    seen: tuple[Disagreement, ...] = ()


def check_partition(model: Model, nodes: Sequence[str], compiled: Compiled,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    oracle: Oracle | None = None) -> Check:
    """The guard's judgement of `compiled` on the partition `nodes` of `model`. `shapes`
    gives its inputs' shapes where they are symbolic (a profile point)."""
    feeds = random_inputs(compiled, shapes=shapes)
    if feeds is None:
        return Check()
    # judged in the partition's own types: float16 a chain carries as float32 is narrowed
    # first (exactly: the build widens it through a Cast), its answers after
    submodel = extract_submodel(model, model.node_set(nodes))
    feeds = _in_types(feeds, _declared(submodel.graph.input))
    try:
        own = _in_types(feeds, {spec.name: spec.dtype for spec in compiled.inputs})
        got = _in_types(compiled.run(own), _declared(submodel.graph.output))
    except TesseraError as err:
        return Check(Finding(tuple(nodes), f"numeric guard: {compiled.backend} failed on "
                                           f"random inputs: {first_line(err)}"))
    kind = compiled.target.kind.name
    oracle = oracle or Oracle(exclude=(kind,))
    truth = oracle.truth(submodel, [feeds])
    seen = [_outvoted(model, nodes, voter, why, feeds, truth.judges)
            for voter, why in truth.dissent]
    verdict = judge(str(compiled.target), [got], truth)
    if not truth.decided and verdict.shared:
        seen.append(_outvoted(model, nodes, str(compiled.target),
                              f"undecided: {truth.who_said_what()}", feeds, "no majority"))
    if not verdict.untrusted:
        return Check(None, tuple(seen))
    target = compiled.target

    def run(sub: Any, window_feeds: Mapping[str, Any]) -> Any:
        return backends.get(kind).compile(sub, target, check=False).run(dict(window_feeds))

    narrowed = narrow(model, nodes, feeds, run, oracle, str(target), verdict)
    evidence = disagreement(model, narrowed)
    return Check(Finding(narrowed.nodes, f"numeric guard: {evidence}", evidence), tuple(seen))


def _declared(values: Sequence[Any]) -> dict[str, Any]:
    from onnx import helper

    return {v.name: helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
            for v in values if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def _in_types(values: Mapping[str, Any], dtypes: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each float array in the float type `dtypes` gives it."""
    import numpy as np

    out = dict(values)
    for name, value in values.items():
        wanted = np.dtype(dtypes[name]) if name in dtypes else None
        if wanted is not None and wanted.kind == "f" and isinstance(value, np.ndarray) and \
                value.dtype.kind == "f" and wanted != value.dtype:
            out[name] = value.astype(wanted)
    return out


def _outvoted(model: Model, nodes: Sequence[str], who: str, why: str,
              feeds: Mapping[str, Any], judges: str) -> Disagreement:
    import numpy as np

    flow = model.dataflow
    index = {name: i for i, name in enumerate(flow.names)}
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")),
                 0)
    return Disagreement(who, tuple(flow.nodes[index[n]].op_type for n in nodes), opset,
                        tuple(nodes),
                        tuple((n, tuple(int(d) for d in np.shape(v))) for n, v in feeds.items()),
                        why, judges)


def lowered(target: Target) -> bool:
    """Whether `target` computes in a lower precision than the model's (int8, bf16, f16):
    random inputs and fp32 tolerances cannot judge it; the accuracy budget does."""
    return target.attrs.get("precision") not in (None, "fp32", "f32")


@dataclass(frozen=True)
class GuardReport:
    findings: dict[int, Finding]  # partition index -> what the guard bans there
    seen: tuple[Disagreement, ...]  # every disagreement recorded, bans' evidence first


def guard(ctx: PlacementContext, plan: Plan, parts: Sequence[Compiled | None]) -> GuardReport:
    """The guard over the partitions that were built; a model with symbolic dimensions is
    checked at every point of its profile."""
    findings: dict[int, Finding] = {}
    seen: list[Disagreement] = []
    points = ctx.points
    checked = [i for i, (part, compiled) in enumerate(zip(plan.partitions, parts, strict=True))
               if compiled is not None and part.kind != FALLBACK.kind.name
               and not lowered(part.target)]
    ctx.progress.begin(Phase.GUARD, len(checked))
    for i in checked:
        part, compiled = plan.partitions[i], parts[i]
        assert compiled is not None
        for index, (point, _) in enumerate(points.views):
            shapes = points.shapes(index, part.inputs) if points.dynamic else None
            check = check_partition(ctx.model, part.nodes, compiled, shapes)
            seen += check.seen
            if check.finding is not None:
                finding = check.finding
                if points.dynamic:
                    finding = Finding(finding.nodes, f"{finding.reason} (at {point})",
                                      finding.evidence)
                findings[i] = finding
                break
        ctx.progress.advance(Phase.GUARD, str(part.target))
    evidence = [f.evidence for f in findings.values() if f.evidence is not None]
    return GuardReport(findings, (*evidence, *seen))


def guard_verdicts(ctx: PlacementContext, plan: Plan, parts: Sequence[Compiled | None]
                   ) -> dict[int, str]:
    """Partition index -> why the guard gives (some of) it back."""
    return {i: f.reason for i, f in guard(ctx, plan, parts).findings.items()}


__all__ = ["Check", "Finding", "GuardReport", "check_partition", "guard", "guard_verdicts",
           "lowered"]
