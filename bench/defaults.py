"""Defaults against defaults: what a user gets from tessera with no samples and no budget,
against what each backend gives with its own defaults, on the suite's models.

Per model (batch 1), in one process and one run:
- `ONNX Runtime defaults`: a plain `InferenceSession` (fp32);
- `OpenVINO defaults`: `Core().compile_model(path, "CPU")`, which computes in bf16 on a CPU
  with AVX-512 BF16 or AMX (the row says what it computed in);
- `tessera`: `tessera.compile(path, "openvino,onnxruntime,cpu")` cold (empty caches), no
  samples: the float forms the CPU computes natively are searched under the default budget
  `cosine>=0.9995` on generated inputs.

Each row's accuracy is its lowest cosine against the consensus oracle's fp32 answers on 4
generated inputs (`tessera.ir._implied.implied_inputs`, seeds apart from the compile's).
Each row is timed in its own block, in rounds; the ratio is the faster native default's median
over tessera's (higher is faster; the target is at least 0.98).

    python -m bench.defaults                         # bench/results/defaults.{md,json}
    python -m bench.defaults --models mobilenetv2 --rounds 1"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._markdown import preamble, table_head, table_row
from bench._models import NATIVES, lowest_cosine, native_defaults, precision_name, run_models
from bench._report import RESULTS, geomean
from bench._rounds import in_rounds
from bench.precision import cold_caches

MODELS = ["resnet50", "mobilenetv2", "efficientnet-b0", "bert-base", "gpt2-small", "vit-b16",
          "convnext", "unet", "hybrid"]
TARGETS = "openvino,onnxruntime,cpu"
CHECKS = 4


def bench_model(name: str, rounds: int, seconds: float) -> dict[str, Any]:
    import onnx

    import tessera
    from tessera import zoo
    from tessera.config._accuracy import accuracy_of
    from tessera.ir import load_model
    from tessera.ir._implied import implied_inputs
    from tessera.oracle import answers

    path = str(zoo.export(name))
    model = load_model(path)
    feeds = implied_inputs(model, CHECKS, seed=1000)
    truth = answers(onnx.load(path), feeds)
    natives, ov_precision = native_defaults(path)

    with tempfile.TemporaryDirectory() as cache, cold_caches(Path(cache)):
        began = time.perf_counter()
        compiled = tessera.compile(path, TARGETS)
        compile_s = time.perf_counter() - began
        runs = {**natives, "tessera": compiled.run}
        accuracy = {label: accuracy_of([run(f) for f in feeds], truth.outputs)
                    for label, run in runs.items()}
        feed = feeds[0]
        timed = in_rounds({label: (lambda run=run: run(feed)) for label, run in runs.items()},
                          rounds=rounds, seconds=seconds)
    record = compiled.plan.stats.precision
    plan = " + ".join(f"{p.target}[{len(p.nodes)}]" for p in compiled.plan.partitions)
    runs.clear()  # the sessions go with the closures when this returns
    natives.clear()
    faster = min(NATIVES, key=lambda k: timed[k].median_ms)

    return {
        "model": name, "compile_s": round(compile_s, 1),
        "plan": plan,
        "precision": None if record is None else {
            "status": record.status, "kept": str(record.kept), "budget": record.budget,
            "inputs": record.inputs,
            "variants": [{"target": v.target, "whole_ms": v.whole_ms,
                          "budget_used": v.whole_used, "note": v.note}
                         for v in record.variants]},
        "openvino_default_precision": ov_precision,
        "judges": truth.judges,
        "cosine": {label: round(lowest_cosine(accuracy[label]), 6) for label in accuracy},
        "timings": {k: m.to_dict() for k, m in timed.items()},
        "faster_native": faster,
        "ratio": round(timed[faster].median_ms / timed["tessera"].median_ms, 3),
    }


def markdown(result: dict[str, Any]) -> str:
    rows = result["models"]
    for r in rows:
        r["openvino_default_precision"] = precision_name(r["openvino_default_precision"])
    bf16 = any(r["openvino_default_precision"] != "f32" for r in rows)
    lines = [*preamble("Defaults against defaults", result),
             "Batch 1. No samples, no budget: tessera compiles cold with `" + TARGETS + "` and "
             "searches the float forms the CPU computes natively under its default budget "
             "`cosine>=0.9995` on generated inputs. Accuracy: each row's lowest cosine against "
             f"the consensus oracle's fp32 answers on {CHECKS} other generated inputs. Each row "
             f"timed in its own block, {result['rounds']} round(s) of {result['seconds']} s; "
             "ratio = the faster native default over tessera (higher is faster; the target is "
             "at least 0.98).", ""]
    if not bf16:
        lines += ["This CPU has no native bf16 or f16: the float forms were not available, "
                  "and every row computes in fp32.", ""]
    lines += table_head("model", "ORT defaults ms", "OpenVINO defaults ms (computes in)",
                        "tessera ms", "ratio", "tessera kept", "cosine ORT / OpenVINO / tessera",
                        "cold compile s", align="lrrrrllr")
    for r in rows:
        t, c = r["timings"], r["cosine"]
        lines.append(table_row(
            r["model"], f"{t['ONNX Runtime defaults']['median_ms']:.2f}",
            f"{t['OpenVINO defaults']['median_ms']:.2f} ({r['openvino_default_precision']})",
            f"{t['tessera']['median_ms']:.2f}", f"{r['ratio']:.3f}",
            r["precision"]["kept"] if r["precision"] else "fp32",
            f"{c['ONNX Runtime defaults']:.5f} / {c['OpenVINO defaults']:.5f} / "
            f"{c['tessera']:.5f}", r["compile_s"]))
    ratios = [r["ratio"] for r in rows]
    lines += ["", f"Geometric mean ratio {geomean(ratios):.3f}, "
              f"lowest {min(ratios, default=0):.3f} "
              f"({sum(r >= 0.98 for r in ratios)} of {len(ratios)} rows at 0.98 or more)."]
    for r in rows:
        p = r["precision"]
        if p and p["variants"]:
            notes = "; ".join(f"{v['target']}: {v['note'] or 'kept'}" for v in p["variants"])
            lines.append(f"- {r['model']}: {notes}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    return run_models("defaults", __doc__, MODELS, RESULTS / "defaults", bench_model, markdown,
                      _line, argv)


def _line(row: dict[str, Any]) -> str:
    return f"{row['model']}: ratio {row['ratio']}, cosine {row['cosine']['tessera']}"


if __name__ == "__main__":
    raise SystemExit(main())
