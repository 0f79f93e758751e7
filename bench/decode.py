"""Decoder language models run as the loop they are, at batch 1: prefill tokens/s over a
128-token prompt, decode tokens/s over 128 new tokens (greedy), the peak memory of the
process, and agreement with fp32: top-1 with teacher forcing (each step's argmax given
fp32's own tokens before it) over the new tokens. Rows, each in a fresh process:

- `onnxruntime fp32 loop`: the baseline, a plain ONNX Runtime session (its defaults), each
  step's presents fed back as numpy arrays; its greedy tokens are the reference;
- `tessera`: `tessera.compile` with no samples (the precision search judges the decoder on
  its next-token logits: `top1>=0.99` with teacher forcing on 8 generated prompts), saved
  as an artifact, then loaded in a fresh process and run with `generate`;
- `tessera, <backend> only`: the same with the target held to one weight format;
- the dedicated runtimes (bench/_decode_runtimes.py), on the same weights, where installed:
  onnxruntime-genai, openvino-genai and llama-cpp-python (`pip install 'tessera[decode]'`).

Writes bench/results/decode.{md,json} (`--out` for another directory).

    python -m bench.decode [--models gpt2-small-kv llama-kv-0.5b] [--prompt 128] [--new 128]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._child import in_child
from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish

MODELS = ["gpt2-small-kv", "llama-kv-0.5b"]
ROUNDS = 3  # timed generations after a warm-up; the median is kept
# the profile every tessera row compiles with: prompts up to 256 tokens (the agreement's
# teacher-forced prefill is prompt + new), caches up to 511, measured at a 64-token cache
SHAPES = ("batch=1;sequence=1:1:256;past_sequence=0:64:511;"
          "total_sequence=past_sequence+sequence")
TESSERA = "openvino,onnxruntime"
# a tessera row held to one weight format on one backend (one target: one quantize; over
# two, Collage quantizes each candidate partition, 5.5 min on GPT-2-small at int4)
FORMATS = {
    ("int8", "openvino"): "openvino -precision=int8 -int8-recipe=weights",
    ("int8", "onnxruntime"): "onnxruntime -precision=int8 -int8-recipe=weights "
                             "-matmul-accuracy=4",
    ("int4", "openvino"): "openvino -precision=int4",
    ("int4", "onnxruntime"): "onnxruntime -precision=int4 -matmul-accuracy=4",
}
STOP_AFTER = 1800.0  # seconds a row may take before it is stopped


def _peak_mb() -> float:
    from bench._decode_runtimes import _peak_rss_mb

    return _peak_rss_mb()


def _prompt(name: str, length: int) -> list[int]:
    from tessera import zoo

    return [int(t) for t in zoo.decoder_inputs(name, length)["input_ids"][0]]


def _rates(runs: list[tuple[float, float]], prompt: int, new: int) -> dict[str, float]:
    """The median prefill and decode rates of timed runs (prefill seconds, decode seconds)."""
    return {"prefill_tokens_per_s": round(prompt / statistics.median(p for p, _ in runs), 1),
            "decode_tokens_per_s": round((new - 1) / statistics.median(d for _, d in runs), 1)}


def _agreement(logits: Any, reference: list[int], prompt: int) -> float:
    """Top-1 with teacher forcing: the share of new tokens that are the argmax of the
    logits one position before them, over a prefill of the prompt and `reference`."""
    import numpy as np

    predicted = np.asarray(logits)[0, prompt - 1:prompt - 1 + len(reference)].argmax(-1)
    return round(float(np.mean(predicted == np.asarray(reference))), 4)


# -- the baseline ------------------------------------------------------------------------------
def ort_loop(name: str, prompt: list[int], new: int) -> dict[str, Any]:
    """A plain ONNX Runtime loop at its defaults, the presents fed back as numpy arrays."""
    import numpy as np
    import onnxruntime as ort

    from tessera import zoo

    path = zoo.export_decoder(name)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pasts = [n.replace("present.", "past_key_values.") for n in names[1:]]
    ids = np.array([prompt], np.int64)

    def generate() -> tuple[list[int], float, float]:
        began = time.perf_counter()
        outputs = session.run(None, zoo.decoder_inputs(name, len(prompt)) | {"input_ids": ids})
        tokens: list[int] = []
        prefilled = 0.0
        while True:
            tokens.append(int(outputs[0][0, -1].argmax()))
            if len(tokens) == 1:
                prefilled = time.perf_counter() - began
            if len(tokens) == new:
                break
            total = len(prompt) + len(tokens)
            feeds = {"input_ids": np.array([[tokens[-1]]], np.int64),
                     "attention_mask": np.ones((1, total), np.int64),
                     "position_ids": np.array([[total - 1]], np.int64)}
            feeds.update(zip(pasts, outputs[1:], strict=True))
            outputs = session.run(None, feeds)
        return tokens, prefilled, time.perf_counter() - began - prefilled

    generate()
    runs = [generate() for _ in range(ROUNDS)]
    return {"tokens": runs[0][0], **_rates([(p, d) for _, p, d in runs], len(prompt), new),
            "agreement": 1.0, "peak_mb": _peak_mb(),
            "weights_mb": round(path.stat().st_size / 2**20, 1)}


# -- tessera ---------------------------------------------------------------------------------
def tessera_compile(name: str, config: str, artifact: str) -> dict[str, Any]:
    """Compile with no samples and save the artifact; what the search kept."""
    import tessera
    from tessera import zoo

    began = time.perf_counter()
    compiled = tessera.compile(str(zoo.export_decoder(name)), config, shapes=SHAPES)
    seconds = round(time.perf_counter() - began, 1)
    compiled.save(artifact)
    record = compiled.plan.stats.precision
    judged = None
    if record is not None and compiled.plan.stats.accuracy is not None:
        found = [v.value for v in compiled.plan.stats.accuracy.values if v.metric == "top1"]
        judged = round(min(found), 4) if found else None
    return {"compile_seconds": seconds, "plan": compiled.plan.summary().splitlines()[0],
            "targets": sorted({str(p.target) for p in compiled.plan.partitions}),
            "search_top1": judged, "budget": record.budget if record is not None else None}


def tessera_run(artifact: str, name: str, prompt: list[int], new: int,
                reference: list[int]) -> dict[str, Any]:
    """Load the artifact in this fresh process and generate; the teacher-forced agreement
    over a prefill of the prompt and the reference's tokens."""
    import numpy as np

    import tessera
    from tessera import zoo

    compiled = tessera.load(artifact)
    ids = np.array([prompt], np.int64)
    compiled.generate(ids, max_new_tokens=new)
    results = [compiled.generate(ids, max_new_tokens=new) for _ in range(ROUNDS)]
    peak = _peak_mb()  # before the agreement's longer prefill
    full = zoo.decoder_inputs(name, len(prompt) + len(reference))
    full["input_ids"] = np.array([prompt + reference], np.int64)
    logits = compiled.run(full)["logits"]
    weights = Path(artifact).stat().st_size  # the artifact: the form, and fp32 for fallback
    return {"tokens": [int(t) for t in results[0].generated[0]],
            **_rates([(r.prefill_seconds, r.decode_seconds) for r in results], len(prompt),
                     new),
            "agreement": _agreement(logits, reference, len(prompt)), "cache": results[0].cache,
            "peak_mb": peak, "weights_mb": round(weights / 2**20, 1)}


def tessera_row(name: str, config: str, prompt: list[int], new: int, reference: list[int]
                ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tessera-decode-") as tmp:
        artifact = str(Path(tmp, "model.tess"))
        compiled = in_child("decode", "tessera_compile", name, config, artifact,
                            stop_after=STOP_AFTER)
        if "error" in compiled:
            return compiled
        ran = in_child("decode", "tessera_run", artifact, name, prompt, new, reference,
                       stop_after=STOP_AFTER)
        return {**compiled, **ran}


# -- the table ---------------------------------------------------------------------------------
def rows_for(name: str, prompt_length: int, new: int) -> list[dict[str, Any]]:
    prompt = _prompt(name, prompt_length)
    rows: list[dict[str, Any]] = []

    def add(row: str, weights: str, found: dict[str, Any]) -> None:
        rows.append({"model": name, "row": row, "weights": weights, **found})
        print(f"{name} {row} {weights}: {found.get('decode_tokens_per_s', found.get('error'))}",
              file=sys.stderr, flush=True)

    baseline = in_child("decode", "ort_loop", name, prompt, new, stop_after=STOP_AFTER)
    add("onnxruntime fp32 loop", "fp32", baseline)
    if "error" in baseline:
        return rows
    reference = baseline["tokens"]
    add("tessera", "searched", tessera_row(name, TESSERA, prompt, new, reference))
    for (weights, backend), config in FORMATS.items():
        add(f"tessera, {backend} only", weights,
            tessera_row(name, config, prompt, new, reference))
    try:
        from bench import _decode_runtimes as runtimes
    except ImportError as err:
        for runtime, weights in (("onnxruntime-genai", "int4"),):
            add(runtime, weights, {"error": f"bench/_decode_runtimes.py: {err}"})
        return rows
    for runtime, weights in runtimes.ROWS:
        add(runtime, weights, _dedicated(runtimes.measure_in_child(
            runtime, weights, name, prompt, new, reference, stop_after=STOP_AFTER)))
    return rows


def _dedicated(row: dict[str, Any]) -> dict[str, Any]:
    """A dedicated runtime's row in this table's terms."""
    if "error" in row:
        return {"error": row["error"]}
    return {"prefill_tokens_per_s": row["prefill_tok_s"],
            "decode_tokens_per_s": row["decode_tok_s"], "agreement": row["agreement"],
            "greedy_match": row.get("greedy_match"), "peak_mb": row["peak_rss_mb"],
            "weights_mb": row["size_mb"], "tokens": row.get("tokens"),
            "note": ", ".join(f"{k} {row[k]}" for k in ("precision", "kv_cache", "version")
                              if row.get(k))}


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, models=MODELS, out=RESULTS)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name in args.models:
        rows += rows_for(name, args.prompt, args.new)
    result = header("decode", argv, prompt=args.prompt, new=args.new, rounds=ROUNDS,
                    shapes=SHAPES, rows=[{k: v for k, v in r.items() if k != "tokens"}
                                         for r in rows])
    publish(args.out / "decode", result, table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    lines = [*preamble("Decoders at batch 1: prefill, decode, memory, agreement", result),
             f"A {result['prompt']}-token prompt of random token ids, then {result['new']} "
             f"new tokens, greedy; the median of {result['rounds']} runs after a warm-up. "
             "Decode x: decode tokens/s over the plain ONNX Runtime fp32 loop's. Agreement: "
             "top-1 with teacher forcing against the fp32 loop's tokens. Peak: the largest "
             "resident memory of the process that ran (for tessera, the one that loaded the "
             "artifact and generated), before the agreement pass. Weights: the form's files "
             "on disk (for tessera, the whole artifact, which keeps the fp32 weights too, for "
             "a fallback). MiB throughout.", "",
             *table_head("model", "row", "weights", "prefill tok/s", "decode tok/s",
                         "decode x", "agreement", "peak MiB", "weights MiB", "notes",
                         align="lllrrrrrrl")]
    base: dict[str, float] = {}
    for r in result["rows"]:
        if r["row"] == "onnxruntime fp32 loop" and "decode_tokens_per_s" in r:
            base[r["model"]] = r["decode_tokens_per_s"]
    for r in result["rows"]:
        if "error" in r or r.get("decode_tokens_per_s") is None:
            lines.append(table_row(r["model"], r["row"], r["weights"], "–", "–", "–", "–",
                                   "–", "–", f"not run: {r.get('error', 'no decode rate')}"))
            continue
        ratio = (f"{r['decode_tokens_per_s'] / base[r['model']]:.2f}x"
                 if r["model"] in base else "–")
        notes = "; ".join(str(x) for x in (
            r.get("plan"), r.get("cache"), r.get("note"),
            f"search top-1 {r['search_top1']} ({r['budget']})" if r.get("search_top1")
            else None, f"compile {r['compile_seconds']} s" if r.get("compile_seconds")
            else None) if x)
        lines.append(table_row(r["model"], r["row"], r["weights"], r["prefill_tokens_per_s"],
                               r["decode_tokens_per_s"], ratio, r["agreement"], r["peak_mb"],
                               r["weights_mb"], notes))
    return "\n".join([*lines, *_same_format(result["rows"])]) + "\n"


# a dedicated runtime's weight format in tessera's terms (llama.cpp's q8_0: int8 in blocks)
_FORMAT = {"int8": "int8", "q8_0": "int8", "int4": "int4", "q4_0": "int4"}


def _searched_format(targets: list[str]) -> str | None:
    """The weight format of a searched plan whose partitions all hold one."""
    found = {next((p for p in ("int8", "int4") if f"-precision={p}" in t), None)
             for t in targets}
    return found.pop() if len(found) == 1 and None not in found else None


def _same_format(rows: list[dict[str, Any]]) -> list[str]:
    """For each model and weight format: tessera's fastest row held to it against the
    fastest dedicated runtime's."""
    fastest: dict[tuple[str, str, bool], dict[str, Any]] = {}
    for r in rows:
        rate = r.get("decode_tokens_per_s")
        weights = _FORMAT.get(r["weights"]) or _searched_format(r.get("targets", []))
        if "error" in r or rate is None or weights is None:
            continue
        key = (r["model"], weights, r["row"].startswith("tessera"))
        if key not in fastest or rate > fastest[key]["decode_tokens_per_s"]:
            fastest[key] = r
    lines = ["", "The same weight format: tessera's fastest row held to it, against the "
             "fastest dedicated runtime's (decode tokens/s; x: tessera's over the runtime's).",
             "", *table_head("model", "weights", "tessera", "decode tok/s", "agreement",
                             "fastest dedicated", "decode tok/s", "agreement", "x",
                             align="lllrrlrrr")]
    for (model, weights, ours), r in fastest.items():
        other = fastest.get((model, weights, False))
        if not ours or other is None:
            continue
        lines.append(table_row(model, weights, r["row"], r["decode_tokens_per_s"],
                               r["agreement"], f"{other['row']} {other['weights']}",
                               other["decode_tokens_per_s"], other["agreement"],
                               f"{r['decode_tokens_per_s'] / other['decode_tokens_per_s']:.2f}x"))
    return lines


if __name__ == "__main__":
    sys.exit(main())
