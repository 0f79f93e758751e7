"""What the precision search runs with: the variants the config's targets offer, the
budget it judges by, and the samples (the user's, or generated in the ranges the model
implies). A decoder with a key/value cache is judged on its next-token logits alone, with
teacher forcing: prefills over generated token ids, the top-1 agreement at every position;
its weight-only forms need no calibration, so they are tried without samples too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera import backends
from tessera.backends._quantize import SMOOTHQUANT_ALPHA
from tessera.config import (
    DEFAULT_BUDGET,
    AccuracyBudget,
    CompilationConfig,
    DimProfile,
    ShapeProfile,
)
from tessera.ir import Model, Samples
from tessera.ir._decoder import (
    DecoderNames,
    Run,
    cache_dimension,
    sequence_dimension,
    teacher_forced,
)
from tessera.ir._implied import implied_inputs, non_tensor_input
from tessera.placement.judge._budget import matrix_engine
from tessera.target import Target


def variants_of(config: CompilationConfig, attention: bool = False,
                decoder: bool = False, engine: bool | None = None) -> list[Target]:
    """Every precision variant the config's targets offer, in the order of their expected
    payoff for a model with or without `attention`, or a `decoder`, on a CPU with or
    without a matrix `engine` (`payoff_rank`), then the config's priority."""
    found: list[Target] = []
    for target in config.priority:
        backend = backends.get(target.kind.name)
        if backend.is_available().ok:
            found += [v for v in backend.precision_variants(target) if v not in found
                      and (attention or not smoothed(v))]
    engine = matrix_engine() if engine is None else engine
    return sorted(found, key=lambda v: payoff_rank(v, attention, decoder, engine))


def smoothed(variant: Target) -> bool:
    """Whether `variant` sets NNCF's SmoothQuant alpha, which acts on a transformer's matrix
    products alone: on a model without attention it is NNCF's default form again."""
    return variant.attrs.get("int8-smoothquant") is not None


def payoff_rank(variant: Target, attention: bool = False, decoder: bool = False,
                engine: bool = False) -> int:
    """Where a variant comes in the search, which may run out of time: static int8 first,
    then the float forms (no quantizer: a few seconds each), dynamic int8 and the
    weight-only forms last (slower than static wherever both met the budget on the suite,
    bench/results/precision.md; weight-only pays where reading weights bounds the time).
    Among the static forms NNCF's comes first (the fastest within the budget on five suite
    models of six). A model with attention starts with the 8-bit weight-only forms: they
    need no calibration (3 s to make on BERT-base, against 26 s for NNCF's static form),
    and OpenVINO quantizes their activations at run time, per token (`weight_only_rows`;
    ONNX Runtime's run there slower than fp32, so they come last): on BERT-base,
    ViT-B/16 and GPT-2-small that ran as fast as the best static form, at cosine
    0.9996-0.9999 (static: 0.97-0.9997). Then NNCF's static form without SmoothQuant (half
    the time to make: 15 s on GPT-2-small against 29 s; within `cosine>=0.999` on all three,
    where alpha 0.15 missed ViT-B/16's top-1 on a Xeon with AMX), at alpha 0.15 (cosine
    0.9993-0.9999 there, where NNCF's default alpha gave 0.983-0.9994), then ONNX Runtime's
    static form of the matrix products alone and NNCF's default alpha. A
    decoder's steps read every weight once per token, so there the weight-only forms come
    first, 8-bit before 4-bit (the more likely to meet the budget), then the float forms,
    then the rest. On a CPU with a matrix `engine` (AMX, `matrix_engine`) a model with
    attention starts with bf16 (no calibration, a few seconds: it ran BERT-base 3.9x faster
    than OpenVINO in f32 there; f16 ran slower than f32), then the static forms in the same
    order, and the weight-only forms after them (slower than bf16 there)."""
    attrs = variant.attrs
    eight_bit_weights = weight_only(variant) and attrs.get("precision") == "int8"
    if decoder:
        return 0 if eight_bit_weights else \
            1 if weight_only(variant) else 2 if float_form(variant) else 3
    if attention and engine:
        if attrs.get("precision") == "bf16":  # AMX's tiles compute in bf16, not f16
            return 0
        if eight_bit_weights and per_row_weights(variant):
            return 4
    elif attention and eight_bit_weights and per_row_weights(variant):
        return 0
    if float_form(variant):
        return 4
    if attrs.get("precision") != "int8" or attrs.get("int8-recipe") not in (None, "static"):
        return 5  # dynamic, and the other weight-only forms
    nncf = attrs.get("int8-quantizer") == "nncf"
    if not attention:
        return 0 if nncf else 1
    alpha = attrs.get("int8-smoothquant")
    return 1 if alpha == "off" else 2 if alpha == SMOOTHQUANT_ALPHA else 3


GENERATED = 8  # inputs generated where the user gave no samples: 4 judge (float forms)
DECODER_PROMPTS = 16  # a decoder's generated prompts: 8 judge
DECODER_PROMPT, DECODER_STEPS = 8, 24  # their random tokens, then fp32's greedy ones
DECODER_BUDGET = "top1>=0.99"  # a decoder's default: greedy's choice kept at 99% of steps


def float_form(target: Target) -> bool:
    """Whether `target` computes in a float form below fp32 that needs no calibration."""
    return target.attrs.get("precision") in ("bf16", "f16")


def per_row_weights(target: Target) -> bool:
    """Whether `target` is a weight-only form whose backend quantizes its activations per
    row as it runs (`Backend.weight_only_rows`): as fast as static int8 on many rows."""
    return weight_only(target) and backends.get(target.kind.name).weight_only_rows


def weight_only(target: Target) -> bool:
    """Whether `target` quantizes the weights alone (int8 or int4): no calibration."""
    attrs = target.attrs
    return attrs.get("precision") == "int4" or (
        attrs.get("precision") == "int8" and attrs.get("int8-recipe") == "weights")


@dataclass(frozen=True)
class PrecisionSetup:
    """What the precision search runs with: the config carrying the budget it judges by,
    the samples (the user's, or generated in the ranges the model implies) and whether
    only the calibration-free forms are tried (no user budget, or no samples: int8 needs
    the user's own samples): the float forms, and a decoder's weight-only forms. `judged`
    names the outputs the budget bounds (a decoder's logits; empty: every output)."""

    config: CompilationConfig
    samples: Samples
    float_only: bool
    generated: bool
    judged: tuple[str, ...] = ()
    decoder: bool = False

    def offers(self, variant: Target) -> bool:
        """Whether the search tries `variant`."""
        return _offered(variant, self.float_only, self.decoder)

    @property
    def inputs(self) -> str:
        """Which inputs judge, in words."""
        if not self.generated:
            return f"your {len(self.samples)} samples"
        if self.decoder:
            return (f"{len(self.samples)} generated prompts of token ids, their next-token "
                    "logits with teacher forcing")
        return f"{len(self.samples)} inputs generated in the ranges the model implies"


def precision_setup(model: Model, config: CompilationConfig, samples: Samples | None,
                    sizes: Mapping[str, int] | None = None, run: Run | None = None
                    ) -> PrecisionSetup | str:
    """The search's setup for this compile, or why no lower precision is tried. `run` is
    the fp32 plan's: it generates a decoder's judging tokens."""
    budget = config.options.accuracy
    if budget is not None and budget.exact:
        return "accuracy=exact keeps fp32"
    names = DecoderNames.of(model)
    float_only = budget is None or samples is None
    if not any(_offered(v, float_only, names is not None) for v in variants_of(config)):
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
        feeds = (implied_inputs(model, GENERATED, sizes=sizes) if names is None else
                 teacher_forced(model, names, DECODER_PROMPTS,
                                *_lengths(model, names, config.options.shapes), run))
        samples = Samples.load(feeds, model)
    if budget is None:
        default = DEFAULT_BUDGET if names is None else DECODER_BUDGET
        options = replace(config.options, accuracy=AccuracyBudget.parse(default))
        config = replace(config, options=options)
    return PrecisionSetup(config, samples, float_only, generated,
                          () if names is None else (names.logits,), names is not None)


def _offered(variant: Target, float_only: bool, decoder: bool) -> bool:
    return not float_only or float_form(variant) or (decoder and weight_only(variant))


def _lengths(model: Model, names: DecoderNames, shapes: ShapeProfile | None
             ) -> tuple[int, int]:
    """The generated prompts' random tokens and fp32's steps after them. The prompt is the
    cache length the profile weighs most (the judged steps then sit where the decoder is
    served: on the 0.5B Llama an f16 form agrees on every step after 8 tokens and misses
    0.99 after 64), else `DECODER_PROMPT`; the steps are `DECODER_STEPS`; both within what
    the profile allows the past and the new tokens."""

    def dim_of(symbol: str) -> DimProfile | None:
        dim = shapes.get(symbol) if shapes is not None and symbol else None
        return None if dim is None or dim.is_sum else dim

    def bounds(dim: DimProfile | None) -> tuple[int, int | None]:
        if dim is None:
            return 0, None
        if dim.is_range:
            return dim.low or 0, dim.high
        return min(dim.values), max(dim.values)

    past = dim_of(cache_dimension(model, names))
    past_low, past_high = bounds(past)
    new_low, new_high = bounds(dim_of(sequence_dimension(model, names)))
    steps = max(1, new_low, min(DECODER_STEPS, new_high or DECODER_STEPS))
    served = max(past.measured, key=lambda value: value[1])[0] \
        if past is not None and past.measured else DECODER_PROMPT
    prompt = max(past_low, served if past_high is None else min(served, past_high))
    return prompt, steps


__all__ = ["DECODER_BUDGET", "DECODER_PROMPTS", "GENERATED", "PrecisionSetup", "float_form",
           "payoff_rank", "per_row_weights", "precision_setup", "variants_of", "weight_only"]
