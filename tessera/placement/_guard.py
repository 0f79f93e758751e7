"""The numeric guard: each partition not on the reference runs once on random inputs of its
shapes and is compared with the reference on the same inputs. A backend that fails or
disagrees gives that partition back, and placement is redone without it there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tessera import backends
from tessera._private.numeric import agree
from tessera._private.text import first_line
from tessera.backends import Compiled
from tessera.backends._inputs import random_inputs
from tessera.errors import TesseraError
from tessera.ir import Model, extract_submodel
from tessera.placement._plan import Plan
from tessera.placement._points import Points
from tessera.placement._progress import ProgressLike, Reporter
from tessera.placement._support import FALLBACK
from tessera.target import Target


def check_partition(model: Model, nodes: Sequence[str], compiled: Compiled,
                    shapes: Mapping[str, Sequence[int]] | None = None) -> str | None:
    """Why `compiled` cannot be trusted with the partition `nodes` of `model`, or None.
    `shapes` gives its inputs' shapes where they are symbolic (a profile point)."""
    feeds = random_inputs(compiled, shapes=shapes)
    if feeds is None:
        return None
    submodel = extract_submodel(model, model.node_set(nodes))
    try:
        expected = backends.get(FALLBACK.kind.name).compile(submodel).run(feeds)
    except Exception:  # the reference cannot judge these inputs
        return None
    try:
        got = compiled.run(feeds)
    except TesseraError as err:
        return f"numeric guard: {compiled.backend} failed on random inputs: {first_line(err)}"
    verdict = agree(got, expected)
    return None if verdict else f"numeric guard: {compiled.backend} {verdict.why}"


def lowered(target: Target) -> bool:
    """Whether `target` computes in a lower precision than the model's (int8, bf16, f16):
    random inputs and fp32 tolerances cannot judge it; the accuracy budget on the user's
    samples does."""
    return target.attrs.get("precision") not in (None, "fp32", "f32")


def guard_verdicts(model: Model, plan: Plan, parts: Sequence[Compiled | None],
                   points: Points | None = None, progress: ProgressLike | None = None
                   ) -> dict[int, str]:
    """Partition index -> why the guard gives it back, for the partitions that were built;
    a model with symbolic dimensions is checked at every point of its profile."""
    verdicts = {}
    dynamic = points is not None and points.dynamic
    checked = [i for i, (part, compiled) in enumerate(zip(plan.partitions, parts, strict=True))
               if compiled is not None and part.kind != FALLBACK.kind.name
               and not lowered(part.target)]
    report = Reporter.of(progress)
    report.begin("guard", len(checked))
    for i, (part, compiled) in enumerate(zip(plan.partitions, parts, strict=True)):
        if i not in checked or compiled is None:
            continue
        for index, (point, _) in enumerate(points.views if points is not None and dynamic
                                           else ((None, model),)):
            shapes = points.shapes(index, part.inputs) if points is not None and dynamic \
                else None
            verdict = check_partition(model, part.nodes, compiled, shapes)
            if verdict:
                verdicts[i] = f"{verdict} (at {point})" if point is not None else verdict
                break
        report.advance("guard", str(part.target))
    return verdicts


__all__ = ["check_partition", "guard_verdicts", "lowered"]
