"""The benchmark suite: is tessera's plan at least as fast as the best single backend?

Per model and batch, in the same run:
- every available backend run natively, through its own library with its own defaults (the
  onnxruntime row is also the baseline a user would pick by default);
- tessera with each single backend; tessera greedy (default priority list); tessera Collage.

Every configuration is timed in its own process, one block of runs at a time, and the blocks
repeat in rounds (configurations in turn), so a spinning pool left behind by one backend never
slows another, and drift of a shared machine hits all alike. Each result is the median of the
block medians, with the spread. The Collage plan's search cost is measured too: a cold search
(an empty cost database, in its own process, with its peak memory), then a warm compile with
that database. Every configuration's outputs are checked against a reference.

    python -m bench.suite                   # the suite: docs/benchmarks/suite.{md,json,png}
    python -m bench.suite --smoke           # one small model, few repetitions (CI)
    python -m bench.suite --models bert-base --batches 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._child import in_child
from bench._markdown import table_head, table_row
from bench._report import arguments, geomean, write
from bench._rounds import machine, paired_blocks

MODELS = ["resnet50", "mobilenetv2", "efficientnet-b0", "bert-base", "gpt2-small", "vit-b16",
          "convnext", "unet", "hybrid"]
SMOKE_MODELS = ["mlp"]
BACKENDS = ["onnxruntime", "openvino", "torch"]  # iree and tvm with --backends
OUT = "docs/benchmarks/suite"


# -- children: each configuration alone in a process --------------------------------------------
def _child_search(spec: dict[str, Any]) -> dict[str, Any]:
    """A cold Collage compile (the database at spec['db'] is empty), saved as an artifact.
    Peak memory is the compiling process's and, apart, its measuring worker's high-water
    mark (VmHWM: getrusage's ru_maxrss would carry over the parent's at fork)."""
    os.environ["TESSERA_COST_DB"] = spec["db"]
    from tessera.placement.measure._worker import shared_worker
    from tessera.runtime._compiled import compile as compile_model

    began = time.perf_counter()
    compiled = compile_model(spec["model"], spec["targets"], partitioner="collage")
    seconds = time.perf_counter() - began
    worker = shared_worker()._process
    worker_mb = _peak_rss_mb(worker.pid) if worker is not None else None
    compiled.save(spec["artifact"])
    flat = compiled.plan.stats.to_dict()  # the JSON form, for the report
    return {"seconds": round(seconds, 2), "measurements": flat.get("measurements"),
            "candidates": flat.get("candidates"), "kept": flat.get("kept"),
            "calibration_rounds": flat.get("calibration_rounds"),
            "partition_overhead_ms": flat.get("partition_overhead_ms"),
            "peak_rss_mb": _peak_rss_mb("self"), "worker_peak_rss_mb": worker_mb}


def _peak_rss_mb(pid: int | str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _child_warm(spec: dict[str, Any]) -> dict[str, Any]:
    """A warm compile (the cold search filled the database), after the libraries are
    imported; beside it, how long ONNX Runtime alone takes to create a session from the model
    file, for comparison (the compile cache reloads ONNX Runtime's optimized model, faster)."""
    os.environ["TESSERA_COST_DB"] = spec["db"]
    import onnxruntime

    from tessera import backends
    from tessera.runtime._compiled import compile as compile_model

    for name in spec["targets"]:
        backends.get(name).is_available()
    began = time.perf_counter()
    compiled = compile_model(spec["model"], spec["targets"], partitioner="collage")
    seconds = time.perf_counter() - began
    began = time.perf_counter()
    onnxruntime.InferenceSession(spec["model"], providers=["CPUExecutionProvider"])
    session_s = time.perf_counter() - began
    flat = compiled.plan.stats.to_dict()  # the JSON form, for the report
    return {"seconds": round(seconds, 2), "onnxruntime_session_seconds": round(session_s, 2),
            "measurements": flat.get("measurements"), "plan_cache": flat.get("plan_cache")}


def _child_time(spec: dict[str, Any]) -> dict[str, Any]:
    """One block of runs of one configuration; its outputs are written for the check."""
    import numpy as np

    from tessera import zoo
    from tessera._private.timing import time_block

    feeds = zoo.example_inputs(spec["name"], spec["batch"])
    run: Any
    if spec["kind"] == "native":
        from tessera import backends

        native = backends.get(spec["backend"]).native_runner(Path(spec["model"]).read_bytes())

        def run() -> Any:
            return native(feeds)

        first = native(feeds)[0]  # the outputs in the model's order
    else:
        from tessera.runtime._loading import load

        compiled = load(spec["artifact"])

        def run() -> Any:
            return compiled.run(feeds)

        first = next(iter(compiled.run(feeds).values()))
    np.save(spec["outputs"], np.asarray(first))
    latency = time_block(run, seconds=spec["seconds"], min_runs=spec["min_runs"])
    return {"median_ms": latency.median_ms, "runs": latency.runs}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """What `spec["mode"]` asks of a configuration, in a process of its own."""
    return {"search": _child_search, "warm": _child_warm}.get(spec["mode"], _child_time)(spec)


def _spawn(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    return dict(in_child("suite", "child", spec, stop_after=timeout))


# -- the parent -----------------------------------------------------------------------------------
def bench_model(name: str, batch: int, backends: Sequence[str], args: argparse.Namespace,
                work: Path) -> dict[str, Any]:
    import numpy as np

    from tessera import zoo
    from tessera.runtime._compiled import compile as compile_model

    path = str(zoo.export(name, batch))
    tag = f"{name}-b{batch}"
    db = str(work / f"{tag}.sqlite")
    cold = _spawn({"mode": "search", "model": path, "targets": list(backends), "db": db,
                   "artifact": str(work / f"{tag}-collage.tess")})
    warm_run = _spawn({"mode": "warm", "model": path, "targets": list(backends), "db": db})
    search = {"cold": cold, "warm_seconds": warm_run.get("seconds"),
              "warm_measurements": warm_run.get("measurements"),
              "onnxruntime_session_seconds": warm_run.get("onnxruntime_session_seconds"),
              **({"warm_error": warm_run["error"]} if "error" in warm_run else {})}
    if args.search_only:  # --render merges it into an earlier run's timings
        return {"model": name, "batch": batch, "rows": {}, "search": search}
    os.environ["TESSERA_COST_DB"] = db
    warm = compile_model(path, list(backends), partitioner="collage")
    configs: dict[str, dict[str, Any]] = {}
    for backend in backends:
        configs[f"native {backend}"] = {"kind": "native", "backend": backend}
    artifacts = {f"tessera {b}": compile_model(path, b) for b in backends}
    artifacts["tessera greedy"] = compile_model(path, list(backends), partitioner="greedy")
    artifacts["tessera collage"] = warm
    plans = {}
    for label, compiled in artifacts.items():
        target = work / f"{tag}-{label.split()[-1]}.tess"
        compiled.save(target)
        configs[label] = {"kind": "artifact", "artifact": str(target)}
        plans[label] = [(str(p.target), len(p.nodes)) for p in compiled.plan.partitions]
    del artifacts, warm
    medians: dict[str, list[float]] = {label: [] for label in configs}
    errors: dict[str, str] = {}
    for _ in range(args.rounds):
        for label, config in configs.items():
            if label in errors:
                continue
            result = _spawn({**config, "mode": "time", "name": name, "batch": batch,
                             "model": path, "seconds": args.seconds,
                             "min_runs": args.min_runs, "outputs": str(work / f"{tag}-"
                             f"{label.replace(' ', '_')}.npy")})
            if "error" in result:
                errors[label] = result["error"]
            else:
                medians[label].append(result["median_ms"])
    expected = _expected(name, batch, path)
    rows: dict[str, dict[str, Any]] = {}
    for label, values in medians.items():
        if not values:
            rows[label] = {"error": errors.get(label, "no result")}
            continue
        mid = statistics.median(values)
        got = np.load(work / f"{tag}-{label.replace(' ', '_')}.npy")
        rows[label] = {"median_ms": round(mid, 4), "spread": round((max(values) - min(values))
                                                                   / mid, 4),
                       "rounds": len(values), "blocks_ms": [round(v, 4) for v in values],
                       "matches": _close(got, expected),
                       **({"plan": plans[label]} if label in plans else {})}
    natives = {k: v["median_ms"] for k, v in rows.items()
               if k.startswith("native ") and "median_ms" in v}
    best = min(natives, key=lambda k: natives[k]) if natives else None
    default = natives.get("native onnxruntime")  # what a user runs without tessera
    for row in rows.values():
        if best and "median_ms" in row:
            row["speed_vs_best_native"] = round(natives[best] / row["median_ms"], 4)
        if default and "median_ms" in row:
            row["speed_vs_onnxruntime_default"] = round(default / row["median_ms"], 4)
        if best and "median_ms" in row:
            row["paired_vs_best_native"] = paired_ratio(rows[best], row)
    return {"model": name, "batch": batch, "best_native": best, "rows": rows,
            "search": search, "reference": "the consensus oracle (tessera.oracle)"}


def _expected(name: str, batch: int, path: str) -> Any:
    """The expected outputs: the consensus oracle's fp32 answers (ONNX Runtime unoptimised
    and onnx.reference, a third where they disagree)."""
    import numpy as np
    import onnx

    from tessera import zoo
    from tessera.oracle import answers

    feeds = zoo.example_inputs(name, batch)
    truth = answers(onnx.load(path), [feeds])
    return np.asarray(next(iter(truth.outputs[0].values())))


def _close(got: Any, expected: Any) -> bool:
    from tessera._private.numeric import agree

    return agree({"y": got}, {"y": expected}, scaled=True).ok


# -- report ---------------------------------------------------------------------------------------
def paired_ratio(base: dict[str, Any], row: dict[str, Any]) -> float | None:
    """The median over rounds of base/row within each round: a round's blocks run minutes
    apart from the next round's, so the drift of a shared machine cancels within a round."""
    if not base.get("blocks_ms") or not row.get("blocks_ms"):
        return None
    return paired_blocks(base["blocks_ms"], row["blocks_ms"])


def quietest_ratio(result: dict[str, Any]) -> float | None:
    """Collage's speed against the best native backend, each taken at its quietest block
    (the lowest block median over the rounds). On a shared machine other work only ever
    slows a block, so the quietest blocks are the least disturbed view of both."""
    rows = result["rows"]
    natives = [min(row["blocks_ms"]) for label, row in rows.items()
               if label.startswith("native ") and row.get("blocks_ms")]
    collage = rows.get("tessera collage", {}).get("blocks_ms")
    return round(min(natives) / min(collage), 4) if natives and collage else None


def chosen_backend(result: dict[str, Any]) -> tuple[str, float] | None:
    """The backend of a whole-model Collage plan and its native speed against the best
    native backend of the run: 1.0 when Collage picked the best one, whatever the noise in
    timing tessera itself."""
    rows = result["rows"]
    plan = rows.get("tessera collage", {}).get("plan") or []
    natives = {label.split()[1]: row["median_ms"] for label, row in rows.items()
               if label.startswith("native ") and "median_ms" in row}
    if len(plan) != 1 or not natives:
        return None
    backend = plan[0][0].split()[0]
    if backend not in natives:
        return None
    return backend, round(min(natives.values()) / natives[backend], 4)


def merge(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per model and batch, the later run's winning; a search-only result
    replaces only the search cost of an earlier one."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for r in results:
        key = (r["model"], r["batch"])
        if key in merged and not r["rows"]:
            merged[key] = {**merged[key], "search": r["search"]}
        else:
            merged[key] = r
    return list(merged.values())


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    collages = [r["rows"].get("tessera collage", {}) for r in results]
    ratios = [c for c in (row.get("speed_vs_best_native") for row in collages) if c]
    versus_ort = [c for c in (row.get("speed_vs_onnxruntime_default") for row in collages)
                  if c]
    paired = [c for c in (row.get("paired_vs_best_native") for row in collages) if c]
    quiet = [q for q in (quietest_ratio(r) for r in results) if q]
    chosen = [c for c in (chosen_backend(r) for r in results) if c]
    return {"collage_picked_best_native": sum(speed == 1.0 for _, speed in chosen),
            "collage_whole_model_plans": len(chosen),
            "collage_picked_backend_worst": min((s for _, s in chosen), default=None),
            "collage_vs_best_native_quietest_geomean":
                round(geomean(quiet), 4) if quiet else None,
            "collage_vs_best_native_quietest_min": round(min(quiet), 4) if quiet else None,
            "collage_vs_best_native_geomean": round(geomean(ratios), 4) if ratios else None,
            "collage_vs_best_native_paired_geomean":
                round(geomean(paired), 4) if paired else None,
            "collage_vs_best_native_paired_min": round(min(paired), 4) if paired else None,
            "collage_vs_best_native_min": round(min(ratios), 4) if ratios else None,
            "collage_vs_onnxruntime_default_geomean":
                round(geomean(versus_ort), 4) if versus_ort else None,
            "all_outputs_match": all(row.get("matches", False) for r in results
                                     for row in r["rows"].values())}


def markdown(result: dict[str, Any]) -> str:
    labels = result["configs"]
    out = ["# Benchmark suite", "", f"{result['machine']}. {result['note']}", "",
           "Median latency in ms, and speed relative to the best native backend of the same "
           "run (higher is faster; 1.00 = as fast as the best single backend run natively). "
           "'paired' is Collage's speed against the best native backend within each round, "
           "the median over rounds; 'quietest' compares each at its quietest block (the "
           "lowest block median: other work on a shared machine only ever slows a block).",
           "", *table_head("model", "batch",
                           *(f"{label} ms (vs best; higher is faster)" for label in labels),
                           "collage vs best, paired (higher is faster)",
                           "collage vs best, quietest (higher is faster)", "collage plan",
                           align="lr" + "r" * (len(labels) + 2) + "l")]
    for r in result["results"]:
        cells = []
        for label in labels:
            row = r["rows"].get(label, {})
            if "median_ms" not in row:
                cells.append("error")
                continue
            mark = "" if row["matches"] else " ✗"
            cells.append(f"{row['median_ms']:.3f} ({row['speed_vs_best_native']:.2f}){mark}")
        plan = " + ".join(f"{t.split()[0]}[{n}]" for t, n in
                          r["rows"].get("tessera collage", {}).get("plan", []))
        paired = r["rows"].get("tessera collage", {}).get("paired_vs_best_native")
        quiet = quietest_ratio(r)
        out.append(table_row(r["model"], r["batch"], *cells,
                             paired if paired is not None else "-",
                             quiet if quiet is not None else "-", plan))
    s = result["summary"]
    out += ["", f"Collage vs the best native backend: geometric mean "
            f"{s['collage_vs_best_native_geomean']}, worst {s['collage_vs_best_native_min']} "
            f"(paired within rounds: geometric mean "
            f"{s.get('collage_vs_best_native_paired_geomean')}, worst "
            f"{s.get('collage_vs_best_native_paired_min')}; quietest blocks: geometric "
            f"mean {s.get('collage_vs_best_native_quietest_geomean')}, worst "
            f"{s.get('collage_vs_best_native_quietest_min')}); "
            f"vs ONNX Runtime with its defaults: geometric mean "
            f"{s['collage_vs_onnxruntime_default_geomean']}. "
            f"All outputs match the reference: {s['all_outputs_match']} (✗ marks a mismatch).",
            "", f"Collage kept a whole-model plan on one backend in "
            f"{s.get('collage_whole_model_plans')} of {len(result['results'])} cases; in "
            f"{s.get('collage_picked_best_native')} of them it is the backend that ran fastest "
            f"natively in the same run, and where not, that backend ran natively at "
            f"{s.get('collage_picked_backend_worst')} of the best one's speed at worst "
            f"(a comparison of the native rows alone, free of tessera's own timing noise).",
            "", "## Search cost", "",
            *table_head("model", "batch", "cold search s", "measurements", "candidates",
                        "peak RSS MB (compile + measuring worker)", "warm compile s",
                        "plain ONNX Runtime session s (for comparison; lower is faster)",
                        "warm measurements", "kept", align="lrrrrrrrrl")]
    for r in result["results"]:
        cold, search = r["search"]["cold"], r["search"]
        out.append(table_row(r["model"], r["batch"], cold.get("seconds"),
                             cold.get("measurements"), cold.get("candidates"),
                             f"{cold.get('peak_rss_mb')} + {cold.get('worker_peak_rss_mb')}",
                             search["warm_seconds"], search.get("onnxruntime_session_seconds"),
                             search["warm_measurements"], cold.get("kept")))
    return "\n".join(out) + "\n"


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = result["configs"]
    groups = [f"{r['model']}\nb{r['batch']}" for r in result["results"]]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups)), 5.0))
    for i, label in enumerate(labels):
        values = [r["rows"].get(label, {}).get("speed_vs_best_native", 0.0)
                  for r in result["results"]]
        ax.bar([g + i * width for g in range(len(groups))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([g + width * (len(labels) - 1) / 2 for g in range(len(groups))], groups)
    ax.set_ylabel("speed vs best native backend")
    ax.set_title("tessera benchmark suite (higher is faster)")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, rounds=3, seconds=1.0, out=OUT)
    parser.add_argument("--smoke", action="store_true", help="mlp only, one short round")
    parser.add_argument("--models", nargs="*", help=f"default: {' '.join(MODELS)}")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 4])
    parser.add_argument("--backends", nargs="*", default=BACKENDS)
    parser.add_argument("--min-runs", type=int, default=10)
    parser.add_argument("--search-only", action="store_true", help="only the cold search "
                        "and the warm compile of each model; --render merges them into an "
                        "earlier run's timings")
    parser.add_argument("--render", metavar="JSON", nargs="+", help="write the JSON, table "
                        "and plot of finished runs again, merged (to --out); measures nothing")
    args = parser.parse_args(argv)
    if args.render:  # the table and the plot again, from the JSON of one run or several
        runs = [json.loads(Path(p).read_text()) for p in args.render]
        results = merge([r for run in runs for r in run["results"]])
        result = {**runs[0], "results": results, "summary": summary(results)}
        write(args.out, result, markdown(result))
        plot(result, args.out.with_suffix(".png"))
        return 0
    if args.smoke:
        args.models, args.batches = args.models or SMOKE_MODELS, [1]
        args.rounds, args.seconds, args.min_runs = 1, 0.2, 5
    from tessera import backends as registry

    available = [b for b in args.backends if registry.get(b).is_available().ok]
    configs = [*(f"native {b}" for b in available), *(f"tessera {b}" for b in available),
               "tessera greedy", "tessera collage"]
    out: Path = args.out
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        for name in args.models or MODELS:
            for batch in args.batches:
                results.append(bench_model(name, batch, available, args, Path(tmp)))
                last = results[-1]
                print(json.dumps({k: last.get(k) for k in ("model", "batch", "best_native")}
                                 | {"collage": last["rows"].get("tessera collage"),
                                    "warm_seconds": last["search"]["warm_seconds"]}),
                      flush=True)
                result = write_run(out, results, configs, args)  # after each model: partial
    plotted = plot(result, out.with_suffix(".png"))
    print(markdown(result))
    if not plotted:
        print("(no plot: pip install matplotlib)")
    return 0


def write_run(out: Path, results: list[dict[str, Any]], configs: list[str],
              args: argparse.Namespace) -> dict[str, Any]:
    result = {"machine": machine(), "configs": configs, "rounds": args.rounds,
              "seconds_per_block": args.seconds, "results": results,
              "note": f"Median of {args.rounds} rounds of {args.seconds} s blocks, each "
                      "configuration in its own process; random weights.",
              "summary": summary(results)}
    write(out, result, markdown(result))
    return result


if __name__ == "__main__":
    sys.exit(main())
