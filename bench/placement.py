"""Placement benchmark: per bundled model, the latency of each single-backend plan, the greedy
plan and the Collage plan, timed in blocks (one plan's runs all together, so one backend's
spinning pool never slows another's), with ratios to the best single backend taken in the
same run. Writes a markdown table and a JSON file.

    python -m bench.placement                 # the small test models
    python -m bench.placement --full          # resnet50, mobilenetv2, bert-base, gpt2-small
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import tessera
from bench._markdown import table_head, table_row
from bench._report import arguments, publish
from tessera import backends, zoo
from tessera._private.timing import time_block
from tessera.backends._inputs import random_inputs

SMALL = ["mlp", "resnet-tiny", "mobilenetv2-tiny", "bert-tiny", "gpt2-block-tiny"]
FULL = ["resnet50", "mobilenetv2", "bert-base", "gpt2-small"]
CANDIDATES = ["onnxruntime", "openvino", "torch"]


def latency_ms(compiled: Any, feeds: dict[str, Any], seconds: float) -> dict[str, Any]:
    timed = time_block(lambda: compiled.run(feeds), warmup=5, seconds=seconds)
    return {"median_ms": timed.median_ms, "min_ms": timed.min_ms, "runs": timed.runs}


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
    flat = plans["collage"].plan.stats.to_dict()  # the JSON form, for the report
    return {"model": name, "best_single": best, "plans": rows, "compile_seconds": search_s,
            "search": {k: flat.get(k) for k in ("candidates", "measurements", "cache_hits",
                                                "measure_seconds", "search_seconds", "kept")}}


def markdown(results: list[dict[str, Any]], targets: Sequence[str]) -> str:
    labels = ["collage", "greedy", *(f"only {t}" for t in targets)]
    lines = ["# Placement benchmark", "",
             f"{platform.processor() or platform.machine()}, {sys.platform}; median latency "
             "in ms (in brackets: x the best single backend's time in the same run, lower is "
             "faster). Batch 1, random weights.", "",
             *table_head("model", *(f"{label} ms (x best; lower is faster)" for label in labels),
                         "collage plan", "search", align="l" + "r" * len(labels))]
    for r in results:
        cells = [f"{r['plans'][k]['median_ms']:.3f} ({r['plans'][k]['vs_best_single']:.2f}x)"
                 for k in labels]
        plan = " + ".join(f"{t}[{n}]" for t, n in r["plans"]["collage"]["plan"])
        s = r["search"]
        search = (f"{s['candidates']} cand., {s['measurements']} measured, kept {s['kept']}")
        lines.append(table_row(r["model"], *cells, plan, search))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, seconds=2.0, out="bench/results/placement")
    parser.add_argument("--full", action="store_true", help="the full-size models")
    parser.add_argument("--models", nargs="*")
    args = parser.parse_args(argv)
    targets = [t for t in CANDIDATES if backends.get(t).is_available().ok]
    models = args.models or (FULL if args.full else SMALL)
    results = []
    for name in models:
        results.append(bench_model(name, targets, args.seconds))
        print(json.dumps({k: results[-1][k] for k in ("model", "best_single", "search")}),
              flush=True)
    publish(args.out, {"targets": targets, "results": results}, markdown(results, targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
