"""Placement benchmark: per bundled model, the latency of each single-backend plan, the greedy
plan and the Collage plan, timed in blocks (one plan's runs all together, so one backend's
spinning pool never slows another's), with ratios to the best single backend taken in the
same run. Writes a markdown table and a JSON file.

    python -m bench.placement                 # the small test models
    python -m bench.placement --full          # resnet50, mobilenetv2, bert-base, gpt2-small
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tessera
from tessera import backends, zoo
from tessera.backends._inputs import random_inputs

SMALL = ["mlp", "resnet-tiny", "mobilenetv2-tiny", "bert-tiny", "gpt2-block-tiny"]
FULL = ["resnet50", "mobilenetv2", "bert-base", "gpt2-small"]
CANDIDATES = ["onnxruntime", "openvino", "torch"]


def latency_ms(compiled: Any, feeds: dict[str, Any], seconds: float) -> dict[str, float]:
    for _ in range(5):
        compiled.run(feeds)
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < 10 or (time.perf_counter() - start < seconds and len(samples) < 2000):
        began = time.perf_counter()
        compiled.run(feeds)
        samples.append((time.perf_counter() - began) * 1e3)
    return {"median_ms": statistics.median(samples), "min_ms": min(samples),
            "runs": len(samples)}


def bench_model(name: str, targets: Sequence[str], seconds: float) -> dict[str, Any]:
    path = zoo.export(name, 1)
    plans: dict[str, Any] = {}
    began = time.perf_counter()
    plans["collage"] = tessera.compile(path, list(targets), partitioner="collage")
    search_s = time.perf_counter() - began
    plans["greedy"] = tessera.compile(path, list(targets), partitioner="greedy")
    for target in targets:
        plans[f"only {target}"] = tessera.compile(path, target)
    feeds = random_inputs(plans["greedy"])
    assert feeds is not None
    rows = {}
    for label, compiled in plans.items():  # in blocks: one plan's runs together
        rows[label] = latency_ms(compiled, feeds, seconds)
        rows[label]["plan"] = [(str(p.target), len(p.nodes)) for p in compiled.plan.partitions]
    singles = {k: v["median_ms"] for k, v in rows.items() if k.startswith("only ")}
    best = min(singles, key=lambda k: singles[k])
    for row in rows.values():
        row["vs_best_single"] = row["median_ms"] / singles[best]
    stats = plans["collage"].plan.stats
    return {"model": name, "best_single": best, "plans": rows, "compile_seconds": search_s,
            "search": {k: stats.get(k) for k in ("candidates", "measurements", "cache_hits",
                                                 "measure_seconds", "search_seconds", "kept")}}


def markdown(results: list[dict[str, Any]], targets: Sequence[str]) -> str:
    labels = ["collage", "greedy", *(f"only {t}" for t in targets)]
    lines = ["# Placement benchmark", "",
             f"{platform.processor() or platform.machine()}, {sys.platform}; median latency "
             "in ms (in brackets: x the best single backend's time in the same run, lower is "
             "faster). Batch 1, random weights.", "",
             "| model | " + " | ".join(f"{label} ms (x best; lower is faster)"
                                     for label in labels) + " | collage plan | search |",
             "|---|" + "---:|" * len(labels) + "---|---|"]
    for r in results:
        cells = [f"{r['plans'][k]['median_ms']:.3f} ({r['plans'][k]['vs_best_single']:.2f}x)"
                 for k in labels]
        plan = " + ".join(f"{t}[{n}]" for t, n in r["plans"]["collage"]["plan"])
        s = r["search"]
        search = (f"{s['candidates']} cand., {s['measurements']} measured, kept {s['kept']}")
        lines.append(f"| {r['model']} | " + " | ".join(cells) + f" | {plan} | {search} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the full-size models")
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per plan")
    parser.add_argument("--out", default="bench/results/placement")
    args = parser.parse_args(argv)
    targets = [t for t in CANDIDATES if backends.get(t).is_available().ok]
    models = args.models or (FULL if args.full else SMALL)
    results = []
    for name in models:
        results.append(bench_model(name, targets, args.seconds))
        print(json.dumps({k: results[-1][k] for k in ("model", "best_single", "search")}),
              flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"targets": targets, "results": results},
                                                   indent=2))
    out.with_suffix(".md").write_text(markdown(results, targets))
    print(markdown(results, targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
