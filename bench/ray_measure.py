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

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._child import in_child
from bench._markdown import median_and_rounds, preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish
from bench.precision import cold_caches

LABEL = "tessera.machine=bench"
LOCAL = "local worker"


def search(model: str, targets: str, nodes: int, cache: Path | str) -> dict[str, Any]:
    """One cold search in this process: on the local worker (`nodes` 0) or on that many
    local Ray nodes."""
    cache = Path(cache)
    from tessera import zoo
    from tessera.config import CompilationConfig
    from tessera.ir import load_model
    from tessera.placement import CostDB, Tools, place

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
            plan = place(loaded, config, tools=Tools(db=CostDB(cache / "costs.sqlite"))).plan
            seconds = time.perf_counter() - began
        finally:
            if cluster is not None:
                from tessera.placement.measure._ray import disconnect

                disconnect()
                cluster.shutdown()
    measuring = plan.stats.measuring
    return {"nodes": nodes, "seconds": round(seconds, 2),
            "cluster_seconds": round(started, 2),
            "measurements": measuring.measurements if measuring is not None else 0,
            "measure_seconds": measuring.seconds if measuring is not None else 0.0,
            "plan": plan.summary().splitlines()[0]}


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
    parser = arguments(__doc__, rounds=1, out=RESULTS)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--targets", default="openvino,onnxruntime")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args(argv)
    runs: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="tessera-ray-bench-") as tmp:
        for round_ in range(args.rounds):
            for nodes in [0, *args.nodes]:  # alternating setups, round by round
                cache = Path(tmp, f"{nodes}-{round_}")
                run = in_child("ray_measure", "search", args.model, args.targets, nodes,
                               str(cache), check=True)
                runs.setdefault(nodes, []).append(run)
                print(f"round {round_ + 1}, {nodes or 'local'}: {run['seconds']} s, "
                      f"{run['measurements']} measurements", file=sys.stderr, flush=True)
    result = header("ray_measure", argv, model=args.model, targets=args.targets,
                    rounds=args.rounds, rows=summarise(runs))
    publish(args.out / "ray_measure", result, table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    lines = [*preamble(f"Cold search of {result['model']} measured through Ray", result,
                       ". Every Ray node here is a process of this one machine, sharing its "
                       "cores: more nodes cannot measure faster on it; the speed-up of N nodes "
                       "needs N machines."),
             f"Targets `{result['targets']}`; the placement search alone, cold (empty cost "
             f"database), each setup in a fresh process, {result['rounds']} round(s), the "
             "median. Ray overhead (one node): the extra measuring wall time per "
             "measurement against the local worker, and that as a share of the local "
             "worker's time per measurement (target: at most 10%).", "",
             *table_head("setup", "search s (median; rounds)", "measurements",
                         "measurements/s", "measuring s",
                         "Ray overhead per measurement (lower is better)", "cluster start s",
                         "plan")]
    for r in result["rows"]:
        if "overhead_ms" in r:
            share = r.get("overhead_share")
            overhead = f"{r['overhead_ms']} ms" + (f" ({share:.1%})" if share is not None
                                                   else "")
        else:
            overhead = "-"
        started = f"{r['cluster_seconds']}" if r["nodes"] else "-"
        lines.append(table_row(r["setup"], median_and_rounds(r["median_seconds"], r["seconds"]),
                               r["measurements"], r["per_second"], r["measure_seconds"],
                               overhead, started, r["plan"]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
