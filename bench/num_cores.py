"""A `cpu -num-cores=N` device target: the threads each backend is given, and the CPU time
per run next to the wall time per run.

Each model is compiled on `openvino,onnxruntime,cpu -num-cores=N` and on the same config
without `-num-cores`, and on each backend forced alone (`onnxruntime,cpu -num-cores=N`, ...)
with and without it. Each configuration runs in its own process (thread counts are partly
process-wide: torch's, IREE's task system), which compiles, runs warm-up calls, then times
`--runs` calls in each of `--rounds` rounds: the process's CPU time (all its threads,
`time.process_time`) and the wall time, each divided by the calls. With N=1 every backend
computes on one thread, so CPU time per run is about the wall time per run; without it, a
pool of several threads makes the CPU time a multiple of the wall time. Writes
bench/results/num-cores.{md,json} (`--out` for another directory).

    python -m bench.num_cores [--models resnet50] [--cores 1] [--runs 50] [--rounds 3]
                              [--backends onnxruntime openvino torch iree tvm]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench._child import ROOT, in_child
from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish
from tessera import zoo

MODELS = ["resnet50"]
MIXED = ("openvino", "onnxruntime")
ALONE = ["onnxruntime", "openvino", "torch", "iree", "tvm"]


def configs(backends: Sequence[str], cores: int) -> list[tuple[str, str]]:
    """(label, config) pairs: the mixed config, then each backend alone, each without and
    with the device's core count."""
    from tessera import backends as registry

    def usable(names: Sequence[str]) -> list[str]:
        return [b for b in names if registry.get(b).is_available().ok]

    groups = [",".join(usable(MIXED)), *usable(backends)]
    out = []
    for group in dict.fromkeys(g for g in groups if g):
        out += [(f"{group},cpu",) * 2, (f"{group},cpu -num-cores={cores}",) * 2]
    return out


# -- the child: one configuration in its own process ---------------------------------------
def library_threads(part: Any) -> str:
    """What the backend's library says of its threads, where it says."""
    kind = part.backend
    try:
        if kind == "onnxruntime":
            count = part.session.get_session_options().intra_op_num_threads
            return f"intra-op {count or 'default'}"
        if kind == "openvino":
            return f"INFERENCE_NUM_THREADS {part.compiled.get_property('INFERENCE_NUM_THREADS')}"
        if kind == "torch":
            import torch

            return f"torch.get_num_threads() {torch.get_num_threads()}"
        if kind == "iree":
            threads = part.target.attrs["num-threads"]
            return "local-sync driver (no pool)" if threads == 1 else \
                f"local-task driver, {threads or 'default'} workers"
    except Exception as err:  # a reading, not a result: never fail the row for it
        return f"unreadable ({type(err).__name__})"
    return "-"


def child(spec: dict[str, Any]) -> dict[str, Any]:
    from tessera._private.cores import core_budget
    from tessera.runtime import compile as compile_model

    path = spec["path"]
    feeds = zoo.example_inputs(spec["model"])
    began = time.perf_counter()
    compiled = compile_model(path, spec["config"])
    compile_s = round(time.perf_counter() - began, 2)
    for _ in range(spec["warmup"]):
        compiled.run(feeds)
    cpu, wall = [], []
    for _ in range(spec["rounds"]):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(spec["runs"]):
            compiled.run(feeds)
        cpu.append((time.process_time() - cpu0) * 1e3 / spec["runs"])
        wall.append((time.perf_counter() - wall0) * 1e3 / spec["runs"])
    parts = [{"backend": part.backend, "built_as": str(part.target),
              "device": str(part.device_target),
              "num_threads": part.target.attrs.get("num-threads"),
              "library": library_threads(part)} for part in compiled.parts]
    cpu_ms, wall_ms = statistics.median(cpu), statistics.median(wall)
    return {"plan": compiled.plan.summary().splitlines()[0], "policy": compiled.policy.name,
            "core_budget": core_budget(), "compile_seconds": compile_s, "parts": parts,
            "cpu_ms_per_run": round(cpu_ms, 3), "wall_ms_per_run": round(wall_ms, 3),
            "cpu_over_wall": round(cpu_ms / wall_ms, 3),
            "rounds_cpu_ms": [round(v, 3) for v in cpu],
            "rounds_wall_ms": [round(v, 3) for v in wall]}


# -- the parent ------------------------------------------------------------------------------
def threads_cell(row: dict[str, Any]) -> str:
    seen: dict[str, str] = {}
    for part in row.get("parts", []):
        given = part["num_threads"]
        text = (f"{given}" if given else "library default") + f" ({part['library']})"
        seen.setdefault(part["backend"], text)
    return "; ".join(f"{backend}: {text}" for backend, text in seen.items()) or "-"


def markdown(result: dict[str, Any]) -> str:
    lines = [*preamble(f"Threads under `cpu -num-cores={result['cores']}`", result),
             f"Each configuration in its own process: compiled, {result['warmup']} warm-up "
             f"calls, then {result['runs']} calls in each of {result['rounds']} rounds; CPU "
             "time is the process's (every thread), both per call, the median round. With "
             "`-num-cores=1` every backend has one thread: CPU time per run is about the wall "
             "time per run.", "",
             *table_head("model", "config", "plan", "threads given (what the library says)",
                         "CPU ms/run", "wall ms/run",
                         "CPU / wall (cores kept busy: higher is more, 1.0 is one)")]
    for row in result["rows"]:
        cells = ([f"error: {row['error']}", *[None] * 4] if "error" in row else
                 [row["plan"], threads_cell(row), row["cpu_ms_per_run"],
                  row["wall_ms_per_run"], row["cpu_over_wall"]])
        lines.append(table_row(row["model"], f"`{row['label']}`", *cells))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, models=MODELS, rounds=3, out=RESULTS)
    parser.add_argument("--backends", nargs="+", default=ALONE,
                        help="backends forced alone (those installed); the mixed config is "
                             "openvino,onnxruntime")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--runs", type=int, default=50, help="timed calls per round")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-cores-") as tmp:
        # one cache for every child: each config is placed once, on this run's measurements
        env = {**os.environ, "TESSERA_CACHE": tmp, "PYTHONPATH": os.pathsep.join(
            filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
        env.pop("TESSERA_COST_DB", None)
        for model in args.models:
            path = str(zoo.export(model))  # in the usual cache: exported once, not per child
            for label, config in configs(args.backends, args.cores):
                spec = {"model": model, "path": path, "config": config, "runs": args.runs,
                        "rounds": args.rounds, "warmup": args.warmup}
                found = in_child("num_cores", "child", spec, env=env)
                rows.append({"model": model, "label": label, "config": config, **found})
                shown = found.get("error") or (f"{found['cpu_ms_per_run']} ms CPU, "
                                               f"{found['wall_ms_per_run']} ms wall")
                print(f"{model} {label}: {shown}", file=sys.stderr, flush=True)
    result = header("num_cores", argv, cores=args.cores, runs=args.runs, rounds=args.rounds,
                    warmup=args.warmup, rows=rows)
    publish(args.out / "num-cores", result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
