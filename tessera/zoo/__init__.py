"""Bundled example models: torch definitions with random weights, exported to ONNX on first
use and cached under `TESSERA_CACHE/models` (nothing binary is committed). Needs `.[torch]`.
Decoder language models with a key/value cache have their own registry (`decoder_names`)."""

from __future__ import annotations

import hashlib
import inspect
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera._private.cache import atomic_write_bytes, cache_dir
from tessera._private.registry import Registry
from tessera.errors import BackendUnavailableError

__all__ = ["DECODERS", "ZOO", "DecoderSpec", "ZooModel", "decoder_inputs", "decoder_names",
           "decoder_spec", "example_inputs", "export", "export_decoder", "names"]

OPSET = 17


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], Any]  # () -> torch.nn.Module
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (name, shape without batch, dtype)
    doc: str
    high: int = 0  # exclusive upper bound for integer inputs (token ids)
    # whether axis 1 of every input counts tokens: symbolic `sequence` in a dynamic export
    sequence: bool = False


ZOO: Registry[ZooModel] = Registry("zoo model")


def _add(name: str, build: Callable[[], Any], inputs: tuple[tuple[str, tuple[int, ...], str], ...],
         doc: str, high: int = 0, sequence: bool = False) -> None:
    ZOO.register(name, ZooModel(name, build, inputs, doc, high, sequence))


def _d() -> Any:
    from tessera.zoo import _definitions

    return _definitions


_IMAGE = (("image", (3, 224, 224), "float32"),)
_add("mlp", lambda: _d().MLP(), (("x", (64,), "float32"),), "4-layer MLP with GELU, softmax")
_add("resnet-tiny", lambda: _d().ResNet((1, 1, 1, 1), base=8, classes=10),
     (("image", (3, 64, 64), "float32"),), "ResNet-like: bottlenecks, 4 stages, width 8")
_add("mobilenetv2-tiny", lambda: _d().MobileNetV2(0.25, classes=10),
     (("image", (3, 64, 64), "float32"),), "MobileNetV2 at width 0.25, 64×64")
_add("bert-tiny", lambda: _d().Transformer(2, 64, 4, 32, vocab=512),
     (("ids", (32,), "int64"),), "BERT-like encoder: 2 layers, hidden 64, seq 32", high=512,
     sequence=True)
_add("gpt2-block-tiny", lambda: _d().GPT2Block(64, 4, 32),
     (("x", (32, 64), "float32"),), "GPT-2 decoder block with a causal mask, hidden 64, seq 32",
     sequence=True)
_add("resnet50", lambda: _d().ResNet(), _IMAGE, "ResNet-50")
_add("mobilenetv2", lambda: _d().MobileNetV2(), _IMAGE, "MobileNetV2 1.0")
_add("bert-base", lambda: _d().Transformer(), (("ids", (128,), "int64"),),
     "BERT-base encoder, seq 128", high=30522, sequence=True)
_add("gpt2-small", lambda: _d().Transformer(12, 768, 12, 128, vocab=50257, causal=True),
     (("ids", (128,), "int64"),), "GPT-2-small decoder, seq 128", high=50257, sequence=True)

# EfficientNet-B0's stages (expand, channels, repeats, stride), 3x3 depthwise throughout
_EFFICIENTNET_B0 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 40, 2, 2), (6, 80, 3, 2), (6, 112, 3, 1),
                    (6, 192, 4, 2), (6, 320, 1, 1))
_add("efficientnet-b0", lambda: _d().MobileNetV2(
    se=True, act=_d().nn.SiLU, settings=_EFFICIENTNET_B0), _IMAGE,
    "EfficientNet-B0-like: inverted residuals with squeeze-excite and SiLU")
_add("vit-b16", lambda: _d().ViT(), _IMAGE, "ViT-B/16-like: 16x16 patches, 12 pre-norm blocks")
_add("convnext", lambda: _d().ConvNeXt(), _IMAGE,
     "ConvNeXt-like: 7x7 depthwise, LayerNorm, MLP blocks; depths 2-2-6-2, widths 64-512")
_add("unet", lambda: _d().UNet(), (("image", (3, 256, 256), "float32"),),
     "UNet-like: 4 levels, bilinear upsampling (Resize) and skip Concats, 256x256")
_add("hybrid", lambda: _d().Hybrid(), _IMAGE,
     "CNN stem (bottlenecks to stride 16) feeding 4 transformer blocks, hidden 256")


def names() -> list[str]:
    return ZOO.names()


def export(name: str, batch: int = 1, *, dynamic: bool = False) -> Path:
    """The ONNX file of a bundled model, exported once and cached. With `dynamic`, the batch
    is the symbolic dimension `batch` (and the token axis of a token model `sequence`, up to
    the length of its positional table and causal mask); `batch` is then only the size the
    export traces at."""
    entry = ZOO.get(name)
    kind = "-dyn" if dynamic else ""
    path = cache_dir("models") / f"{name}-b{batch}{kind}-{_fingerprint()}.onnx"
    if not path.exists():
        atomic_write_bytes(path, _export_bytes(entry, batch, dynamic))
    return path


def example_inputs(name: str, batch: int = 1, seed: int = 0) -> dict[str, Any]:
    """Random inputs of the model's shapes (numpy)."""
    import numpy as np

    entry = ZOO.get(name)
    rng = np.random.default_rng(seed)
    feeds = {}
    for input_name, shape, dtype in entry.inputs:
        full = (batch, *shape)
        if dtype.startswith("int"):
            feeds[input_name] = rng.integers(0, entry.high, full).astype(dtype)
        else:
            feeds[input_name] = rng.standard_normal(full).astype(dtype)
    return feeds


def dynamic_axes(entry: ZooModel) -> dict[str, dict[int, str]]:
    """The symbolic axes of a dynamic export, by input and output name."""
    axes = {0: "batch", 1: "sequence"} if entry.sequence else {0: "batch"}
    return {**{name: dict(axes) for name, _, _ in entry.inputs}, "output": dict(axes)}


def _export_bytes(entry: ZooModel, batch: int, dynamic: bool = False) -> bytes:
    try:
        import torch
    except ImportError as err:
        raise BackendUnavailableError(
            "the bundled models are torch definitions: pip install 'tessera[torch]'") from err
    torch.manual_seed(0)
    module = entry.build().eval()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        for sub in module.modules():
            if isinstance(sub, torch.nn.BatchNorm2d):
                assert sub.running_mean is not None and sub.running_var is not None
                sub.running_mean.uniform_(-0.1, 0.1)
                sub.running_var.uniform_(0.5, 1.5)
    args = tuple(torch.from_numpy(v) for v in example_inputs(entry.name, batch).values())
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buffer,  # type: ignore[arg-type]  # BytesIO works
                          dynamo=False, opset_version=OPSET,
                          input_names=[i[0] for i in entry.inputs], output_names=["output"],
                          dynamic_axes=dynamic_axes(entry) if dynamic else None,
                          do_constant_folding=True)
    return buffer.getvalue()


def _fingerprint() -> str:
    """Changes when the definitions or torch change, so stale exports are never reused."""
    from tessera.zoo import _definitions

    return _digest(inspect.getsource(_definitions), inspect.getsource(_export_bytes))


def _digest(*sources: str) -> str:
    """The first 12 hex digits of a hash of `sources`, the opset and torch's version."""
    from importlib.metadata import version

    source = "".join(sources) + str(OPSET)
    return hashlib.sha256((source + version("torch")).encode()).hexdigest()[:12]


# -- decoders with a key/value cache ----------------------------------------------------------
@dataclass(frozen=True)
class DecoderSpec:
    name: str
    family: str  # "gpt2" or "llama"
    layers: int
    hidden: int
    heads: int
    kv_heads: int  # heads of the cached keys and values (fewer than heads: grouped-query)
    head_dim: int
    intermediate: int  # width of the MLP
    vocab: int
    max_positions: int
    doc: str


DECODERS: Registry[DecoderSpec] = Registry("decoder")


def _add_decoder(name: str, family: str, layers: int, hidden: int, heads: int, vocab: int,
                 max_positions: int, doc: str, *, kv_heads: int = 0, head_dim: int = 0,
                 intermediate: int = 0) -> None:
    DECODERS.register(name, DecoderSpec(
        name, family, layers, hidden, heads, kv_heads or heads, head_dim or hidden // heads,
        intermediate or 4 * hidden, vocab, max_positions, doc))


_add_decoder("gpt2-kv-tiny", "gpt2", 2, 64, 4, 512, 128,
             "GPT-2-like decoder with a key/value cache: 2 layers, hidden 64, 4 heads")
_add_decoder("llama-kv-tiny", "llama", 2, 64, 4, 512, 128,
             "Llama-like decoder with a key/value cache: 2 layers, hidden 64, 4 heads sharing "
             "2 key/value heads", kv_heads=2, intermediate=128)
_add_decoder("gpt2-small-kv", "gpt2", 12, 768, 12, 50257, 1024,
             "GPT-2-small decoder with a key/value cache")
_add_decoder("llama-kv-0.5b", "llama", 24, 896, 14, 32000, 2048,
             "Qwen2-0.5B-like Llama decoder with a key/value cache: 24 layers, hidden 896, "
             "14 heads sharing 2 key/value heads", kv_heads=2, head_dim=64, intermediate=4864)


def decoder_names() -> list[str]:
    """The names of the bundled decoders with a key/value cache."""
    return DECODERS.names()


def decoder_spec(name: str) -> DecoderSpec:
    """A bundled decoder's sizes; an unknown name raises RegistryError naming close ones."""
    return DECODERS.get(name)


def export_decoder(name: str) -> Path:
    """The ONNX file of a bundled decoder, exported once and cached. One graph serves the
    prefill and each decode step: inputs `input_ids`, `attention_mask`, `position_ids` and
    `past_key_values.{i}.key|value` per layer; outputs `logits` and `present.{i}.key|value`.
    Its symbolic dimensions are `batch`, `sequence`, `past_sequence` and `total_sequence`."""
    spec = DECODERS.get(name)
    path = cache_dir("models") / f"{name}-dyn-{_decoder_fingerprint(spec)}.onnx"
    if not path.exists():
        atomic_write_bytes(path, _export_decoder_bytes(spec))
    return path


def decoder_inputs(name: str, prompt_length: int, batch: int = 1,
                   seed: int = 0) -> dict[str, Any]:
    """A prefill feed (numpy): random token ids below the vocabulary, an attention mask of
    ones, positions 0..prompt_length-1 and an empty past for every layer."""
    import numpy as np

    spec = DECODERS.get(name)
    ids = np.random.default_rng(seed).integers(0, spec.vocab, (batch, prompt_length))
    feeds: dict[str, Any] = {
        "input_ids": ids.astype(np.int64),
        "attention_mask": np.ones((batch, prompt_length), np.int64),
        "position_ids": np.tile(np.arange(prompt_length, dtype=np.int64), (batch, 1)),
    }
    empty = np.zeros((batch, spec.kv_heads, 0, spec.head_dim), np.float32)
    for past in _past_names(spec):
        feeds[past] = empty.copy()
    return feeds


def _past_names(spec: DecoderSpec) -> list[str]:
    return [f"past_key_values.{i}.{kind}" for i in range(spec.layers)
            for kind in ("key", "value")]


def _present_names(spec: DecoderSpec) -> list[str]:
    return [f"present.{i}.{kind}" for i in range(spec.layers) for kind in ("key", "value")]


def _decoder_axes(spec: DecoderSpec) -> dict[str, dict[int, str]]:
    """The symbolic axes of a decoder's inputs and outputs, by name."""
    tokens = {0: "batch", 1: "sequence"}
    axes = {"input_ids": tokens, "attention_mask": {0: "batch", 1: "total_sequence"},
            "position_ids": tokens, "logits": tokens}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in _past_names(spec)})
    axes.update({n: {0: "batch", 2: "total_sequence"} for n in _present_names(spec)})
    return {name: dict(named) for name, named in axes.items()}


def _export_decoder_bytes(spec: DecoderSpec) -> bytes:
    try:
        import torch

        from tessera.zoo import _decoders
    except ImportError as err:
        raise BackendUnavailableError(
            "the bundled models are torch definitions: pip install 'tessera[torch]'") from err
    module = _decoders.build(spec)
    # traced with a past and several new tokens, so that no axis is fixed to a constant
    batch, sequence, past = 2, 2, 3
    generator = torch.Generator().manual_seed(0)
    args = (torch.randint(0, spec.vocab, (batch, sequence), generator=generator),
            torch.ones(batch, past + sequence, dtype=torch.int64),
            torch.arange(past, past + sequence).repeat(batch, 1),
            *(torch.randn(batch, spec.kv_heads, past, spec.head_dim, generator=generator)
              for _ in _past_names(spec)))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buffer,  # type: ignore[arg-type]  # BytesIO works
                          dynamo=False, opset_version=OPSET,
                          input_names=["input_ids", "attention_mask", "position_ids",
                                       *_past_names(spec)],
                          output_names=["logits", *_present_names(spec)],
                          dynamic_axes=_decoder_axes(spec), do_constant_folding=True)
    return buffer.getvalue()


def _decoder_fingerprint(spec: DecoderSpec) -> str:
    """As `_fingerprint`, over the decoder definitions, their export and the sizes."""
    from tessera.zoo import _decoders

    return _digest(inspect.getsource(_decoders), inspect.getsource(_export_decoder_bytes),
                   repr(spec))
