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

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._generated import conv_stack, light_model
from bench._rounds import machine
from bench.precision import cold_caches, commit

CONFIG = "openvino,onnxruntime,cpu"
MODELS = ["light_inception_v2", "light_resnet50", "light_shufflenet", "bert-base",
          "gpt2-small", "conv-stack-2000"]
ALL_TARGETS = ["resnet50", "light_resnet50"]
LIMIT_S = 120.0
OUT = Path(__file__).resolve().parent / "results"


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
    stats = compiled.plan.stats
    return {"seconds": round(seconds, 1),
            "file_nodes": len(onnx.load(path, load_external_data=False).graph.node),
            "nodes": len(compiled.model.dataflow.names),
            "partitions": len(compiled.plan.partitions),
            "candidates": stats.candidates, "measurements": stats.measurements,
            "measure_seconds": stats.measure_seconds, "search_seconds": stats.search_seconds,
            "plan": compiled.plan.summary().splitlines()[0],
            "targets": [str(p.target) for p in compiled.plan.partitions]}


def _in_child(path: Path, config: str, cache: Path, stop_after: float | None = None
              ) -> dict[str, Any]:
    """`cold_compile` in a fresh interpreter: nothing a compile before it left in memory;
    stopped after `stop_after` seconds, when given (a row saying it ran over)."""
    code = ("import json; from bench.scaling import cold_compile; "
            f"print(json.dumps(cold_compile({str(path)!r}, {config!r}, {str(cache)!r})))")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             cwd=Path(__file__).resolve().parent.parent)
    try:
        stdout, stderr = child.communicate(timeout=stop_after)
    except subprocess.TimeoutExpired:  # the compile and its measuring worker
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"stopped after {stop_after:g} s", "over_s": stop_after}
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--all-targets", nargs="*", default=ALL_TARGETS,
                        help="models also compiled with every available backend")
    parser.add_argument("--stop-after", type=float, default=None,
                        help="stop a compile after this many seconds (a row saying so)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
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
            row = {"model": name, "config": config,
                   **_in_child(path, config, Path(tmp, f"cache-{index}"), args.stop_after)}
            rows.append(row)
            print(f"{name} [{config}]: {row.get('seconds', row.get('error'))}",
                  file=sys.stderr, flush=True)
    result = {"command": shlex.join(["python", "-m", "bench.scaling", *given]),
              "commit": commit(), "machine": machine(), "limit_s": LIMIT_S,
              "all_targets": everything, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "scaling.md").write_text(table(result))
    print(table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = ["# Scaling: cold compile time against the model's size", "",
             f"Command: `{result['command']}` at commit `{result['commit']}`", "",
             f"Machine: {result['machine']}", "",
             "Each compile cold (empty caches, a fresh process). Nodes: in the file, and "
             "after loading (constant folding). `all` is every available backend: "
             f"`{result['all_targets']}`.", "",
             "| model | nodes (file / loaded) | targets | cold compile s (lower is faster) "
             f"| within {result['limit_s']:g} s | ms per loaded node (lower is faster) "
             "| candidates | measured | measuring s | search s | plan |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        targets = "all" if r["config"] == result["all_targets"] else r["config"]
        if "over_s" in r:
            lines.append(f"| {r['model']} | | {targets} | over {r['over_s']:g} (stopped) | ✗ "
                         "| | | | | | |")
            continue
        if "error" in r:
            lines.append(f"| {r['model']} | | {targets} | failed: {r['error']} | ✗ "
                         "| | | | | | |")
            continue
        per_node = 1000 * r["seconds"] / max(1, r["nodes"])
        lines.append(
            f"| {r['model']} | {r['file_nodes']} / {r['nodes']} | {targets} | {r['seconds']} "
            f"| {'✓' if r['seconds'] <= result['limit_s'] else '✗'} | {per_node:.0f} "
            f"| {r['candidates']} | {r['measurements']} | {r['measure_seconds']} "
            f"| {r['search_seconds']} | {r['plan']} |")
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
