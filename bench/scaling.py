"""How the cold compile grows with the model: each model compiled cold (empty caches, a fresh
process) on `openvino,onnxruntime,cpu`, and some with every available backend (`-t all`),
with the time, the time per node, and where it went (candidates, measurements, the search).
Writes bench/results/scaling.{md,json} (`--out` for another directory).

    python -m bench.scaling [--models light_resnet50 bert-base conv-stack-2000 ...]
                            [--all-targets resnet50 ...] [--stop-after SECONDS]

Models: the suite's (`tessera.zoo`), the onnx package's light copies of published CNNs
(`light_inception_v2`, `light_resnet50`, `light_shufflenet`), and `conv-stack-N`, a
generated stack of N/4 residual conv blocks (bench/_generated.py).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._child import in_child
from bench._generated import conv_stack, light_model
from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish
from bench.precision import cold_caches

CONFIG = "openvino,onnxruntime,cpu"
MODELS = ["light_inception_v2", "light_resnet50", "light_shufflenet", "bert-base",
          "gpt2-small", "conv-stack-2000"]
ALL_TARGETS = ["resnet50", "light_resnet50"]
LIMIT_S = 120.0


def model_path(name: str, directory: Path) -> Path:
    """The model file for a bench name."""
    if name.startswith("conv-stack-"):
        path = directory / f"{name}.onnx"
        if not path.exists():
            path.write_bytes(conv_stack(int(name.rsplit("-", 1)[1]) // 4))
        return path
    if name.startswith("light_"):
        return light_model(name)
    from tessera import zoo

    return Path(zoo.export(name))


def all_targets() -> str:
    """`-t all`: every available backend that takes part in it, by rank (as the CLI)."""
    from tessera import backends

    return ",".join(backends.for_all()) or "reference"


def cold_compile(path: str, config: str, cache: str) -> dict[str, Any]:
    """One cold compile in this process, and what its search did."""
    import onnx

    from tessera.runtime import compile as compile_model  # tessera.compile

    with cold_caches(Path(cache)):
        began = time.perf_counter()
        compiled = compile_model(path, config)
        seconds = time.perf_counter() - began
    measuring, cover = compiled.plan.stats.measuring, compiled.plan.stats.cover
    return {"seconds": round(seconds, 1),
            "file_nodes": len(onnx.load(path, load_external_data=False).graph.node),
            "nodes": len(compiled.model.dataflow.names),
            "partitions": len(compiled.plan.partitions),
            "candidates": measuring.candidates if measuring is not None else None,
            "measurements": measuring.measurements if measuring is not None else None,
            "measure_seconds": measuring.seconds if measuring is not None else None,
            "search_seconds": cover.seconds if cover is not None else None,
            "plan": compiled.plan.summary().splitlines()[0],
            "targets": [str(p.target) for p in compiled.plan.partitions]}


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, models=MODELS, any_models=True, out=RESULTS)
    parser.add_argument("--all-targets", nargs="*", default=ALL_TARGETS,
                        help="models also compiled with every available backend")
    parser.add_argument("--stop-after", type=float, default=None,
                        help="stop a compile after this many seconds (a row saying so)")
    args = parser.parse_args(argv)
    everything = all_targets()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-scaling-") as tmp:
        jobs = [(name, CONFIG) for name in args.models]
        for name in args.all_targets:
            if name not in args.models:
                jobs.append((name, CONFIG))
            jobs.append((name, everything))
        for index, (name, config) in enumerate(jobs):
            path = model_path(name, Path(tmp))
            # in a fresh interpreter: nothing a compile before it left in memory
            row = {"model": name, "config": config,
                   **in_child("scaling", "cold_compile", str(path), config,
                              str(Path(tmp, f"cache-{index}")), stop_after=args.stop_after)}
            rows.append(row)
            print(f"{name} [{config}]: {row.get('seconds', row.get('error'))}",
                  file=sys.stderr, flush=True)
    result = header("scaling", argv, limit_s=LIMIT_S, all_targets=everything, rows=rows)
    publish(args.out / "scaling", result, table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [*preamble("Scaling: cold compile time against the model's size", result),
             "Each compile cold (empty caches, a fresh process). Nodes: in the file, and "
             "after loading (constant folding). `all` is every available backend: "
             f"`{result['all_targets']}`.", "",
             *table_head("model", "nodes (file / loaded)", "targets",
                         "cold compile s (lower is faster)", f"within {result['limit_s']:g} s",
                         "ms per loaded node (lower is faster)", "candidates", "measured",
                         "measuring s", "search s", "plan")]
    for r in rows:
        targets = "all" if r["config"] == result["all_targets"] else r["config"]
        if "error" in r:
            outcome = (f"over {r['over_s']:g} (stopped)" if "over_s" in r
                       else f"failed: {r['error']}")
            lines.append(table_row(r["model"], None, targets, outcome, "✗", *[None] * 6))
            continue
        lines.append(table_row(
            r["model"], f"{r['file_nodes']} / {r['nodes']}", targets, r["seconds"],
            "✓" if r["seconds"] <= result["limit_s"] else "✗",
            f"{1000 * r['seconds'] / max(1, r['nodes']):.0f}", r["candidates"],
            r["measurements"], r["measure_seconds"], r["search_seconds"], r["plan"]))
    ratios = []
    for r in rows:
        if r["config"] != result["all_targets"] or "error" in r:
            continue
        two = next((b for b in rows if b["model"] == r["model"] and b["config"] == CONFIG
                    and "error" not in b), None)
        if two is not None:
            ratios.append(f"- {r['model']}: every backend {r['seconds']} s against two "
                          f"{two['seconds']} s: {r['seconds'] / two['seconds']:.2f}x "
                          "(at most 3x wanted; lower is cheaper)")
    if ratios:
        lines += ["", "Every backend against two:", "", *ratios]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
