"""What the precision search runs with: the variants the config's targets offer, the
budget it judges by, and the samples (the user's, or generated in the ranges the model
implies)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera import backends
from tessera.config import DEFAULT_BUDGET, AccuracyBudget, CompilationConfig
from tessera.ir import Model, Samples
from tessera.ir._implied import implied_inputs, non_tensor_input
from tessera.target import Target


def variants_of(config: CompilationConfig, attention: bool = False) -> list[Target]:
    """Every precision variant the config's targets offer, in the order of their expected
    payoff for a model with or without `attention` (`payoff_rank`), then the config's
    priority."""
    found: list[Target] = []
    for target in config.priority:
        backend = backends.get(target.kind.name)
        if backend.is_available().ok:
            found += [v for v in backend.precision_variants(target) if v not in found]
    return sorted(found, key=lambda v: payoff_rank(v, attention))


def payoff_rank(variant: Target, attention: bool = False) -> int:
    """Where a variant comes in the search, which may run out of time: static int8 first,
    then the float forms (no quantizer: a few seconds each), dynamic int8 and the
    weight-only forms last (slower than static wherever both met the budget on the suite,
    bench/results/precision.md; weight-only pays where reading weights bounds the time).
    Among the static forms NNCF's comes first (the fastest within the budget on five suite
    models of six), except on a model with attention: there ONNX Runtime's form quantizes
    the matrix products alone, meets the budget where NNCF's missed (ViT-B/16) and takes
    half of NNCF's time."""
    attrs = variant.attrs
    if float_form(variant):
        return 2
    if attrs.get("precision") != "int8" or attrs.get("int8-recipe") not in (None, "static"):
        return 3  # dynamic, and the weight-only forms
    return int((attrs.get("int8-quantizer") == "nncf") == attention)


GENERATED = 8  # inputs generated where the user gave no samples: 4 judge (float forms)


def float_form(target: Target) -> bool:
    """Whether `target` computes in a float form below fp32 that needs no calibration."""
    return target.attrs.get("precision") in ("bf16", "f16")


@dataclass(frozen=True)
class PrecisionSetup:
    """What the precision search runs with: the config carrying the budget it judges by,
    the samples (the user's, or generated in the ranges the model implies) and whether
    only the calibration-free float forms are tried (no user budget, or no samples: int8
    needs the user's own samples)."""

    config: CompilationConfig
    samples: Samples
    float_only: bool
    generated: bool


def precision_setup(model: Model, config: CompilationConfig, samples: Samples | None,
                    sizes: Mapping[str, int] | None = None) -> PrecisionSetup | str:
    """The search's setup for this compile, or why no lower precision is tried."""
    budget = config.options.accuracy
    if budget is not None and budget.exact:
        return "accuracy=exact keeps fp32"
    float_only = budget is None or samples is None
    variants = [v for v in variants_of(config) if not float_only or float_form(v)]
    if not variants:
        if not float_only:
            return "no target offers a precision variant (onnxruntime and openvino do)"
        return ("no target computes a float form below fp32 (bf16, f16) natively on this CPU, "
                "and int8 is tried only with an accuracy budget and your own samples")
    generated = samples is None
    if samples is None:
        not_tensor = non_tensor_input(model)
        if not_tensor:
            return (f"input {not_tensor!r} is not a tensor, and tessera generates only tensor "
                    "inputs: pass samples to judge a lower precision")
        samples = Samples.load(implied_inputs(model, GENERATED, sizes=sizes), model)
    if budget is None:
        options = replace(config.options, accuracy=AccuracyBudget.parse(DEFAULT_BUDGET))
        config = replace(config, options=options)
    return PrecisionSetup(config, samples, float_only, generated)


__all__ = ["GENERATED", "PrecisionSetup", "float_form", "payoff_rank", "precision_setup",
           "variants_of"]
