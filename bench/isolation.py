"""What measuring in a worker process costs: cold Collage compiles (an empty cost database
each time) with `isolate` on and off, in alternation, per model. Reports the measuring time,
the number of measurements and the overhead per measurement. Each compile runs in a fresh
process, so the worker's start-up is part of the isolated figure.

    python -m bench.isolation [--models mlp resnet-tiny bert-tiny] [--rounds 2]
writes bench/results/isolation.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._rounds import machine

MODELS = ["mlp", "resnet-tiny", "bert-tiny"]
TARGETS = "onnxruntime,openvino"
_ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, os, sys, time
from tessera import zoo
from tessera.runtime._compiled import compile as compile_model
began = time.perf_counter()
compiled = compile_model(zoo.export(sys.argv[1], 1), sys.argv[2], partitioner="collage",
                         isolate=sys.argv[3] == "on")
stats = compiled.plan.stats
print(json.dumps({"compile_s": time.perf_counter() - began,
                  "measure_s": stats["measure_seconds"], "measurements": stats["measurements"]}))
"""


def one(name: str, isolate: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**__import__("os").environ, "TESSERA_COST_DB": f"{tmp}/costs.sqlite"}
        done = subprocess.run([sys.executable, "-c", _CHILD, name, TARGETS, isolate],
                              capture_output=True, text=True, check=True, env=env, cwd=_ROOT)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="bench/results/isolation")
    args = parser.parse_args(argv)
    for name in args.models:  # export once, outside the timed children
        subprocess.run([sys.executable, "-m", "tessera.zoo", name], check=True,
                       capture_output=True, cwd=_ROOT)
    rows = []
    for name in args.models:
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        for _ in range(args.rounds):
            for isolate in ("off", "on"):
                runs[isolate].append(one(name, isolate))
        off = statistics.median(r["measure_s"] for r in runs["off"])
        on = statistics.median(r["measure_s"] for r in runs["on"])
        count = runs["on"][0]["measurements"]
        rows.append({"model": name, "measurements": count, "measure_s_in_process": round(off, 2),
                     "measure_s_isolated": round(on, 2), "ratio": round(on / off, 3),
                     "overhead_ms_per_measurement": round((on - off) * 1e3 / count, 2),
                     "compile_s": {k: round(statistics.median(r["compile_s"] for r in v), 2)
                                   for k, v in runs.items()}})
        print(json.dumps(rows[-1]), flush=True)
    lines = ["# Isolation overhead", "", f"{machine()}, {time.strftime('%Y-%m-%d')}. Cold "
             f"Collage compiles on {TARGETS} (empty cost database), isolate off and on in "
             f"alternation, median of {args.rounds} rounds.", "",
             "| model | measurements | measuring s (in process) | measuring s (worker) | "
             "worker / in process (lower is cheaper) | overhead per measurement (lower is "
             "better) | compile s off / on |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['measurements']} | {r['measure_s_in_process']} | "
              f"{r['measure_s_isolated']} | {r['ratio']:.2f} | "
              f"{r['overhead_ms_per_measurement']} ms | {r['compile_s']['off']} / "
              f"{r['compile_s']['on']} |" for r in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"machine": machine(), "rows": rows},
                                                   indent=2))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
