"""The regions-first search against the exact one on the suite: each model compiled cold (empty
caches, a fresh process) on `openvino,onnxruntime,cpu` with `fine-search=auto` (regions
first) and with `fine-search=everywhere` (every candidate, as before regions existed), the
compile times and the plans kept; where the plans differ, both are timed end to end in the
same process, in rounds. Writes bench/results/search-plans.{md,json} (`--out` for another
directory).

    python -m bench.search_plans [--models resnet50 bert-base ...] [--rounds 5]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._child import in_child
from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish
from bench._rounds import in_rounds, paired
from bench.precision import cold_caches

CONFIG = "openvino,onnxruntime,cpu"
MODELS = ["resnet50", "mobilenetv2", "efficientnet-b0", "bert-base", "gpt2-small", "vit-b16",
          "convnext", "unet", "hybrid"]
SEARCHES = ("auto", "everywhere")


def cold_compile(name: str, search: str, cache: str, artifact: str) -> dict[str, Any]:
    """One cold compile in this process, its plan saved to `artifact`."""
    from tessera import zoo
    from tessera.runtime import compile as compile_model  # tessera.compile

    with cold_caches(Path(cache)):
        began = time.perf_counter()
        compiled = compile_model(str(zoo.export(name)), CONFIG, fine_search=search)
        seconds = time.perf_counter() - began
        compiled.save(artifact)
    coarse, measuring = compiled.plan.stats.coarse, compiled.plan.stats.measuring
    return {"seconds": round(seconds, 1), "nodes": len(compiled.model.dataflow.names),
            "plan": [[str(p.target), len(p.nodes)] for p in compiled.plan.partitions],
            "measurements": measuring.measurements if measuring is not None else None,
            "coarse": str(coarse) if coarse is not None else None}


def _timed(name: str, artifacts: dict[str, Path], rounds: int) -> dict[str, Any]:
    """Both plans loaded and timed in rounds on the same inputs; the speed of regions-first
    against the exact search, paired within rounds."""
    import functools

    from tessera import zoo
    from tessera.runtime import load

    feed = zoo.example_inputs(name, seed=0)
    loaded = {search: load(path) for search, path in artifacts.items()}
    measured = in_rounds({s: functools.partial(c.run, feed) for s, c in loaded.items()},
                         rounds=rounds, seconds=0.5, min_runs=3)
    return {"ms": {s: m.median_ms for s, m in measured.items()},
            "speed": paired(measured["everywhere"], measured["auto"])}


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, models=MODELS, rounds=5, out=RESULTS).parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-plans-") as tmp:
        for name in args.models:
            artifacts = {s: Path(tmp, f"{name}-{s}.tess") for s in SEARCHES}
            row: dict[str, Any] = {"model": name}
            for search in SEARCHES:
                row[search] = in_child("search_plans", "cold_compile", name, search,
                                       str(Path(tmp, f"cache-{name}-{search}")),
                                       str(artifacts[search]), check=True)
            row["same"] = row["auto"]["plan"] == row["everywhere"]["plan"]
            if not row["same"]:
                row["timed"] = _timed(name, artifacts, args.rounds)
            rows.append(row)
            print(f"{name}: {row['auto']['seconds']} s / {row['everywhere']['seconds']} s, "
                  f"same plan: {row['same']}", file=sys.stderr, flush=True)
    result = header("search_plans", argv, config=CONFIG, rows=rows)
    publish(args.out / "search-plans", result, table(result))
    return 0


def _plan(parts: list[list[Any]]) -> str:
    return " + ".join(f"{target}[{nodes}]" for target, nodes in parts)


def table(result: dict[str, Any]) -> str:
    lines = [*preamble("The regions-first search against the exact search", result),
             f"Config `{result['config']}`, batch 1, each compile cold (empty caches, a "
             "fresh process). `auto`: regions first, node by node only where a mix could "
             "win; `everywhere`: every candidate measured and searched exactly. Where the "
             "plans differ, both are timed end to end in rounds in one process.", "",
             *table_head("model", "nodes", "cold s, auto", "cold s, everywhere",
                         "auto / everywhere time (lower is cheaper)",
                         "measured, auto / everywhere", "plan, auto", "plan, everywhere",
                         "end to end")]
    for r in result["rows"]:
        auto, every = r["auto"], r["everywhere"]
        if r["same"]:
            timed = "same plan"
        else:
            ms = r["timed"]["ms"]
            timed = (f"{ms['auto']:.3f} vs {ms['everywhere']:.3f} ms: auto "
                     f"{r['timed']['speed']:.2f}x the speed (higher is faster)")
        lines.append(table_row(r["model"], auto["nodes"], auto["seconds"], every["seconds"],
                               f"{auto['seconds'] / every['seconds']:.2f}",
                               f"{auto['measurements']} / {every['measurements']}",
                               _plan(auto["plan"]), _plan(every["plan"]), timed))
    same = sum(1 for r in result["rows"] if r["same"])
    lines += ["", f"Same plan on {same} of {len(result['rows'])} model(s)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
