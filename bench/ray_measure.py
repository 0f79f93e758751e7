"""The cold search of a suite model measured through Ray against the local worker: the
placement search alone (no race, no build), with an empty cost database, on the local
measuring worker and on 1, 2 and 4 local Ray nodes (`ray.cluster_utils.Cluster`, one CPU
offered each, all labelled `tessera.machine=bench`); each setup in a fresh process. Reports
the wall time of the search, its measurements and measurements per second, and Ray's
overhead per measurement against the local worker (the extra wall time per measurement,
and that as a share of the local worker's measuring time per measurement). Local nodes share
this machine's cores: more of them cannot measure faster here, and the table states the
cores. Writes bench/results/ray_measure.{md,json} (`--out` for another directory).

    python -m bench.ray_measure [--model resnet50] [--targets openvino,onnxruntime] \
        [--nodes 1 2 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._rounds import machine
from bench.precision import cold_caches, commit

OUT = Path(__file__).resolve().parent / "results"
LABEL = "tessera.machine=bench"
LOCAL = "local worker"


def search(model: str, targets: str, nodes: int, cache: Path) -> dict[str, Any]:
    """One cold search in this process: on the local worker (`nodes` 0) or on that many
    local Ray nodes."""
    from tessera import zoo
    from tessera.config import CompilationConfig
    from tessera.ir import load_model
    from tessera.placement import CostDB, place

    path = str(zoo.export(model))
    with cold_caches(cache):
        loaded = load_model(path)
        options: dict[str, Any] = {"partitioner": "collage"}
        cluster, started = None, 0.0
        if nodes:
            from ray.cluster_utils import Cluster

            began = time.perf_counter()
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            for index in range(nodes):
                cluster.add_node(num_cpus=1, labels={"tessera.machine": "bench"},
                                 env_vars={"TESSERA_MACHINE": f"bench-{index}"})
            cluster.wait_for_nodes()
            started = time.perf_counter() - began
            options.update(measure="ray", ray_address=cluster.address, measure_on=LABEL)
        config = CompilationConfig.create(targets, **options)
        try:
            began = time.perf_counter()
            plan = place(loaded, config, db=CostDB(cache / "costs.sqlite")).plan
            seconds = time.perf_counter() - began
        finally:
            if cluster is not None:
                from tessera.placement._ray import disconnect

                disconnect()
                cluster.shutdown()
    stats = plan.stats
    return {"nodes": nodes, "seconds": round(seconds, 2),
            "cluster_seconds": round(started, 2), "measurements": stats.measurements or 0,
            "measure_seconds": stats.measure_seconds or 0.0,
            "plan": plan.summary().splitlines()[0]}


def _in_child(model: str, targets: str, nodes: int, cache: Path) -> dict[str, Any]:
    code = ("import json; from pathlib import Path; from bench.ray_measure import search; "
            f"print(json.dumps(search({model!r}, {targets!r}, {nodes!r}, "
            f"Path({str(cache)!r}))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summarise(runs: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per setup: the median round's figures, throughput, and the overhead per
    measurement against the local worker (setup 0)."""
    rows = []
    local = None
    for nodes in sorted(runs):
        rounds = runs[nodes]
        median = sorted(rounds, key=lambda r: r["seconds"])[len(rounds) // 2]
        seconds = statistics.median(r["seconds"] for r in rounds)
        count = median["measurements"]
        row: dict[str, Any] = {
            "setup": LOCAL if nodes == 0 else f"Ray, {nodes} node{'s' * (nodes > 1)}",
            "nodes": nodes, "seconds": [r["seconds"] for r in rounds],
            "median_seconds": round(seconds, 2), "measurements": count,
            "per_second": round(count / seconds, 2) if seconds else None,
            "measure_seconds": median["measure_seconds"],
            "cluster_seconds": median["cluster_seconds"], "plan": median["plan"]}
        if nodes == 0:
            local = row
        elif nodes == 1 and local is not None and count and local["measurements"]:
            mine = row["measure_seconds"] / count
            theirs = local["measure_seconds"] / local["measurements"]
            row["overhead_ms"] = round((mine - theirs) * 1000, 2)
            row["overhead_share"] = round((mine - theirs) / theirs, 4) if theirs else None
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--targets", default="openvino,onnxruntime")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    runs: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="tessera-ray-bench-") as tmp:
        for round_ in range(args.rounds):
            for nodes in [0, *args.nodes]:  # alternating setups, round by round
                cache = Path(tmp, f"{nodes}-{round_}")
                run = _in_child(args.model, args.targets, nodes, cache)
                runs.setdefault(nodes, []).append(run)
                print(f"round {round_ + 1}, {nodes or 'local'}: {run['seconds']} s, "
                      f"{run['measurements']} measurements", file=sys.stderr, flush=True)
    result = {"command": shlex.join(["python", "-m", "bench.ray_measure", *given]),
              "commit": commit(), "machine": machine(), "model": args.model,
              "targets": args.targets, "rounds": args.rounds, "rows": summarise(runs)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_measure.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "ray_measure.md").write_text(table(result))
    print(table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    lines = [f"# Cold search of {result['model']} measured through Ray", "",
             f"Command: `{result['command']}` at commit `{result['commit']}`", "",
             f"Machine: {result['machine']}. Every Ray node here is a process of this one "
             "machine, sharing its cores: more nodes cannot measure faster on it; the "
             "speed-up of N nodes needs N machines.", "",
             f"Targets `{result['targets']}`; the placement search alone, cold (empty cost "
             f"database), each setup in a fresh process, {result['rounds']} round(s), the "
             "median. Ray overhead (one node): the extra measuring wall time per "
             "measurement against the local worker, and that as a share of the local "
             "worker's time per measurement (target: at most 10%).", "",
             "| setup | search s (median; rounds) | measurements | measurements/s | "
             "measuring s | Ray overhead per measurement (lower is better) | cluster start "
             "s | plan |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "overhead_ms" in r:
            share = r.get("overhead_share")
            overhead = f"{r['overhead_ms']} ms" + (f" ({share:.1%})" if share is not None
                                                   else "")
        else:
            overhead = "-"
        started = f"{r['cluster_seconds']}" if r["nodes"] else "-"
        lines.append(f"| {r['setup']} | {r['median_seconds']}; "
                     f"{', '.join(map(str, r['seconds']))} | {r['measurements']} | "
                     f"{r['per_second']} | {r['measure_seconds']} | {overhead} | {started} | "
                     f"{r['plan']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
