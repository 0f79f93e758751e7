"""Real exports: Hugging Face `transformers` architectures, random init from their configs,
exported with dynamic axes as users export them (`torch.onnx.export(..., dynamic_axes=...)`,
the exporter's default path), compiled by tessera and timed against each backend's defaults.

Per architecture, in one process and one run:
- `ONNX Runtime defaults`: a plain `InferenceSession` on the exported file (fp32);
- `OpenVINO defaults`: `Core().compile_model(path, "CPU")` on the same file (bf16 on a CPU
  with AVX-512 BF16 or AMX; the table says what it computed in);
- `tessera`: `tessera.compile(path, "openvino,onnxruntime,cpu", shapes=...)` cold (empty
  caches), no samples: the default budget `cosine>=0.9995` on generated inputs;
- `tessera + samples`: the same with 16 generated samples and `accuracy="cosine>=0.999"`
  (int8 forms searched too).

The profile is the one a user serving the model would give: text models
`batch=1:1:8, sequence=1:128:512`, vision models `batch=1:1:8`. Timing is at batch 1 (128
tokens, or a 224x224 image). Each row's accuracy is its lowest cosine against the consensus
oracle's fp32 answers (`tessera.oracle.answers`) on 4 generated inputs apart from the samples.
Each row is timed in its own block, in rounds; a ratio is the median over rounds of the faster
native default's time over the tessera row's in the same round (higher is faster; the target
is at least 0.98 within the budget).

    pip install -e '.[bench]'                             # transformers and onnxscript
    python -m bench.hf_exports                            # bench/results/hf-exports.{md,json}
    python -m bench.hf_exports --models distilbert --rounds 1"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench._markdown import preamble, table_head, table_row
from bench._models import NATIVES, Run, lowest_cosine, native_defaults, run_models
from bench._report import RESULTS, first_line, geomean
from bench._rounds import in_rounds, paired
from bench.precision import cold_caches

TARGETS = "openvino,onnxruntime,cpu"
SAMPLES = 16
CHECKS = 4
BUDGET = "cosine>=0.999"
DEFAULT_BUDGET = 0.9995
TEXT_PROFILE = {"batch": (1, 1, 8), "sequence": (1, 128, 512)}
IMAGE_PROFILE = {"batch": (1, 1, 8)}


@dataclass(frozen=True)
class Architecture:
    """One `transformers` model class with the config it is built from."""

    family: str                    # what the table calls its kind
    build: Callable[[], Any]       # the torch module, random init, eval mode
    text: bool                     # token ids and a mask, else an image
    output: str


def _text(family: str, model: str, config: str, **fields: Any) -> Architecture:
    def build() -> Any:
        import transformers
        return getattr(transformers, model)(getattr(transformers, config)(**fields))
    return Architecture(family, build, True, "logits")


def _image(family: str, model: str, config: str, output: str = "logits",
           **fields: Any) -> Architecture:
    def build() -> Any:
        import transformers
        return getattr(transformers, model)(getattr(transformers, config)(**fields))
    return Architecture(family, build, False, output)


# Each config is the library's default for the class (the base size it documents), except
# DeBERTa-v2, whose default is the 1.5 B xxlarge: it gets deberta-v3-small's published shape.
ARCHITECTURES: dict[str, Architecture] = {
    "distilbert": _text("encoder", "DistilBertForSequenceClassification", "DistilBertConfig",
                        num_labels=2),
    "deberta-v2": _text("encoder", "DebertaV2ForSequenceClassification", "DebertaV2Config",
                        num_labels=2, hidden_size=768, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=3072, vocab_size=128100,
                        relative_attention=True, position_buckets=256,
                        norm_rel_ebd="layer_norm", share_att_key=True,
                        pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                        position_biased_input=False, layer_norm_eps=1e-7),
    "roberta": _text("encoder", "RobertaForSequenceClassification", "RobertaConfig",
                     num_labels=2, vocab_size=50265, max_position_embeddings=514,
                     type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2),
    "vit": _image("vision transformer", "ViTForImageClassification", "ViTConfig",
                  num_labels=1000),
    "clip-vision": _image("vision transformer", "CLIPVisionModelWithProjection",
                          "CLIPVisionConfig", output="image_embeds"),
    "swin": _image("vision transformer", "SwinForImageClassification", "SwinConfig",
                   num_labels=1000),
    "resnet": _image("CNN", "ResNetForImageClassification", "ResNetConfig", num_labels=1000),
    "convnext": _image("CNN", "ConvNextForImageClassification", "ConvNextConfig",
                       num_labels=1000),
    "segformer": _image("segmentation", "SegformerForSemanticSegmentation", "SegformerConfig",
                        num_labels=150),
}


def exports_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "tessera-bench" / "hf-exports"


def export(name: str) -> Path:
    """The architecture exported once (seeded), kept under the bench cache."""
    import torch
    import transformers

    arch = ARCHITECTURES[name]
    path = exports_dir() / f"{name}-b2-tf{transformers.__version__}-torch{torch.__version__}.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    module = arch.build().eval()
    # traced at batch 2, as exporters do: a traced size of 1 is specialised, and the file
    # then names a batch it cannot run at any other size
    if arch.text:
        ids = torch.ones(2, 128, dtype=torch.long)
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        axes = {"input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"}}
    else:
        kwargs = {"pixel_values": torch.zeros(2, 3, 224, 224)}
        axes = {"pixel_values": {0: "batch"}}
    partial = path.with_suffix(".partial.onnx")
    with torch.no_grad():
        torch.onnx.export(module, (), str(partial), kwargs=kwargs, input_names=list(kwargs),
                          output_names=[arch.output], dynamic_axes=axes)
    import onnx  # one self-contained file: the exporter writes its weights beside it
    onnx.save(onnx.load(str(partial)), str(path))
    for leftover in partial.parent.glob(partial.name + "*"):
        leftover.unlink()
    return path


def inputs(name: str, vocab: int, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Batch-1 inputs as a user's data looks: token ids inside the vocabulary with a full
    mask, or normalised images."""
    rng = np.random.default_rng(seed)
    if ARCHITECTURES[name].text:
        return [{"input_ids": rng.integers(0, vocab, (1, 128), dtype=np.int64),
                 "attention_mask": np.ones((1, 128), np.int64)} for _ in range(count)]
    return [{"pixel_values": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
            for _ in range(count)]


def bench_model(name: str, rounds: int, seconds: float) -> dict[str, Any]:
    arch = ARCHITECTURES[name]
    began = time.perf_counter()
    try:
        path = str(export(name))
    except Exception as err:  # the row says so; the rest of the table goes on
        return {"model": name, "family": arch.family, "error": f"export: {first_line(err)}"}
    export_s = time.perf_counter() - began
    row = _bench_exported(name, path, rounds, seconds)
    row["export_s"] = round(export_s, 1)
    return row


def _vocab(name: str) -> int:
    import torch
    torch.manual_seed(0)
    config = ARCHITECTURES[name].build().config
    return int(getattr(config, "vocab_size", 0) or 0)


def _bench_exported(name: str, path: str, rounds: int, seconds: float) -> dict[str, Any]:
    import onnx

    import tessera
    from tessera.config._accuracy import accuracy_of
    from tessera.oracle import answers

    arch = ARCHITECTURES[name]
    vocab = _vocab(name) if arch.text else 0
    samples = inputs(name, vocab, SAMPLES, seed=0)
    checks = inputs(name, vocab, CHECKS, seed=1000)
    profile = TEXT_PROFILE if arch.text else IMAGE_PROFILE
    truth = answers(onnx.load(path), checks)
    natives, ov_precision = native_defaults(path)
    runs: dict[str, Run] = dict(natives)
    compiles: dict[str, dict[str, Any]] = {}
    for label, options in (("tessera", {}),
                           ("tessera + samples", {"samples": samples, "accuracy": BUDGET})):
        with tempfile.TemporaryDirectory() as cache, cold_caches(Path(cache)):
            began = time.perf_counter()
            try:
                compiled = tessera.compile(path, TARGETS, shapes=profile, **options)
            except Exception as err:
                compiles[label] = {"error": first_line(err)}
                continue
            seconds_taken = time.perf_counter() - began
        record = compiled.plan.stats.precision
        compiles[label] = {
            "compile_s": round(seconds_taken, 1),
            "plan": " + ".join(f"{p.target}[{len(p.nodes)}]"
                               for p in compiled.plan.partitions),
            "kept": str(record.kept) if record is not None else "fp32",
            "variants": [] if record is None else [
                {"target": v.target, "whole_ms": v.whole_ms, "budget_used": v.whole_used,
                 "note": v.note} for v in record.variants]}
        runs[label] = compiled.run
    accuracy = {label: accuracy_of([run(f) for f in checks], truth.outputs)
                for label, run in runs.items()}
    feed = checks[0]
    timed = in_rounds({label: (lambda run=run: run(feed)) for label, run in runs.items()},
                      rounds=rounds, seconds=seconds)
    runs.clear()  # the sessions go with the closures when this returns
    natives.clear()
    faster = min(NATIVES, key=lambda k: timed[k].median_ms)

    for label, entry in compiles.items():  # paired within rounds: drift cancels
        if label in timed:
            entry["ratio"] = round(paired(timed[faster], timed[label]), 3)
    return {
        "model": name, "family": arch.family, "profile": {k: list(v) for k, v in
                                                         profile.items()},
        "openvino_default_precision": ov_precision,
        "judges": truth.judges,
        "cosine": {label: round(lowest_cosine(accuracy[label]), 6) for label in accuracy},
        "timings": {k: m.to_dict() for k, m in timed.items()},
        "faster_native": faster,
        "tessera": compiles,
    }


def _cell(row: dict[str, Any], label: str) -> tuple[str, str, str, str]:
    """ms, ratio, kept, compile s of one tessera row (or its error)."""
    entry = row["tessera"].get(label, {})
    if "error" in entry:
        return ("failed", "-", entry["error"], "-")
    return (f"{row['timings'][label]['median_ms']:.2f}", f"{entry['ratio']:.3f}",
            entry["kept"], f"{entry['compile_s']}")


def markdown(result: dict[str, Any]) -> str:
    rows = result["models"]
    lines = [*preamble("Real exports: Hugging Face architectures with dynamic axes", result),
             "Random init from each architecture's config, exported by `torch.onnx.export` "
             "with dynamic axes (`batch`, and `sequence` for text). tessera compiles cold with `"
             + TARGETS + "` and the profile a user serving the model would give (text "
             "`batch=1:1:8, sequence=1:128:512`; vision `batch=1:1:8`): without samples under "
             f"its default budget `cosine>={DEFAULT_BUDGET}`, and with {SAMPLES} generated "
             f"samples under `{BUDGET}`. Timed at batch 1 (128 tokens, or one 224x224 image), "
             f"each row in its own block, {result['rounds']} round(s) of {result['seconds']} s. "
             f"Accuracy: each row's lowest cosine against the consensus oracle's fp32 answers "
             f"on {CHECKS} other generated inputs. Ratio = the faster native default over "
             "tessera, paired within rounds (higher is faster; the target is at least 0.98).",
             "",
             *table_head("model", "kind", "ORT defaults ms", "OpenVINO defaults ms (computes in)",
                         "tessera ms", "ratio", "kept", "tessera + samples ms", "ratio", "kept",
                         "cosine ORT / OpenVINO / tessera / + samples",
                         "cold compile s (- / samples)", align="llrrrrlrrlll")]
    ratios: list[float] = []
    for r in rows:
        if "error" in r:
            lines.append(table_row(r["model"], r["family"], r["error"], *[None] * 9))
            continue
        t, c = r["timings"], r["cosine"]
        plain, sampled = _cell(r, "tessera"), _cell(r, "tessera + samples")
        cosines = " / ".join(f"{c[k]:.5f}" if k in c else "-" for k in (
            "ONNX Runtime defaults", "OpenVINO defaults", "tessera", "tessera + samples"))
        lines.append(table_row(
            r["model"], r["family"], f"{t['ONNX Runtime defaults']['median_ms']:.2f}",
            f"{t['OpenVINO defaults']['median_ms']:.2f} ({r['openvino_default_precision']})",
            *plain[:3], *sampled[:3], cosines, f"{plain[3]} / {sampled[3]}"))
        ratios += [e["ratio"] for e in r["tessera"].values() if "ratio" in e]
    compiled = sum("error" not in e for r in rows if "error" not in r
                   for e in r["tessera"].values())
    tried = sum(2 if "error" not in r else 0 for r in rows)
    lines += ["", f"{compiled} of {tried} compiles succeeded over {len(rows)} architectures. "
              f"Geometric mean ratio {geomean(ratios):.3f}, lowest {min(ratios, default=0):.3f} "
              f"({sum(x >= 0.98 for x in ratios)} of {len(ratios)} tessera rows at 0.98 or "
              "more)."]
    for r in rows:
        for label, entry in r.get("tessera", {}).items():
            notes = "; ".join(f"{v['target']}: {v['note'] or 'kept'}"
                              for v in entry.get("variants", []))
            if notes:
                lines.append(f"- {r['model']}, {label}: {notes}")
    return "\n".join(lines) + "\n"


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['model']}: {row['error']}"
    return f"{row['model']}: " + ", ".join(
        f"{label} {e.get('ratio', e.get('error'))}" for label, e in row["tessera"].items())


def main(argv: Sequence[str] | None = None) -> int:
    return run_models("hf_exports", __doc__, list(ARCHITECTURES), RESULTS / "hf-exports",
                      bench_model, markdown, _line, argv)


if __name__ == "__main__":
    raise SystemExit(main())
