"""Decoder language models with a key/value cache, told by their names alone: the token ids,
the attention mask and positions, the logits, and each past input with the present output
that gives it back one step longer. What the precision search needs to judge a decoder on
its next-token logits, with teacher forcing; `tessera.runtime.DecoderLayout` adds the checks
of types and shapes that running the loop needs."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.ir._model import Model

if TYPE_CHECKING:
    import numpy as np
    import onnx

# the past's spellings, each with the present that pairs with it
PAST_FORMS = (
    (re.compile(r"past_key_values\.(\d+)\.(key|value)"), "present.{0}.{1}"),
    (re.compile(r"past\.(\d+)\.(key|value)"), "present.{0}.{1}"),
    (re.compile(r"past_(key|value)\.(\d+)"), "present_{0}.{1}"),
)
PRESENT = re.compile(r"present\.\d+\.(key|value)|present_(key|value)\.\d+")
TOKENS, MASK, POSITIONS, LOGITS = "input_ids", "attention_mask", "position_ids", "logits"


def present_of(past: str) -> str | None:
    """The output that pairs with the input `past`, or None where it is no past."""
    for pattern, present in PAST_FORMS:
        match = pattern.fullmatch(past)
        if match is not None:
            return present.format(*match.groups())
    return None


@dataclass(frozen=True)
class DecoderNames:
    """A decoder's inputs and outputs by role: the past inputs each with its present, in the
    graph's order."""

    tokens: str
    mask: str | None
    positions: str | None
    logits: str
    cache: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, model: Model) -> DecoderNames | None:
        """The roles where `model` is a decoder with a cache (token ids, logits, and every
        past paired with its present, nothing else fed); else None."""
        return cls.of_graph(model.proto.graph)

    @classmethod
    def of_graph(cls, graph: onnx.GraphProto) -> DecoderNames | None:
        """`of` for an ONNX graph (a backend's submodel)."""
        weights = {t.name for t in graph.initializer}
        inputs = [v.name for v in graph.input if v.name not in weights]
        outputs = [v.name for v in graph.output]
        cache = tuple((name, present) for name in inputs
                      if (present := present_of(name)) is not None)
        paired = [present for _, present in cache]
        if (TOKENS not in inputs or LOGITS not in outputs or not cache
                or any(p not in outputs for p in paired)
                or any(PRESENT.fullmatch(n) and n not in paired for n in outputs)
                or any(n not in (TOKENS, MASK, POSITIONS) and present_of(n) is None
                       for n in inputs)):
            return None
        return cls(TOKENS, MASK if MASK in inputs else None,
                   POSITIONS if POSITIONS in inputs else None, LOGITS, cache)


Run = Callable[[Mapping[str, Any]], Mapping[str, Any]]  # feeds to outputs, at fp32


def teacher_forced(model: Model, names: DecoderNames, count: int, prompt: int, steps: int,
                   run: Run | None = None, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` feeds that judge a decoder's next-token logits with teacher forcing. Each
    holds `steps` tokens that fp32 (`run`) generated greedily after a prompt of `prompt`
    random token ids in [0, vocab), with the prompt's cache as the pasts: the logits of
    each position are a decode step's given the true prefix, and their argmax is fp32's
    own next token. Without `run` (or `prompt` 0), a prefill of `steps` random token ids
    and an empty past."""
    import numpy as np

    from tessera.ir._implied import index_bound

    rng = np.random.default_rng(seed)
    types = {v.name: _dtype(v.type.tensor_type) for v in model.proto.graph.input}
    outputs = {v.name: v.type.tensor_type for v in model.proto.graph.output}
    vocab = index_bound(model, names.tokens) or 2
    inputs = {v.name: v.type.tensor_type for v in model.proto.graph.input}
    empty = {past: np.zeros(empty_cache(_symbols(inputs[past]), _symbols(outputs[present]), 1),
                            types[past]) for past, present in names.cache}

    def feed(ids: np.ndarray, past: int, cache: Mapping[str, Any]) -> dict[str, np.ndarray]:
        total = past + ids.shape[1]
        found = {names.tokens: ids.astype(types[names.tokens])}
        if names.mask is not None:
            found[names.mask] = np.ones((1, total), types[names.mask])
        if names.positions is not None:
            found[names.positions] = np.arange(past, total, dtype=types[names.positions])[None]
        found.update({p: np.asarray(cache.get(q, empty[p])) for p, q in names.cache})
        return found

    feeds = []
    for _ in range(count):
        if run is None or prompt == 0:
            feeds.append(feed(rng.integers(0, vocab, (1, steps)), 0, {}))
            continue
        prompted = run(feed(rng.integers(0, vocab, (1, prompt)), 0, {}))
        cache, outputs_now = dict(prompted), prompted
        tokens: list[int] = []
        while True:
            tokens.append(int(np.asarray(outputs_now[names.logits])[0, -1].argmax()))
            if len(tokens) == steps:
                break
            outputs_now = run(feed(np.array([tokens[-1:]]), prompt + len(tokens) - 1,
                                   {q: outputs_now[q] for _, q in names.cache}))
        feeds.append(feed(np.array([tokens]), prompt, {q: cache[q] for _, q in names.cache}))
    return feeds


def _dtype(tensor: Any) -> np.dtype[Any]:
    import numpy as np
    import onnx

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))


def cache_dimension(model: Model, names: DecoderNames) -> str:
    """The symbol of the axis the first past grows on ('' where it has none)."""
    past, present = names.cache[0]
    dims = _symbols(_declared(model.proto.graph.input, past))
    axis = growing_axis(dims, _symbols(_declared(model.proto.graph.output, present)))
    symbol = dims[axis] if 0 <= axis < len(dims) else None
    return symbol if isinstance(symbol, str) else ""


def sequence_dimension(model: Model, names: DecoderNames) -> str:
    """The symbol of the token ids' sequence axis ('' where it is fixed)."""
    dims = _declared(model.proto.graph.input, names.tokens).shape.dim
    return str(dims[1].dim_param) if len(dims) > 1 else ""


def _declared(values: Any, name: str) -> Any:
    return next(v for v in values if v.name == name).type.tensor_type


Dims = Sequence[int | str | None]  # a declared shape: sizes, symbols, None where unknown


def growing_axis(past: Dims, present: Dims | None) -> int:
    """The axis a cache grows on: where the past's and the present's symbols differ
    (past_sequence, total_sequence), else the one before last, as in [batch, heads,
    sequence, head_dim]."""
    if present is not None:
        differ = [a for a, (p, q) in enumerate(zip(past, present, strict=False))
                  if a > 0 and isinstance(p, str) and p != q]
        if len(differ) == 1:
            return differ[0]
    return len(past) - 2


def empty_cache(past: Dims, present: Dims | None, batch: int) -> tuple[int, ...]:
    """The shape of an empty past of `batch`: 0 on the axis it grows on, the other sizes as
    declared (1 where unknown)."""
    axis = growing_axis(past, present)
    return tuple(batch if a == 0 else 0 if a == axis else d if isinstance(d, int) and d > 0
                 else 1 for a, d in enumerate(past))


def _symbols(tensor: Any) -> tuple[int | str | None, ...]:
    """A declared tensor type's shape as sizes and symbols."""
    return tuple(d.dim_param or (d.dim_value if d.HasField("dim_value") else None)
                 for d in tensor.shape.dim)


__all__ = ["LOGITS", "MASK", "PAST_FORMS", "POSITIONS", "PRESENT", "TOKENS", "DecoderNames",
           "Dims", "Run", "cache_dimension", "empty_cache", "growing_axis", "present_of",
           "sequence_dimension", "teacher_forced"]
