"""`generate`: a decoder language model with a key/value cache run as the loop it is. One
graph serves the prefill (the whole prompt, an empty past) and each decode step (one token,
the previous step's presents as the pasts); `DecoderLayout` finds which input and output is
which. Where the plan is one partition whose backend keeps the cache itself (OpenVINO's
state, `KeepsDecoderCache`), the loop feeds the new tokens alone and the cache never leaves
the backend; otherwise each step's presents are fed back as the next pasts."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard

from tessera.backends._input_check import InputCheck, TensorSpec, tensor_spec
from tessera.backends._protocol import Compiled, KeepsDecoderCache, StatefulDecoder
from tessera.errors import InputError, ModelError
from tessera.ir import Model
from tessera.ir._decoder import (
    LOGITS,
    MASK,
    POSITIONS,
    PRESENT,
    TOKENS,
    growing_axis,
    present_of,
)
from tessera.placement import Plan

if TYPE_CHECKING:
    import numpy as np

    from tessera.config import CompilationConfig

Stopped = Literal["length", "eos", "interrupted"]

_EXPORT_HINT = ("export the decoder with its key/value cache: inputs "
                "past_key_values.N.key|value and outputs present.N.key|value, one pair per "
                "layer and kind (e.g. torch.onnx.export of the model called with "
                "past_key_values, or optimum's text-generation-with-past task)")

FED_BACK = "fed back"  # GenerateResult.cache of the generic loop


class Decoder(Protocol):
    """What `generate` runs: a compiled model (`tessera.runtime.CompiledModel`)."""

    @property
    def model(self) -> Model: ...

    @property
    def config(self) -> CompilationConfig: ...

    @property
    def inputs(self) -> list[TensorSpec]: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def parts(self) -> list[Compiled]: ...

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class CachePair:
    """One cached tensor: the input that takes it (`past`), the output that gives it back one
    step longer (`present`), its element type, its declared shape and the axis it grows on."""

    past: str
    present: str
    dtype: str
    shape: tuple[int | str | None, ...]
    axis: int


@dataclass(frozen=True)
class DecoderLayout:
    """Which of a decoder's inputs and outputs is which: the token ids, the attention mask
    and the position ids (each [batch, sequence], the mask over past and new tokens; the
    last two may be absent), the logits ([batch, sequence, vocab]) and each past input paired
    with its present output."""

    tokens: TensorSpec
    mask: TensorSpec | None
    positions: TensorSpec | None
    logits: str
    cache: tuple[CachePair, ...]
    vocab: int | None  # the logits' last dimension where it is static

    @classmethod
    def of(cls, model: Decoder | Model) -> DecoderLayout:
        """The layout of `model` (a compiled model or a loaded `tessera.ir.Model`); a
        ModelError names the input or output that does not fit and how to fix it."""
        graph = (model if isinstance(model, Model) else model.model).dataflow.graph
        inputs = {v.name: tensor_spec(v) for v in graph.input}
        outputs = {v.name: tensor_spec(v) for v in graph.output}
        cache = _pairs(inputs, outputs)
        tokens = inputs.get(TOKENS)
        if tokens is None:
            raise ModelError(f"the decoder has no input {TOKENS!r} for the token ids (inputs: "
                             f"{', '.join(inputs)}); export it with the token ids named "
                             f"{TOKENS!r}")
        paired = {p.past for p in cache}
        others = [n for n in inputs if n not in paired and n not in (TOKENS, MASK, POSITIONS)]
        if others:
            raise ModelError(f"input {others[0]!r} is none that generate feeds ({TOKENS}, "
                             f"{MASK}, {POSITIONS} and the past key/value pairs); export the "
                             "decoder without it")
        for spec in (inputs[n] for n in (TOKENS, MASK, POSITIONS) if n in inputs):
            if spec.shape is not None and len(spec.shape) != 2:
                raise ModelError(f"input {spec.name!r} has shape {list(spec.shape)}; generate "
                                 "feeds it as [batch, sequence]")
            if not spec.dtype.startswith(("int", "uint")):
                raise ModelError(f"input {spec.name!r} has element type {spec.dtype}; "
                                 "generate feeds integers")
        logits = outputs.get(LOGITS)
        if logits is None:
            raise ModelError(f"the decoder has no output {LOGITS!r} (outputs: "
                             f"{', '.join(outputs)}); export it with the logits named "
                             f"{LOGITS!r}, [batch, sequence, vocab]")
        if logits.shape is not None and len(logits.shape) != 3:
            raise ModelError(f"output {LOGITS!r} has shape {list(logits.shape)}; generate "
                             "reads it as [batch, sequence, vocab]")
        last = logits.shape[-1] if logits.shape else None
        return cls(tokens, inputs.get(MASK), inputs.get(POSITIONS), LOGITS, cache,
                   last if isinstance(last, int) else None)

    def new_tokens(self, ids: np.ndarray, total: int) -> dict[str, np.ndarray]:
        """The feed of the new tokens `ids` [batch, sequence], the last of `total` tokens in
        all (past and new), without the cache: the token ids, the attention mask over every
        token and the new tokens' positions, where the decoder has them."""
        import numpy as np

        batch, length = ids.shape
        feeds = {self.tokens.name: ids.astype(self.tokens.dtype, copy=False)}
        if self.mask is not None:
            feeds[self.mask.name] = np.ones((batch, total), self.mask.dtype)
        if self.positions is not None:
            feeds[self.positions.name] = np.tile(
                np.arange(total - length, total, dtype=self.positions.dtype), (batch, 1))
        return feeds

    def prefill(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The feed of the prefill: every token of `ids` [batch, sequence], an empty past."""
        import numpy as np

        feeds = self.new_tokens(ids, ids.shape[1])
        for pair in self.cache:
            feeds[pair.past] = np.zeros(self._cache_shape(pair, ids.shape[0], 0), pair.dtype)
        return feeds

    def step(self, outputs: Mapping[str, np.ndarray], token: np.ndarray, total: int
             ) -> dict[str, np.ndarray]:
        """The feed of a decode step: one token per row, `total` tokens in all (past and
        new), the presents of `outputs` as the pasts: the very arrays, not copies."""
        feeds = self.new_tokens(token.reshape(token.shape[0], 1), total)
        for pair in self.cache:
            feeds[pair.past] = outputs[pair.present]
        return feeds

    def probe(self, batch: int, sequence: int, past: int) -> dict[str, np.ndarray]:
        """A feed of the shapes of a step over `sequence` new tokens after `past` ones, each
        array a broadcast zero (no memory): what the input check judges before a run."""
        import numpy as np

        def zeros(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
            return np.broadcast_to(np.zeros((), dtype), shape)

        feeds = {self.tokens.name: zeros(self.tokens.dtype, (batch, sequence))}
        if self.mask is not None:
            feeds[self.mask.name] = zeros(self.mask.dtype, (batch, past + sequence))
        if self.positions is not None:
            feeds[self.positions.name] = zeros(self.positions.dtype, (batch, sequence))
        for pair in self.cache:
            feeds[pair.past] = zeros(pair.dtype, self._cache_shape(pair, batch, past))
        return feeds

    @staticmethod
    def _cache_shape(pair: CachePair, batch: int, length: int) -> tuple[int, ...]:
        return tuple(batch if axis == 0 else length if axis == pair.axis else int(d or 0)
                     for axis, d in enumerate(pair.shape))


def _pairs(inputs: Mapping[str, TensorSpec], outputs: Mapping[str, TensorSpec]
           ) -> tuple[CachePair, ...]:
    """Each past input with its present output, checked: one element type, one rank, the
    sizes other than the batch and the cache's length fixed."""
    pasts = {name: present for name in inputs if (present := present_of(name)) is not None}
    presents = [n for n in outputs if PRESENT.fullmatch(n)]
    if not pasts and not presents:
        raise ModelError(f"the model has no key/value cache: no input past_key_values.N.key|"
                         f"value paired with an output present.N.key|value (inputs: "
                         f"{', '.join(inputs)}; outputs: {', '.join(outputs)}); {_EXPORT_HINT}")
    for name, present in pasts.items():
        if present not in outputs:
            raise ModelError(f"input {name!r} has no output {present!r} to take the next "
                             f"step's past from; {_EXPORT_HINT}")
    unpaired = [n for n in presents if n not in pasts.values()]
    if unpaired:
        raise ModelError(f"output {unpaired[0]!r} has no past input to feed it back into; "
                         f"{_EXPORT_HINT}")
    pairs = []
    for name, present in pasts.items():
        past, out = inputs[name], outputs[present]
        if past.dtype != out.dtype:
            raise ModelError(f"input {name!r} is {past.dtype} but output {present!r} is "
                             f"{out.dtype}: each present is fed back as the next past, so the "
                             "two need one element type; export them alike")
        if past.shape is None:
            raise ModelError(f"input {name!r} has no declared shape, so the prefill's empty "
                             "past cannot be made; export it with its shape [batch, heads, "
                             "past_sequence, head_dim]")
        if out.shape is not None and len(out.shape) != len(past.shape):
            raise ModelError(f"input {name!r} has shape {_shape(past.shape)} but output "
                             f"{present!r} has shape {_shape(out.shape)}: each present is fed "
                             "back as the next past, so the two need one rank; export them "
                             "alike")
        if len(past.shape) < 3:
            raise ModelError(f"input {name!r} has shape {_shape(past.shape)}: a cached key or "
                             "value is [batch, heads, sequence, head_dim]")
        axis = growing_axis(past.shape, out.shape)
        unknown = [a for a, d in enumerate(past.shape) if a not in (0, axis)
                   and not isinstance(d, int)]
        if unknown:
            raise ModelError(f"input {name!r} has shape {_shape(past.shape)}: its dimension "
                             f"{unknown[0]} has no fixed size, so the prefill's empty past "
                             "cannot be made; export it with fixed head counts and sizes")
        pairs.append(CachePair(name, present, past.dtype, past.shape, axis))
    return tuple(pairs)


def _shape(shape: tuple[int | str | None, ...] | None) -> str:
    return "unknown" if shape is None else str(list(shape))


@dataclass(frozen=True)
class GenerateResult:
    """The prompt and the tokens generated after it (`tokens`, int64 [batch, prompt +
    new_tokens]), why the loop stopped ('length': max_new_tokens reached; 'eos': every row
    gave the end token; 'interrupted': Ctrl-C), the seconds of the prefill and of the
    decode steps, and where the key/value cache lived between steps ('openvino state':
    inside the backend; 'fed back': each step's presents passed back as the next pasts)."""

    tokens: np.ndarray
    new_tokens: int
    stopped: Stopped
    prefill_seconds: float
    decode_seconds: float
    cache: str = FED_BACK

    @property
    def generated(self) -> np.ndarray:
        """The new tokens alone, [batch, new_tokens]."""
        return self.tokens[:, self.tokens.shape[1] - self.new_tokens:]


def generate(compiled: Decoder, input_ids: Any, max_new_tokens: int, *,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             do_sample: bool = False, seed: int | None = None,
             eos_token_id: int | None = None, prefill: Decoder | None = None
             ) -> GenerateResult:
    """Up to `max_new_tokens` tokens after the prompt `input_ids` (token ids, [sequence] or
    [batch, sequence], no padding). The prefill runs the whole prompt with an empty past
    (on `prefill`, another compiled form of the same decoder, where given: its presents are
    handed over once, as the cache the decode steps start from);
    each decode step feeds one token with the previous step's presents as the pasts, or,
    where the plan is one partition that keeps the cache inside its backend (OpenVINO), one
    token alone (the cache emptied before the prefill). Greedy
    (the argmax of the last position's logits) unless `do_sample`: then the logits are
    divided by `temperature`, kept to the `top_k` largest, then to the smallest set whose
    probability reaches `top_p`, and drawn with `numpy.random.default_rng(seed)`. A row that
    gives `eos_token_id` is finished (and padded with it); the loop stops when all are. An
    interrupt (Ctrl-C) during the loop returns the tokens so far. An InputError names the
    argument and the limit it breaks, before anything runs."""
    import numpy as np

    layout = DecoderLayout.of(compiled)
    ids = _prompt(input_ids, layout.vocab)
    _check_arguments(max_new_tokens, temperature, top_k, top_p, eos_token_id, layout.vocab)
    _check_lengths(compiled, layout, ids.shape[0], ids.shape[1], max_new_tokens)
    if prefill is not None:
        _check_prefill(prefill, layout, ids)
    rng = np.random.default_rng(seed) if do_sample else None
    loop = _loop(compiled, layout)  # a stateful form is compiled here, before the clock
    batch, length = ids.shape
    new: list[np.ndarray] = []
    finished = np.zeros(batch, bool)
    stopped: Stopped = "length"
    started = time.perf_counter()
    prefilled = decode = 0.0
    try:
        if prefill is None:
            logits = loop.prefill(ids)
        else:
            logits = loop.handed(prefill.run(layout.prefill(ids)))
        while True:
            scores = logits[:, -1, :]
            token = scores.argmax(-1) if rng is None else _sample(scores, rng, temperature,
                                                                  top_k, top_p)
            if eos_token_id is not None:
                token = np.where(finished, eos_token_id, token)
                finished |= token == eos_token_id
            new.append(token.astype(np.int64))
            if len(new) == 1:
                prefilled = time.perf_counter() - started
            if eos_token_id is not None and finished.all():
                stopped = "eos"
                break
            if len(new) == max_new_tokens:
                break
            logits = loop.step(token, length + len(new))
    except KeyboardInterrupt:
        stopped = "interrupted"
    ended = time.perf_counter() - started
    if new:
        decode = ended - prefilled
    else:
        prefilled = ended
    tokens = np.concatenate([ids.astype(np.int64), *(t[:, None] for t in new)], axis=1)
    return GenerateResult(tokens, len(new), stopped, prefilled, decode, loop.cache)


class _FedBack:
    """The generic loop: the compiled model run on the whole feed, each step's presents fed
    back as the next pasts."""

    cache = FED_BACK

    def __init__(self, compiled: Decoder, layout: DecoderLayout) -> None:
        self.run, self.layout = compiled.run, layout
        self.outputs: dict[str, np.ndarray] = {}

    def prefill(self, ids: np.ndarray) -> np.ndarray:
        self.outputs = self.run(self.layout.prefill(ids))
        return self.outputs[self.layout.logits]

    def step(self, token: np.ndarray, total: int) -> np.ndarray:
        self.outputs = self.run(self.layout.step(self.outputs, token, total))
        return self.outputs[self.layout.logits]

    def handed(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """A prefill's outputs from elsewhere: its presents become the next pasts."""
        self.outputs = dict(outputs)
        return self.outputs[self.layout.logits]


class _Stateful:
    """The loop over a backend that keeps the cache: the new tokens alone go in, the
    logits alone come out."""

    def __init__(self, decoder: StatefulDecoder, layout: DecoderLayout) -> None:
        self.decoder, self.layout = decoder, layout
        self.cache = decoder.cache

    def prefill(self, ids: np.ndarray) -> np.ndarray:
        self.decoder.reset()
        return self.decoder.step(self.layout.new_tokens(ids, ids.shape[1]))

    def step(self, token: np.ndarray, total: int) -> np.ndarray:
        return self.decoder.step(self.layout.new_tokens(token.reshape(token.shape[0], 1),
                                                        total))

    def handed(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """A prefill's outputs from elsewhere: its presents loaded as the cache, once."""
        self.decoder.reset()
        self.decoder.load({pair.past: outputs[pair.present] for pair in self.layout.cache})
        return outputs[self.layout.logits]


def _loop(compiled: Decoder, layout: DecoderLayout) -> _FedBack | _Stateful:
    """The stateful loop where the plan is one partition, taking every input of the
    model, whose backend keeps the cache (`KeepsDecoderCache`) and that holds every pair of
    the layout; else the generic one."""
    if len(compiled.parts) != 1 or set(compiled.plan.partitions[0].inputs) != \
            {spec.name for spec in compiled.inputs}:
        return _FedBack(compiled, layout)
    whole: object = compiled.parts[0]  # a partition: the protocol says whether it keeps one
    if isinstance(whole, KeepsDecoderCache):
        decoder = whole.stateful_decoder({p.past: p.present for p in layout.cache},
                                         layout.tokens.name, layout.logits)
        if decoder is not None:
            return _Stateful(decoder, layout)
    return _FedBack(compiled, layout)


def _check_prefill(prefill: Decoder, layout: DecoderLayout, ids: np.ndarray) -> None:
    """An InputError where `prefill` is not a form of the same decoder (its cache pairs
    differ) or its profile refuses the prompt."""
    other = DecoderLayout.of(prefill)
    if other.cache != layout.cache:
        differ = next((f"{a.past} {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
                       for a, b in zip(other.cache, layout.cache, strict=False) if a != b),
                      f"{len(other.cache)} cached tensors against {len(layout.cache)}")
        raise InputError(f"prefill: the model given to run the prefill has other cache "
                         f"inputs than this one ({differ}); give a compiled form of the same "
                         "decoder")
    _check_lengths(prefill, other, ids.shape[0], ids.shape[1], 1)


def _prompt(input_ids: Any, vocab: int | None) -> np.ndarray:
    """The prompt as [batch, sequence] integers, or an InputError naming what is wrong."""
    import numpy as np

    ids = np.asarray(input_ids)
    if ids.size == 0 and ids.dtype.kind == "f":  # an empty list reads as float64
        ids = ids.astype(np.int64)
    if ids.dtype.kind not in "iu":
        raise InputError(f"input {TOKENS!r}: token ids are integers, got an array of "
                         f"{ids.dtype}")
    if ids.ndim == 1:
        ids = ids[None]
    elif ids.ndim != 2:
        raise InputError(f"input {TOKENS!r}: a prompt is [sequence] or [batch, sequence], "
                         f"got shape {list(ids.shape)}")
    if ids.size == 0:
        raise InputError(f"input {TOKENS!r}: the prompt is empty (shape {list(ids.shape)}); "
                         "give at least one token id per row")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or (vocab is not None and high >= vocab):
        bad = low if low < 0 else high
        limit = f"[0, {vocab})" if vocab is not None else ">= 0"
        raise InputError(f"input {TOKENS!r}: token id {bad} is outside the vocabulary "
                         f"{limit}" + (" (the logits' last dimension)" if vocab else ""))
    return ids


def _check_arguments(max_new_tokens: object, temperature: object, top_k: object,
                     top_p: object, eos_token_id: object, vocab: int | None) -> None:
    if not _integer(max_new_tokens, 1):
        raise InputError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not _number(temperature) or not 0 < temperature < math.inf:
        raise InputError(f"temperature must be a number > 0, got {temperature!r}")
    if top_k is not None and not _integer(top_k, 1):
        raise InputError(f"top_k must be an integer >= 1 (or None), got {top_k!r}")
    if top_p is not None and (not _number(top_p) or not 0 < top_p <= 1):
        raise InputError(f"top_p must be a number in (0, 1] (or None), got {top_p!r}")
    if eos_token_id is not None and not _integer(eos_token_id, 0, vocab):
        limit = f"[0, {vocab})" if vocab is not None else ">= 0"
        raise InputError(f"eos_token_id must be a token id in {limit}, got {eos_token_id!r}")


def _integer(value: object, low: int, high: int | None = None) -> bool:
    """Whether `value` is an int (numpy's too, not a bool) in [low, high)."""
    import numpy as np

    return bool(isinstance(value, int | np.integer) and not isinstance(value, bool)
                and low <= value and (high is None or value < high))


def _number(value: object) -> TypeGuard[float]:
    import numpy as np

    return isinstance(value, int | float | np.integer | np.floating) \
        and not isinstance(value, bool)


def _check_lengths(compiled: Decoder, layout: DecoderLayout, batch: int, length: int,
                   new: int) -> None:
    """The prefill's and the last decode step's shapes judged by the compiled model's own
    input check (its shape profile's ranges and sums), before anything runs. A refusal
    names the longest prompt, or the most tokens in all, that the profile allows."""
    check = InputCheck(compiled.inputs, compiled.config.options.shapes)

    def fits(sequence: int, past: int) -> bool:
        try:
            check.check(layout.probe(batch, sequence, past))
        except InputError:
            return False
        return True

    steps = [("the prefill", length, 0)]
    if new > 1:  # the last token is chosen from the step before it: that step is the longest
        steps.append((f"decode step {new - 1}", 1, length + new - 2))
    for what, sequence, past in steps:
        try:
            check.check(layout.probe(batch, sequence, past))
        except InputError as err:
            rows = f" in {batch} rows" if batch > 1 else ""
            if past == 0:
                most = _longest(lambda n: fits(n, 0), 1, length - 1)
                limit = "" if most is None else (
                    f"; it takes a prompt of at most {most} token(s)")
            else:
                most = _longest(lambda n: fits(1, n), length, past - 1)
                limit = "" if most is None else (
                    f"; it takes at most {most + 1} tokens in all (past and new together), so "
                    f"a prompt of {length} allows max_new_tokens={most - length + 2} at most")
            raise InputError(f"a prompt of {length} token(s){rows} with max_new_tokens={new} does "
                             f"not fit the compiled model: {what} (sequence {sequence}, past "
                             f"{past}, total {past + sequence}) is refused: {err}{limit}"
                             ) from None


def _longest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] that `fits`, where what fits ends at some n (a range's
    top), or None where `low` does not fit."""
    if high < low or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _sample(logits: np.ndarray, rng: np.random.Generator, temperature: float,
            top_k: int | None, top_p: float | None) -> np.ndarray:
    """One token per row: temperature, then top-k, then top-p (nucleus) filtering, then a
    draw from what is left."""
    import numpy as np

    scores = logits.astype(np.float64) / temperature
    vocab = scores.shape[-1]
    if top_k is not None and top_k < vocab:
        kth = np.partition(scores, vocab - top_k, axis=-1)[:, vocab - top_k, None]
        scores = np.where(scores < kth, -np.inf, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, -1)
        # a token is dropped once those before it reach top_p: the first is always kept
        dropped = np.cumsum(ranked, -1) - ranked >= top_p
        drop = np.empty_like(dropped)
        np.put_along_axis(drop, order, dropped, -1)
        probs = np.where(drop, 0.0, probs)
        probs /= probs.sum(-1, keepdims=True)
    cumulative = np.cumsum(probs, -1)
    draws = rng.random(probs.shape[0])[:, None] * cumulative[:, -1:]
    picked: np.ndarray = np.minimum((cumulative <= draws).sum(-1), vocab - 1)
    return picked


__all__ = ["CachePair", "Decoder", "DecoderLayout", "GenerateResult", "generate"]
