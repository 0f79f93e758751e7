"""Rows for the dedicated LLM runtimes in the decode benchmark, on the same random weights as
tessera's bundled decoders (`tessera.zoo._decoders.build(spec, seed=0)`).

Each runtime gets the zoo module's weights in its own format, converted once and cached under
`TESSERA_CACHE/decode-runtimes/<model>-<fingerprint>/` (or the `work` directory given):
- `hf/`: a Hugging Face checkpoint (LlamaForCausalLM or GPT2LMHeadModel, fp32 safetensors)
  holding exactly the zoo module's weights, with a made-up tokenizer of the model's vocabulary
  size (the runtimes are fed token ids; their converters insist on a tokenizer).
  `check_hf_checkpoint` compares its logits with the module's.
- onnxruntime-genai (`ort-genai-<weights>/`): its model builder run on `hf/` at
  `-p int8|int4|fp32 -e cpu` and its defaults (MatMulNBits, symmetric, block 32,
  accuracy_level 4: int8 activations). The builder refuses GPT-2; the row says so.
- openvino-genai (`ov-<weights>/`): `openvino.convert_model` of the zoo module (attention as
  `scaled_dot_product_attention`, which LLMPipeline's paged-attention pass looks for), made
  stateful as optimum-intel makes it (inputs input_ids, attention_mask, position_ids, beam_idx;
  output logits), saved with fp32 weights (`fp32`) or compressed by NNCF as `optimum-cli export
  openvino --weight-format` does: `int8` is INT8_ASYM per output channel, every layer; `int4` is
  optimum's default 4-bit config, INT4_ASYM, group 128, ratio 1.0, the embedding and the LM
  head left to NNCF's INT8_ASYM backup. The pipeline runs at its defaults: bf16 inference where
  the CPU has it, u8 KV cache (the row records what OpenVINO reports), prefix caching off.
- llama.cpp (`gguf-<weights>.gguf`): llama.cpp's `convert_hf_to_gguf.py` (from the
  llama-cpp-python sdist of the installed version) run on `hf/` to f32, then
  `llama_cpp.llama_model_quantize` to q8_0 or q4_0 (llama.cpp's own mix: it may keep a tensor
  such as the LM head at a higher type). KV cache f16, its default.

`measure` gives one row in the calling process; `measure_in_child` runs it in a fresh
interpreter, so peak memory is the row's own and a crash (llama.cpp's segfault) is an error row.

    pip install -e '.[decode]'
    # llama-cpp-python has no wheel: it builds from the sdist (about 3 minutes on 2 cores).
    # On a CPU with AMX build without it (the AMX extra buffer segfaulted in llama_decode):
    #   CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    #     -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF
    #     -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" pip install llama-cpp-python==0.3.36
    python -m bench._decode_runtimes --model llama-kv-tiny --prompt 16 --new 8   # smoke"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# (runtime, weights) of the rows the decode benchmark reports
ROWS: list[tuple[str, str]] = [
    ("onnxruntime-genai", "int8"), ("onnxruntime-genai", "int4"),
    ("openvino-genai", "int8"), ("openvino-genai", "int4"),
    ("llama-cpp", "q8_0"), ("llama-cpp", "q4_0"),
    ("openvino-genai", "fp32"),  # the pipeline's defaults on uncompressed weights
]
# what `measure` also takes
WEIGHTS: dict[str, tuple[str, ...]] = {
    "onnxruntime-genai": ("int8", "int4", "fp32"),
    "openvino-genai": ("int8", "int4", "fp32"),
    "llama-cpp": ("q8_0", "q4_0", "f32"),
}
# bumped when a conversion changes, so that no stale form is reused
FORMAT_VERSION = "1"
TOLERANCE = 1e-4  # the checkpoint's logits against the zoo module's, max abs


class Refused(RuntimeError):
    """A runtime or its converter cannot take this model."""


# -- where the forms live ---------------------------------------------------------------------
def work_root(work: str | Path | None = None) -> Path:
    """`work`, else `TESSERA_CACHE/decode-runtimes`."""
    if work is not None:
        path = Path(work)
        path.mkdir(parents=True, exist_ok=True)
        return path
    from tessera._private.cache import cache_dir

    return cache_dir("decode-runtimes")


def model_dir(name: str, work: str | Path | None = None) -> Path:
    """The directory of one decoder's forms: its name and a hash of its definition and sizes,
    so that a changed definition never reuses old weights."""
    import tessera.zoo

    spec = tessera.zoo.decoder_spec(name)
    # the definitions' source read, not imported: importing them imports torch, whose memory
    # would count in a measured row's peak
    source = Path(tessera.zoo.__file__).with_name("_decoders.py").read_text()
    digest = hashlib.sha256((source + repr(spec) + FORMAT_VERSION).encode()).hexdigest()[:12]
    path = work_root(work) / f"{name}-{digest}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _published(path: Path, make: Callable[[Path], None]) -> Path:
    """`path`, made by `make(temporary)` and renamed into place unless it exists already:
    a reader never finds half a form (a file or a directory)."""
    if path.exists():
        return path
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if temporary.is_dir():
        shutil.rmtree(temporary)
    temporary.unlink(missing_ok=True)
    try:
        make(temporary)
        try:
            os.replace(temporary, path)
        except OSError:  # another writer published a directory first
            if not path.exists():
                raise
    finally:
        if temporary.is_dir():
            shutil.rmtree(temporary, ignore_errors=True)
        elif temporary.exists():
            temporary.unlink()
    return path


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


# -- the Hugging Face checkpoint --------------------------------------------------------------
def hf_checkpoint(name: str, directory: str | Path | None = None) -> Path:
    """A transformers checkpoint directory (config.json, model.safetensors, a tokenizer)
    holding exactly the weights of the bundled decoder `name`; `directory` is the work root
    (default: the cache)."""
    return _published(model_dir(name, directory) / "hf", lambda out: _write_hf(name, out))


def _hf_state(spec: Any, module: Any) -> dict[str, Any]:
    """The zoo module's state dict under transformers' names. GPT-2's Conv1D stores a
    Linear's weight transposed; the MLPs sit one level down, under `mlp`."""
    state = module.state_dict()
    out: dict[str, Any] = {}
    if spec.family == "gpt2":
        for key, value in state.items():
            parts = key.split(".")
            if parts[0] == "h" and parts[2] in ("c_fc", "c_proj"):
                parts.insert(2, "mlp")
            new = "transformer." + ".".join(parts)
            conv1d = parts[0] == "h" and parts[-1] == "weight" and parts[-2] in (
                "c_attn", "c_proj", "c_fc")
            out[new] = value.t().contiguous() if conv1d else value
        out["lm_head.weight"] = state["wte.weight"]  # tied
        return out
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] == "lm_head":
            out[key] = value
            continue
        if parts[0] == "layers" and parts[2] in ("gate_proj", "up_proj", "down_proj"):
            parts.insert(2, "mlp")
        out["model." + ".".join(parts)] = value
    return out


def _hf_config(spec: Any) -> Any:
    import transformers

    if spec.family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=spec.vocab, n_positions=spec.max_positions, n_embd=spec.hidden,
            n_layer=spec.layers, n_head=spec.heads, n_inner=spec.intermediate,
            activation_function="gelu_new", layer_norm_epsilon=1e-5,
            bos_token_id=spec.vocab - 1, eos_token_id=spec.vocab - 1, tie_word_embeddings=True)
    return transformers.LlamaConfig(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads, head_dim=spec.head_dim, hidden_act="silu",
        max_position_embeddings=spec.max_positions, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2)


def _write_hf(name: str, out: Path) -> None:
    import torch
    import transformers

    from tessera.zoo import _decoders, decoder_spec

    spec = decoder_spec(name)
    module = _decoders.build(spec)
    config = _hf_config(spec)
    cls = (transformers.GPT2LMHeadModel if spec.family == "gpt2"
           else transformers.LlamaForCausalLM)
    with torch.device("meta"):
        model = cls(config)
    model.load_state_dict(_hf_state(spec, module), strict=True, assign=True)
    model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    # older readers (the converters) look for rope_theta, n_ctx and the dtype at the top level
    path = out / "config.json"
    fields = json.loads(path.read_text())
    if spec.family == "llama":
        fields.setdefault("rope_theta", 10000.0)
    else:
        fields.setdefault("n_ctx", spec.max_positions)
    fields.setdefault("torch_dtype", "float32")
    path.write_text(json.dumps(fields, indent=2))
    _write_tokenizer(spec, out)


def _write_tokenizer(spec: Any, out: Path) -> None:
    """A tokenizer of exactly `spec.vocab` ids. GPT-2: byte-level BPE, 256 bytes, merges of
    byte pairs up to the size and <|endoftext|> last (llama.cpp wants at least one merge).
    Llama: a SentencePiece model (llama.cpp's converter reads tokenizer.model) with <unk>,
    <s>, </s>, 256 byte pieces and made-up pieces, and its fast form (tokenizer.json)."""
    from transformers import PreTrainedTokenizerFast

    if spec.family == "gpt2":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        assert spec.vocab > len(alphabet) + 1
        vocab = {symbol: i for i, symbol in enumerate(alphabet)}
        merges: list[tuple[str, str]] = []
        for first in alphabet:
            for second in alphabet:
                if len(vocab) == spec.vocab - 1:
                    break
                vocab[first + second] = len(vocab)
                merges.append((first, second))
        vocab["<|endoftext|>"] = spec.vocab - 1
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.add_special_tokens(["<|endoftext|>"])
        fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
            tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
            unk_token="<|endoftext|>")
        fast.save_pretrained(out)
        return
    _write_sentencepiece(spec.vocab, out / "tokenizer.model")
    from transformers import LlamaTokenizerFast

    fast = LlamaTokenizerFast(vocab_file=str(out / "tokenizer.model"), legacy=False,
                              add_bos_token=False)
    fast.save_pretrained(out)


def _write_sentencepiece(vocab: int, path: Path) -> None:
    import importlib

    pb: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")

    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.BPE
    model.trainer_spec.vocab_size = vocab
    model.trainer_spec.byte_fallback = True
    model.trainer_spec.unk_id, model.trainer_spec.bos_id = 0, 1
    model.trainer_spec.eos_id, model.trainer_spec.pad_id = 2, -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.escape_whitespaces = True

    def piece(text: str, score: float, kind: int) -> None:
        entry = model.pieces.add()
        entry.piece, entry.score, entry.type = text, score, kind

    piece("<unk>", 0.0, pb.ModelProto.SentencePiece.UNKNOWN)
    piece("<s>", 0.0, pb.ModelProto.SentencePiece.CONTROL)
    piece("</s>", 0.0, pb.ModelProto.SentencePiece.CONTROL)
    for byte in range(256):
        piece(f"<0x{byte:02X}>", 0.0, pb.ModelProto.SentencePiece.BYTE)
    letters = "abcdefghijklmnopqrstuvwxyz"
    made = 0
    wanted = vocab - len(model.pieces)
    for size in range(1, 5):  # ▁a, ▁b, ... then two letters, three, ...: all distinct
        for index in range(len(letters) ** size):
            if made == wanted:
                break
            word = ""
            for _ in range(size):
                index, digit = divmod(index, len(letters))
                word += letters[digit]
            piece("\u2581" + word, -float(made), pb.ModelProto.SentencePiece.NORMAL)
            made += 1
    assert len(model.pieces) == vocab
    path.write_bytes(model.SerializeToString())


def check_hf_checkpoint(name: str, directory: str | Path | None = None, length: int = 12,
                        seed: int = 0) -> float:
    """The largest absolute difference between the logits of `hf_checkpoint(name)` loaded by
    transformers and the zoo module's, for a random prompt of `length` tokens; ValueError
    where it is over TOLERANCE."""
    import numpy as np
    import torch
    import transformers

    from tessera.zoo import _decoders, decoder_spec

    spec = decoder_spec(name)
    ids = np.random.default_rng(seed).integers(0, spec.vocab, (1, length))
    expected = _zoo_logits(_decoders.build(spec), spec, ids)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        hf_checkpoint(name, directory), dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        got = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    gap = float(np.abs(got - expected).max())
    if not gap <= TOLERANCE:
        raise ValueError(f"{name}: the checkpoint's logits differ from the module's by {gap:.3g}")
    return gap


def _zoo_logits(module: Any, spec: Any, ids: Any) -> Any:
    """The zoo module's logits for `ids` [1, n] from an empty cache (numpy)."""
    import torch

    length = ids.shape[1]
    empty = torch.zeros(1, spec.kv_heads, 0, spec.head_dim)
    with torch.no_grad():
        outputs = module(torch.from_numpy(ids), torch.ones(1, length, dtype=torch.int64),
                         torch.arange(length)[None], *[empty] * (2 * spec.layers))
    return outputs[0].numpy()


def reference_tokens(name: str, prompt: Sequence[int], new_tokens: int) -> list[int]:
    """The fp32 greedy continuation of `prompt` by the zoo module, `new_tokens` ids (EOS is
    not special): what `measure` takes as `reference`."""
    import torch

    from tessera.zoo import _decoders, decoder_spec

    spec = decoder_spec(name)
    module = _decoders.build(spec)
    past = [torch.zeros(1, spec.kv_heads, 0, spec.head_dim)] * (2 * spec.layers)
    ids = torch.tensor([list(prompt)])
    total = ids.shape[1]
    out: list[int] = []
    with torch.no_grad():
        positions = torch.arange(total)[None]
        for _ in range(new_tokens):
            logits, *past = module(ids, torch.ones(1, total, dtype=torch.int64), positions,
                                   *past)
            out.append(int(logits[0, -1].argmax()))
            ids = torch.tensor([[out[-1]]])
            positions = torch.tensor([[total]])
            total += 1
    return out


# -- the forms --------------------------------------------------------------------------------
def form(runtime: str, weights: str, name: str, work: str | Path | None = None) -> Path:
    """The runtime's form of `name` at `weights`, converted once (Refused where the runtime
    or its converter cannot take the model)."""
    if weights not in WEIGHTS.get(runtime, ()):
        raise ValueError(f"unknown row {runtime!r}, {weights!r}; rows: {WEIGHTS}")
    target = _form_path(runtime, weights, name, work)
    if runtime == "onnxruntime-genai":
        refusal = _refusal_path(name, work)
        if refusal.exists():  # the builder's answer does not change: ask it once
            raise Refused(refusal.read_text())
        try:
            return _published(target, lambda out: _build_ort_genai(name, weights, work, out))
        except Refused as err:
            refusal.write_text(str(err))
            raise
    build = _build_openvino if runtime == "openvino-genai" else _build_gguf
    return _published(target, lambda out: build(name, weights, work, out))


def _form_path(runtime: str, weights: str, name: str, work: str | Path | None) -> Path:
    """Where a form lives: named by the version of the runtime (and NNCF) that made it."""
    root = model_dir(name, work)
    if runtime == "onnxruntime-genai":
        return root / f"ort-genai-{weights}-{_version('onnxruntime-genai')}"
    if runtime == "openvino-genai":
        return root / f"ov-{weights}-{_version('openvino')}-nncf{_version('nncf')}"
    return root / f"gguf-{weights}-{_version('llama_cpp_python')}.gguf"


def _refusal_path(name: str, work: str | Path | None) -> Path:
    return model_dir(name, work) / f"ort-genai-{_version('onnxruntime-genai')}.refused"


def prepare(runtime: str, weights: str, name: str, work: str | None = None) -> dict[str, Any]:
    """`form(...)` as JSON ({"path": ...} or {"error": ...}): run in a child, so that the
    converters' memory does not count in a measured row's peak."""
    try:
        return {"path": str(form(runtime, weights, name, work))}
    except Exception as err:
        return {"error": _reason(err)}


def _reason(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return " ".join(text.split())[:600]


def _run(command: list[str], what: str) -> None:
    """`command`, its last lines in the error where it fails."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        raise RuntimeError(f"{what} failed ({done.returncode}): " + " | ".join(tail))


def _build_ort_genai(name: str, weights: str, work: str | Path | None, out: Path) -> None:
    hf = hf_checkpoint(name, work)
    with tempfile.TemporaryDirectory(prefix="ort-genai-cache-") as cache:
        done = subprocess.run(
            [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
             "-o", str(out), "-p", weights, "-e", "cpu", "-c", cache],
            capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        if any("NotImplementedError" in line for line in lines):
            raise Refused("onnxruntime-genai's model builder refuses this architecture: "
                          + lines[-1][:300])
        raise RuntimeError("onnxruntime-genai's model builder failed: "
                           + " | ".join(lines[-4:]))


# - OpenVINO -
def _build_openvino(name: str, weights: str, work: str | Path | None, out: Path) -> None:
    import openvino as ov
    import torch
    import torch.nn.functional as F

    from tessera.zoo import _decoders, decoder_spec

    spec = decoder_spec(name)
    module = _decoders.build(spec)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               allowed: torch.Tensor) -> torch.Tensor:
        # the same math as the module's, as the one op LLMPipeline's paged-attention pass finds
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    past_names = [f"past_key_values.{i}.{kind}" for i in range(spec.layers)
                  for kind in ("key", "value")]
    present_names = [f"present.{i}.{kind}" for i in range(spec.layers)
                     for kind in ("key", "value")]
    batch, sequence, past = 2, 3, 2  # traced with a past and several tokens: nothing fixed
    example = (torch.randint(0, spec.vocab, (batch, sequence)),
               torch.ones(batch, past + sequence, dtype=torch.int64),
               torch.arange(past, past + sequence).repeat(batch, 1),
               *(torch.randn(batch, spec.kv_heads, past, spec.head_dim) for _ in past_names))
    original = _decoders._attend
    _decoders._attend = attend
    try:
        with torch.no_grad():
            model = ov.convert_model(module, example_input=example)
    finally:
        _decoders._attend = original
    names = ["input_ids", "attention_mask", "position_ids", *past_names]
    for port, port_name in zip(model.inputs, names, strict=True):
        port.get_tensor().set_names({port_name})
    for port, port_name in zip(model.outputs, ["logits", *present_names], strict=True):
        port.get_tensor().set_names({port_name})
    _make_stateful(model, past_names, present_names)
    model = _compress(model, weights)
    out.mkdir()
    ov.save_model(model, out / "openvino_model.xml", compress_to_fp16=False)
    hf = hf_checkpoint(name, work)
    _write_openvino_tokenizer(hf, out)
    for file in ("config.json", "generation_config.json"):
        if (hf / file).exists():
            shutil.copy(hf / file, out / file)


def _make_stateful(model: Any, past_names: list[str], present_names: list[str]) -> None:
    """The key/value cache hidden in the model as variables, as optimum-intel's
    `patch_stateful_decoder` does: a `beam_idx` input gathers each past along the batch, the
    past inputs and present outputs become ReadValue/Assign pairs, each starting as zeros of
    the batch that input_ids has."""
    import numpy as np
    import openvino as ov
    from openvino import opset13
    from openvino._offline_transformations import apply_make_stateful_transformation

    beam_idx = opset13.parameter(
        name="beam_idx", dtype=ov.Type.i32,
        shape=ov.PartialShape([model.input("input_ids").get_partial_shape()[0]]))
    beam_idx.output(0).get_tensor().add_names({"beam_idx"})
    model.add_parameters([beam_idx])
    for past in past_names:
        port = model.input(past)
        consumers = port.get_target_inputs()
        gathered = opset13.gather(port, beam_idx, opset13.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gathered.output(0))
    model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(model, dict(zip(past_names, present_names, strict=True)))
    ids = model.input("input_ids")
    batch = opset13.gather(opset13.shape_of(ids, output_type="i64"), opset13.constant([0]),
                           opset13.constant(0))
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims: list[Any] = [dim.min_length for dim in op.get_output_partial_shape(0)]
            dims[0] = batch
            parts = [opset13.constant(np.array([d], np.int64)) if isinstance(d, int) else d
                     for d in dims]
            zeros = opset13.broadcast(
                opset13.constant(0.0, dtype=op.get_output_element_type(0)),
                opset13.concat(parts, axis=0))
            op.set_arguments([zeros])
    model.validate_nodes_and_infer_types()


def _compress(model: Any, weights: str) -> Any:
    """NNCF weight compression as `optimum-cli export openvino --weight-format` applies it
    (optimum-intel 2.2's defaults, no dataset)."""
    if weights == "fp32":
        return model
    import nncf

    if weights == "int8":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    # a tiny model's 64-wide layers take no group of 128: ADJUST shrinks the group there
    # (optimum's default is ERROR; a 0.5B model's layers all divide by 128)
    advanced = nncf.AdvancedCompressionParameters(
        group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST)
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM,
                                 group_size=128, ratio=1.0, advanced_parameters=advanced)


def _write_openvino_tokenizer(hf: Path, out: Path) -> None:
    """openvino_tokenizer.xml and openvino_detokenizer.xml beside the model (LLMPipeline
    loads them from the same directory)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer  # type: ignore[import-untyped]
    from transformers import AutoTokenizer

    tokenizer, detokenizer = convert_tokenizer(AutoTokenizer.from_pretrained(hf),
                                               with_detokenizer=True)
    ov.save_model(tokenizer, out / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, out / "openvino_detokenizer.xml")


# - llama.cpp -
_QUANTS = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}

# runs convert_hf_to_gguf.py with its own gguf-py; our made-up GPT-2 vocabulary hashes to no
# known pre-tokenizer, and it is GPT-2's own byte-level one
_CONVERT = """
import runpy, sys
source = sys.argv[1]
sys.path[:0] = [source, source + "/gguf-py"]
import conversion.base as base
for cls in vars(base).values():
    if isinstance(cls, type) and "get_vocab_base_pre" in vars(cls):
        cls.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [source + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def llama_cpp_source(work: str | Path | None = None) -> Path:
    """A llama.cpp tree with convert_hf_to_gguf.py: `LLAMA_CPP_SOURCE`, else the one vendored
    in the sdist of the installed llama-cpp-python, downloaded by pip once."""
    if os.environ.get("LLAMA_CPP_SOURCE"):
        return Path(os.environ["LLAMA_CPP_SOURCE"])
    version = _version("llama_cpp_python")
    if version == "absent":
        raise Refused("llama-cpp-python is not installed")

    def fetch(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="llama-cpp-sdist-") as download:
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                  f"llama-cpp-python=={version}", "-d", download], "pip download")
            archive = next(Path(download).glob("*.tar.gz"))
            with tarfile.open(archive) as tar:
                top = tar.getnames()[0].split("/")[0]
                prefix = f"{top}/vendor/llama.cpp/"
                members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (
                    m.name[len(prefix):].split("/")[0] in (
                        "convert_hf_to_gguf.py", "conversion", "gguf-py"))]
                for member in members:
                    member.name = member.name[len(prefix):]
                tar.extractall(out, members=members, filter="data")

    return _published(work_root(work) / f"llama.cpp-{version}", fetch)


def _build_gguf(name: str, weights: str, work: str | Path | None, out: Path) -> None:
    """f32: convert_hf_to_gguf.py on the checkpoint; q8_0, q4_0: quantized from the f32."""
    if weights == "f32":
        _run([sys.executable, "-c", _CONVERT, str(llama_cpp_source(work)),
              str(hf_checkpoint(name, work)), "--outtype", "f32", "--outfile", str(out)],
             "convert_hf_to_gguf.py")
        return
    import llama_cpp

    full = form("llama-cpp", "f32", name, work)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, _QUANTS[weights])
    params.nthread = 2
    status = llama_cpp.llama_model_quantize(str(full).encode(), str(out).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize to {weights} returned {status}")


# -- measuring --------------------------------------------------------------------------------
def measure(runtime: str, weights: str, name: str, prompt: list[int], new_tokens: int,
            reference: list[int], threads: int = 2, work: str | None = None) -> dict[str, Any]:
    """One row: the runtime's form of decoder `name` at `weights` (converted first, in a child
    process, where missing), a warm-up run, then a timed greedy run of `new_tokens` tokens
    after `prompt` at `threads` threads, EOS not stopping it. JSON: prefill_tok_s (prompt
    tokens over the time to the first token's logits), decode_tok_s (single-token steps per
    second after it), peak_rss_mb (this process, read before the accuracy pass), size_mb (the
    form's weight files), tokens (what it generated), agreement (top-1 agreement with
    `reference`, teacher-forced: the prompt, then one reference token a step, as decoding
    feeds them; `agreement_kind` says whose logits), greedy_match (the fraction of `tokens`
    equal to `reference` position by position), and what the runtime computed in (precision,
    kv_cache). {"error": reason} where the row cannot run; it never raises. `work`: where
    the forms are cached (default: TESSERA_CACHE/decode-runtimes)."""
    try:
        if weights not in WEIGHTS.get(runtime, ()):
            return {"error": f"unknown row {runtime!r}, {weights!r}"}
        path = _form_in_child(runtime, weights, name, work)
        if isinstance(path, dict):
            return path
        run = {"onnxruntime-genai": _ort_genai, "openvino-genai": _openvino_genai,
               "llama-cpp": _llama_cpp}[runtime]
        row = run(path, list(prompt), new_tokens, list(reference), threads)
        row.update(runtime=runtime, weights=weights, model=name, threads=threads,
                   prompt_tokens=len(prompt), new_tokens=new_tokens,
                   size_mb=round(_weights_bytes(path) / 2**20, 1),
                   greedy_match=_agreement(row["tokens"], reference))
        return row
    except Exception as err:
        return {"error": _reason(err)}


def measure_in_child(runtime: str, weights: str, name: str, prompt: list[int],
                     new_tokens: int, reference: list[int], threads: int = 2,
                     work: str | None = None, stop_after: float | None = 1800) -> dict[str, Any]:
    """`measure(...)` in a fresh interpreter: the row's own peak memory, and an error row
    where the runtime crashes (llama.cpp's segfault) or runs past `stop_after` seconds."""
    from bench._child import in_child

    row = in_child("_decode_runtimes", "measure", runtime, weights, name, list(prompt),
                   new_tokens, list(reference), threads, work, stop_after=stop_after)
    return dict(row)


def _form_in_child(runtime: str, weights: str, name: str,
                   work: str | None) -> Path | dict[str, Any]:
    """The form's path, converting it in a child where it is missing; or the error row."""
    path = _form_path(runtime, weights, name, work)
    if path.exists():
        return path
    if runtime == "onnxruntime-genai" and _refusal_path(name, work).exists():
        return {"error": f"Refused: {_refusal_path(name, work).read_text()}"}
    from bench._child import in_child

    found = in_child("_decode_runtimes", "prepare", runtime, weights, name, work)
    if "path" not in found:
        return {"error": found.get("error", "conversion failed")}
    return Path(found["path"])


def _weights_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.iterdir()
               if file.suffix in (".onnx", ".data", ".bin") and "tokenizer" not in file.name)


def _peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, the peak of its own address space.
    ru_maxrss is not: across fork and exec it keeps the parent's peak (a parent that built
    the 0.5B reference in torch passes on its 1.8 GB)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _agreement(predicted: Sequence[int], reference: Sequence[int]) -> float | None:
    """The fraction of positions where the two agree (None where there are none)."""
    count = min(len(predicted), len(reference))
    if count == 0:
        return None
    return sum(int(p) == int(r) for p, r in zip(predicted[:count], reference[:count],
                                                strict=True)) / count


def _rates(prompt: int, steps: int, prefill_s: float, decode_s: float) -> dict[str, Any]:
    return {"prefill_tok_s": round(prompt / prefill_s, 2) if prefill_s > 0 else None,
            "decode_tok_s": round(steps / decode_s, 2) if steps and decode_s > 0 else None,
            "prefill_s": round(prefill_s, 5), "decode_s": round(decode_s, 5)}


def _loop(reset: Callable[[], None], feed: Callable[[list[int]], Any], prompt: list[int],
          count: int, forced: Sequence[int] | None = None) -> tuple[list[int], float, float]:
    """Greedy decoding through `feed` (tokens in, the last position's logits out) after
    `reset`: the prompt in one call, then one token a call, `count` tokens in all; with
    `forced`, each call is fed forced[i] instead of the argmax (teacher forcing, the same
    calls as decoding). The argmaxes, the prefill's seconds and the decode steps' seconds."""
    import numpy as np

    reset()
    start = time.perf_counter()
    out = [int(np.argmax(feed(prompt)))]
    first = time.perf_counter()
    for i in range(count - 1):
        out.append(int(np.argmax(feed([out[-1] if forced is None else int(forced[i])]))))
    return out, first - start, time.perf_counter() - first


def _timed(reset: Callable[[], None], feed: Callable[[list[int]], Any], prompt: list[int],
           new_tokens: int) -> dict[str, Any]:
    """A warm-up run, then the timed one; the peak RSS read right after it."""
    _loop(reset, feed, prompt, min(new_tokens, 4))
    tokens, prefill_s, decode_s = _loop(reset, feed, prompt, new_tokens)
    row = _rates(len(prompt), new_tokens - 1, prefill_s, decode_s)
    row.update(peak_rss_mb=_peak_rss_mb(), tokens=tokens)
    return row


def _forced(reset: Callable[[], None], feed: Callable[[list[int]], Any], prompt: list[int],
            reference: list[int]) -> dict[str, Any]:
    if not reference:
        return {"agreement": None, "agreement_kind": "no reference"}
    predicted = _loop(reset, feed, prompt, len(reference), reference)[0]
    return {"agreement": _agreement(predicted, reference),
            "agreement_kind": "teacher-forced top-1 (prompt, then one reference token a step)"}


# - onnxruntime-genai -
def _ort_genai(path: Path, prompt: list[int], new_tokens: int, reference: list[int],
               threads: int) -> dict[str, Any]:
    """A greedy loop of append_tokens: the prompt, then each argmax (the search's own
    generate_next_token would stop at EOS, or with min_length mask it, changing the argmax)."""
    import numpy as np
    import onnxruntime_genai as og  # type: ignore[import-untyped]

    config = og.Config(str(path))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    model = og.Model(config)
    total = len(prompt) + max(new_tokens, len(reference)) + 1
    vocab = json.loads((path / "genai_config.json").read_text())["model"]["vocab_size"]
    state: dict[str, Any] = {}

    def reset() -> None:
        state.pop("generator", None)  # the old one's buffers go first
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=total, do_sample=False)
        state["generator"] = og.Generator(model, params)

    def feed(tokens: list[int]) -> Any:
        state["generator"].append_tokens(np.array([tokens], np.int32))
        return state["generator"].get_logits().reshape(-1)[-vocab:]

    row = _timed(reset, feed, prompt, new_tokens)
    row.update(_forced(reset, feed, prompt, reference))
    row.update(version=_version("onnxruntime-genai"), precision=_ort_genai_precision(path),
               kv_cache="fp32 (the graph's io dtype), one buffer of max_length shared by past "
                        "and present")
    return row


def _ort_genai_precision(path: Path) -> str:
    """What the builder's graph holds: MatMulNBits' bits, block and accuracy level."""
    import onnx

    graph = onnx.load(str(path / "model.onnx"), load_external_data=False).graph
    for node in graph.node:
        if node.op_type == "MatMulNBits":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            zero_points = len(node.input) > 3 and bool(node.input[3])
            return (f"MatMulNBits bits={attrs.get('bits')} block={attrs.get('block_size')} "
                    f"accuracy_level={attrs.get('accuracy_level')} "
                    f"{'asymmetric' if zero_points else 'symmetric'}")
    return "fp32"


# - openvino-genai -
def _openvino_genai(path: Path, prompt: list[int], new_tokens: int, reference: list[int],
                    threads: int) -> dict[str, Any]:
    """LLMPipeline at its defaults (on CPU, paged attention: continuous batching), prefix
    caching off; timing from its perf_metrics (TTFT for the prefill, TPOT for the decode).
    It does not expose logits: the agreement is the same IR's through ov.Core (stateful SDPA,
    not paged attention) at the inference and KV cache precision the pipeline uses."""
    import numpy as np
    import openvino as ov

    row = _pipeline_run(path, prompt, new_tokens, threads)
    core = ov.Core()
    precision = core.get_property("CPU", "INFERENCE_PRECISION_HINT")
    kv = core.get_property("CPU", "KV_CACHE_PRECISION")
    compiled = core.compile_model(str(path / "openvino_model.xml"), "CPU", {
        "INFERENCE_PRECISION_HINT": precision, "KV_CACHE_PRECISION": kv,
        "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    seen: list[int] = []

    def reset() -> None:
        request.reset_state()
        seen.clear()

    def feed(tokens: list[int]) -> Any:
        ids = np.array([tokens], np.int64)
        start = len(seen)
        seen.extend(tokens)
        request.infer({"input_ids": ids, "attention_mask": np.ones((1, len(seen)), np.int64),
                       "position_ids": np.arange(start, len(seen), dtype=np.int64)[None],
                       "beam_idx": np.zeros(1, np.int32)})
        return request.get_tensor("logits").data[0, -1]

    row.update(_forced(reset, feed, prompt, reference))
    row["agreement_kind"] += ", the same IR through ov.Core"
    row.update(version=_version("openvino-genai"), precision=_type_name(precision),
               kv_cache=_type_name(kv), attention="paged (continuous batching)",
               weight_types=_ir_weight_types(path / "openvino_model.xml"))
    return row


def _pipeline_run(path: Path, prompt: list[int], new_tokens: int,
                  threads: int) -> dict[str, Any]:
    """LLMPipeline's warm-up and timed run; the pipeline is gone when this returns."""
    import numpy as np
    import openvino as ov
    import openvino_genai as genai  # type: ignore[import-untyped]

    scheduler = genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False  # a repeated prompt would be a cache hit
    pipe = genai.LLMPipeline(str(path), "CPU", scheduler_config=scheduler,
                             INFERENCE_NUM_THREADS=threads)

    def run(count: int) -> Any:
        config = genai.GenerationConfig()
        config.max_new_tokens = count
        config.ignore_eos = True  # not min_new_tokens: that masks EOS, changing the argmax
        config.do_sample = False
        return pipe.generate(ov.Tensor(np.array([prompt], np.int64)), config)

    run(min(new_tokens, 4))  # warm-up
    start = time.perf_counter()
    result = run(new_tokens)
    wall = time.perf_counter() - start
    metrics = result.perf_metrics
    prefill_s = metrics.get_ttft().mean / 1000
    tpot_s = metrics.get_tpot().mean / 1000  # per decode step
    row = _rates(len(prompt), new_tokens - 1, prefill_s, tpot_s * (new_tokens - 1))
    row.update(wall_s=round(wall, 5), peak_rss_mb=_peak_rss_mb(),
               tokens=[int(t) for t in result.tokens[0]])
    return row


def _ir_weight_types(xml: Path) -> str:
    """The element types of the IR's constants of 4096 elements or more (the weights), with
    their share of those elements."""
    import math
    import xml.etree.ElementTree as ET
    from collections import Counter

    counts: Counter[str] = Counter()
    for layer in ET.parse(xml).getroot().iter("layer"):
        data = layer.find("data")
        if layer.get("type") != "Const" or data is None or not data.get("shape"):
            continue
        size = math.prod(int(d) for d in data.get("shape", "").split(",") if d.strip())
        if size >= 4096:
            counts[data.get("element_type", "?")] += size
    total = sum(counts.values()) or 1
    return ", ".join(f"{kind} {n / total:.1%}" for kind, n in counts.most_common())


def _type_name(value: Any) -> str:
    """An ov.Type as OpenVINO spells it in properties (bf16, u8)."""
    return str(value.get_type_name()) if hasattr(value, "get_type_name") else str(value)


# - llama.cpp -
def _llama_cpp(path: Path, prompt: list[int], new_tokens: int, reference: list[int],
               threads: int) -> dict[str, Any]:
    """A greedy loop of Llama.eval: the prompt in one batch, then each argmax."""
    import llama_cpp
    import numpy as np

    context = len(prompt) + max(new_tokens, len(reference)) + 8
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=context, n_batch=context,
                          n_threads=threads, n_threads_batch=threads, verbose=False)

    vocab = llm.n_vocab()

    def feed(tokens: list[int]) -> Any:
        llm.eval(tokens)  # keeps no logits unless logits_all: read the last token's
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                     shape=(vocab,))

    row = _timed(llm.reset, feed, prompt, new_tokens)
    row.update(_forced(llm.reset, feed, prompt, reference))
    info = llama_cpp.llama_print_system_info().decode()
    row.update(version=_version("llama_cpp_python"), kv_cache="f16",
               precision="tensors: " + _gguf_types(path), system_info=" ".join(info.split()))
    return row


def _gguf_types(path: Path) -> str:
    """The GGUF's tensor types, counted, and those of the embedding and the LM head (llama.cpp
    keeps some tensors at a higher type than the file's)."""
    from collections import Counter

    from gguf import GGUFReader

    tensors = {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}
    counts = ", ".join(f"{kind} x{n}" for kind, n in Counter(tensors.values()).most_common())
    named = ", ".join(f"{n}={tensors[n]}" for n in ("token_embd.weight", "output.weight")
                      if n in tensors)
    return f"{counts} ({named})"


# -- smoke ------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    import numpy as np

    from tessera.zoo import decoder_spec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-kv-tiny")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=None)
    parser.add_argument("--rows", default="", help="runtime:weights,... (default: ROWS)")
    args = parser.parse_args(argv)
    spec = decoder_spec(args.model)
    prompt = [int(i) for i in np.random.default_rng(0).integers(0, spec.vocab, args.prompt)]
    reference = reference_tokens(args.model, prompt, args.new)
    rows = ([tuple(r.split(":")) for r in args.rows.split(",")] if args.rows else ROWS)
    print(json.dumps({"model": args.model, "reference": reference}))
    for runtime, weights in rows:
        row = measure_in_child(runtime, weights, args.model, prompt, args.new, reference,
                               args.threads, args.work)
        print(json.dumps({"row": f"{runtime} {weights}", **row}), flush=True)


if __name__ == "__main__":
    main()
