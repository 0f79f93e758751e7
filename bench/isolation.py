"""What measuring in a worker process costs: cold Collage compiles (an empty cost database
each time) with `isolate` on and off, in alternation, per model. Reports the measuring time,
the number of measurements and the overhead per measurement. Each compile runs in a fresh
process, so the worker's start-up is part of the isolated figure.

    python -m bench.isolation [--models mlp resnet-tiny bert-tiny] [--rounds 2]
writes bench/results/isolation.{md,json}.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench._child import ROOT, in_child
from bench._markdown import table_head, table_row
from bench._report import arguments, publish
from bench._rounds import machine

MODELS = ["mlp", "resnet-tiny", "bert-tiny"]
TARGETS = "onnxruntime,openvino"


def compile_once(name: str, targets: str, isolate: bool) -> dict[str, Any]:
    """One cold Collage compile in this process: its time, its measuring time and count."""
    from tessera import zoo
    from tessera.runtime._compiled import compile as compile_model

    began = time.perf_counter()
    compiled = compile_model(zoo.export(name, 1), targets, partitioner="collage",
                             isolate=isolate)
    measuring = compiled.plan.stats.measuring
    assert measuring is not None, "a cold Collage compile measures"
    return {"compile_s": time.perf_counter() - began, "measure_s": measuring.seconds,
            "measurements": measuring.measurements}


def one(name: str, isolate: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TESSERA_COST_DB": f"{tmp}/costs.sqlite"}
        return dict(in_child("isolation", "compile_once", name, TARGETS, isolate == "on",
                             env=env, check=True))


def markdown(rows: Sequence[dict[str, Any]], rounds: int) -> str:
    lines = ["# Isolation overhead", "", f"{machine()}, {time.strftime('%Y-%m-%d')}. Cold "
             f"Collage compiles on {TARGETS} (empty cost database), isolate off and on in "
             f"alternation, median of {rounds} rounds.", "",
             *table_head("model", "measurements", "measuring s (in process)",
                         "measuring s (worker)", "worker / in process (lower is cheaper)",
                         "overhead per measurement (lower is better)", "compile s off / on",
                         align="lrrrrrr")]
    lines += [table_row(r["model"], r["measurements"], r["measure_s_in_process"],
                        r["measure_s_isolated"], f"{r['ratio']:.2f}",
                        f"{r['overhead_ms_per_measurement']} ms",
                        f"{r['compile_s']['off']} / {r['compile_s']['on']}") for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, models=MODELS, any_models=True, rounds=2,
                     out="bench/results/isolation").parse_args(argv)
    for name in args.models:  # export once, outside the timed children
        subprocess.run([sys.executable, "-m", "tessera.zoo", name], check=True,
                       capture_output=True, cwd=ROOT)
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
    publish(args.out, {"machine": machine(), "rows": rows}, markdown(rows, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
