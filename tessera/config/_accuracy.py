"""Accuracy against the fp32 answers (the consensus oracle's) on the user's samples: the
budget (`cosine>=0.999,top1>=0.99`), the metrics, and the report. The one place the metrics
are defined; placement reads the report, the runtime produces it.

Every metric is taken per output over all samples:
- `max-abs`: the largest absolute difference;
- `max-rel`: `max-abs` divided by the largest magnitude of the expected output (1 where
  that is 0), so one scale per output, not a ratio that explodes near zero;
- `cosine`: the cosine similarity of the flattened output, the lowest over the samples (1
  where both are zero);
- `top1`: the share of positions whose argmax along the last axis agrees (classification
  outputs; outputs of rank 0 have none).
NaN where the expected output has NaN counts as agreement; elsewhere it is the worst value."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tessera._private.registry import did_you_mean
from tessera.errors import ConfigError, InputError

# metric -> (comparison the budget uses, lowest valid bound, highest valid bound)
METRICS: dict[str, tuple[str, float, float]] = {
    "max-abs": ("<=", 0.0, math.inf),
    "max-rel": ("<=", 0.0, math.inf),
    "cosine": (">=", -1.0, 1.0),
    "top1": (">=", 0.0, 1.0),
}
REPORTED_ALWAYS = ("max-abs", "max-rel", "cosine")  # top1 only where the budget asks for it
FORMS = "max-abs<=X, max-rel<=X, cosine>=X, top1>=X, joined by commas, or exact"


@dataclass(frozen=True)
class Bound:
    """One bound of a budget: the metric, and the limit it must keep (`op` says which
    side of it)."""

    metric: str
    limit: float

    @property
    def op(self) -> str:
        return METRICS[self.metric][0]

    def met_by(self, value: float) -> bool:
        return value <= self.limit if self.op == "<=" else value >= self.limit

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit!r}"


DEFAULT_BUDGET = "cosine>=0.9995"  # where none is given: the float forms (bf16, f16) only


@dataclass(frozen=True)
class AccuracyBudget:
    """Bounds every output must keep against the fp32 answers; `str` gives the spec back.
    `exact` (spelled 'exact') keeps fp32 only: no lower precision is searched."""

    bounds: tuple[Bound, ...]
    exact: bool = False

    @classmethod
    def parse(cls, spec: object) -> AccuracyBudget:
        if isinstance(spec, AccuracyBudget):
            return spec
        if isinstance(spec, str) and spec.strip().lower() == "exact":
            return cls((), exact=True)
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"accuracy budget {spec!r}: expected {FORMS}, e.g. "
                              "'cosine>=0.999,top1>=0.99'")
        bounds: list[Bound] = []
        for part in spec.split(","):
            bound = _parse_bound(part.strip(), spec)
            if any(b.metric == bound.metric for b in bounds):
                raise ConfigError(f"accuracy budget {spec!r}: {bound.metric} is given twice; "
                                  "keep one bound per metric")
            bounds.append(bound)
        return cls(tuple(bounds))

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(b.metric for b in self.bounds)

    def __str__(self) -> str:
        return "exact" if self.exact else ",".join(str(b) for b in self.bounds)


def _parse_bound(part: str, spec: str) -> Bound:
    where = f"accuracy budget {spec!r}, part {part!r}"
    for op in ("<=", ">="):
        name, found, number = part.partition(op)
        if found:
            break
    else:
        raise ConfigError(f"{where}: expected METRIC<=X or METRIC>=X ({FORMS})")
    name = name.strip()
    if name not in METRICS:
        raise ConfigError(f"{where}: unknown metric {name!r}"
                          f"{did_you_mean(name, list(METRICS))} (valid forms: {FORMS})")
    want, low, high = METRICS[name]
    if op != want:
        raise ConfigError(f"{where}: {name} takes a bound of the form {name}{want}X")
    try:
        limit = float(number)
    except ValueError:
        raise ConfigError(f"{where}: {number.strip()!r} is not a number") from None
    if not low <= limit <= high:  # NaN fails too
        raise ConfigError(f"{where}: {name}'s bound must lie in [{low:g}, {high:g}]")
    return Bound(name, limit)


@dataclass(frozen=True)
class MetricValue:
    metric: str
    output: str
    value: float


@dataclass(frozen=True)
class Miss:
    """A bound an output does not keep."""

    bound: Bound
    output: str
    value: float

    def __str__(self) -> str:
        return f"{self.bound.metric} of output {self.output!r} is {self.value:.6g}, " \
               f"the budget {self.bound}"


@dataclass(frozen=True)
class AccuracyReport:
    """What the plan's outputs measured against the fp32 answers on `samples` validation
    samples, per metric and output, and whether `budget` (when one was given) is met."""

    samples: int
    values: tuple[MetricValue, ...]
    budget: AccuracyBudget | None = None
    judges: str = ""  # who gave the answers compared with ('the consensus of ...')

    def value(self, metric: str, output: str) -> float:
        for m in self.values:
            if m.metric == metric and m.output == output:
                return m.value
        raise KeyError(f"{metric} of {output}")

    @property
    def misses(self) -> tuple[Miss, ...]:
        """The bounds missed, in the budget's order, the worst output of each first."""
        found: list[Miss] = []
        for bound in self.budget.bounds if self.budget is not None else ():
            misses = [Miss(bound, m.output, m.value) for m in self.values
                      if m.metric == bound.metric and not bound.met_by(m.value)]
            found += sorted(misses, key=lambda x: x.value, reverse=bound.op == "<=")
        return tuple(found)

    @property
    def met(self) -> bool | None:
        """Whether the budget is met; None without a budget."""
        return None if self.budget is None else not self.misses

    @property
    def worst(self) -> Miss | None:
        misses = self.misses
        return misses[0] if misses else None

    def summary(self) -> str:
        shown = "; ".join(f"{m.metric} {m.output} {m.value:.6g}" for m in self.values)
        against = f" against {self.judges}" if self.judges else ""
        line = (f"accuracy on {self.samples} validation sample(s){against}: "
                f"{shown or 'no outputs'}")
        if self.budget is None:
            return line + "; no budget"
        worst = self.worst
        return line + (f"; budget {self.budget} met" if worst is None else
                       f"; budget missed: {worst}")

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {"samples": self.samples, "judges": self.judges,
                "budget": str(self.budget) if self.budget is not None else None,
                "met": self.met,
                "values": [{"metric": m.metric, "output": m.output, "value": m.value}
                           for m in self.values],
                "worst": None if worst is None else {"metric": worst.bound.metric,
                                                     "output": worst.output,
                                                     "value": worst.value}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyReport:
        budget = data.get("budget")
        return cls(int(data["samples"]),
                   tuple(MetricValue(str(v["metric"]), str(v["output"]), float(v["value"]))
                         for v in data.get("values", ())),
                   AccuracyBudget.parse(budget) if budget else None,
                   str(data.get("judges", "")))


def accuracy_of(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]],
            budget: AccuracyBudget | None = None, judges: str = "") -> AccuracyReport:
    """Compare `got` with the fp32 answers `want` (given by `judges`), sample by sample
    (same order). Outputs of strings are left out; a missing output or a shape that differs
    measures as the worst."""
    import numpy as np

    if len(got) != len(want):
        raise InputError(f"{len(got)} results to compare with {len(want)} expected results; "
                         "give one result per sample")
    metrics = tuple(dict.fromkeys((*REPORTED_ALWAYS, *(budget.metrics if budget else ()))))
    values = []
    for output in want[0] if want else {}:
        pairs = [(np.asarray(g.get(output)) if g.get(output) is not None else None,
                  np.asarray(w[output])) for g, w in zip(got, want, strict=True)]
        if pairs[0][1].dtype.kind not in "biufc":
            continue
        wanted = tuple(m for m in metrics if m != "top1" or pairs[0][1].ndim > 0)
        found = _metrics(wanted, pairs)
        values += [MetricValue(metric, output, found[metric]) for metric in wanted]
    return AccuracyReport(len(want), tuple(values), budget, judges)


_WORST = {"max-abs": math.inf, "max-rel": math.inf, "cosine": -1.0, "top1": 0.0}


def _metrics(metrics: tuple[str, ...], pairs: list[tuple[Any, Any]]) -> dict[str, float]:
    """Each metric over every sample: the worst sample's error or cosine, top1 over all
    positions. Each pair is converted once for all the metrics (GPT-2's logits are 6.4M
    values a sample)."""
    import numpy as np

    if any(g is None or g.shape != w.shape for g, w in pairs):
        return {metric: _WORST[metric] for metric in metrics}
    results: dict[str, list[float]] = {metric: [] for metric in metrics}
    agreed = positions = 0
    with np.errstate(all="ignore"):
        for g, w in pairs:
            have, exact = np.real(g).astype(np.float64), np.real(w).astype(np.float64)
            both_nan = np.isnan(have) & np.isnan(exact)
            if both_nan.any():
                have, exact = np.where(both_nan, 0.0, have), np.where(both_nan, 0.0, exact)
            if "max-abs" in results or "max-rel" in results:
                diff = np.abs(have - exact)
                error = float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0))
                scale = float(np.max(np.abs(exact), initial=0.0))
                for metric in ("max-abs", "max-rel"):
                    if metric in results:
                        usable = metric == "max-rel" and math.isfinite(scale) and scale > 0
                        results[metric].append(error / (scale if usable else 1.0))
            if "cosine" in results:
                results["cosine"].append(_cosine(have.ravel(), exact.ravel()))
            if "top1" in results:
                agree = np.argmax(have, axis=-1) == np.argmax(exact, axis=-1)
                agreed, positions = agreed + int(np.sum(agree)), positions + int(agree.size)
    found = {metric: (min(values) if metric == "cosine" else max(values))
             for metric, values in results.items() if metric != "top1"}
    if "top1" in results:
        found["top1"] = agreed / positions if positions else 1.0
    return found


def _cosine(have: Any, exact: Any) -> float:
    import numpy as np

    norms = float(np.linalg.norm(have)) * float(np.linalg.norm(exact))
    if not math.isfinite(norms):
        return -1.0
    if norms == 0.0:
        return 1.0 if not np.any(have) and not np.any(exact) else 0.0
    return float(np.clip(np.dot(have, exact) / norms, -1.0, 1.0))


__all__ = ["DEFAULT_BUDGET", "FORMS", "METRICS", "AccuracyBudget", "AccuracyReport", "Bound",
           "MetricValue", "Miss", "accuracy_of"]
