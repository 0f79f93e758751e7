"""Peak memory of a cold compile against the size of the model's weights: each model compiled
cold (empty caches, a fresh process) on `openvino,onnxruntime,cpu`, while this process samples
the compiling process and the measuring worker it starts (bench/_sampler.py). The criterion:
their peak together at most 3 x the weights + 1.5 GB, counted in PSS (a page both map, such
as memory-mapped weights, is counted once); RSS is shown beside it. Writes
bench/results/memory.{md,json} (`--out` for another directory).

    python -m bench.memory [--models gpt2-small transformer-24x2048] [--stop-gb 18]

Models: the suite's (`tessera.zoo`), and `transformer-LxW`, a generated stack of L layers of
width W with random weights as ONNX external data (bench/_transformer.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench._child import ROOT, child_command
from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, header, publish
from bench._sampler import Sampler
from bench._transformer import transformer_stack, weights_bytes
from bench.precision import cold_caches

CONFIG = "openvino,onnxruntime,cpu"
MODELS = ["gpt2-small", "transformer-24x2048"]
FACTOR, EXTRA = 3, 1.5e9  # the limit: FACTOR x the weights + EXTRA bytes
GB = 1e9


def limit(weights: int) -> float:
    return FACTOR * weights + EXTRA


def model_path(name: str, directory: Path) -> Path:
    """The model file for a bench name."""
    if name.startswith("transformer-"):
        layers, width = (int(v) for v in name.split("-", 1)[1].split("x"))
        path = directory / f"{name}.onnx"
        return path if path.exists() else transformer_stack(directory, layers, width,
                                                            name=name)
    from tessera import zoo

    return Path(zoo.export(name))


def cold_compile(path: str, config: str, cache: str) -> dict[str, Any]:
    """One cold compile in this process, and what it kept."""
    from tessera.runtime import compile as compile_model  # tessera.compile

    with cold_caches(Path(cache)):
        began = time.perf_counter()
        compiled = compile_model(path, config)
        seconds = time.perf_counter() - began
    return {"seconds": round(seconds, 1), "nodes": len(compiled.model.dataflow.names),
            "plan": compiled.plan.summary().splitlines()[0],
            "targets": [str(p.target) for p in compiled.plan.partitions]}


def sampled(path: Path, config: str, cache: Path, interval: float, stop_bytes: float
            ) -> dict[str, Any]:
    """`cold_compile` in a fresh interpreter, sampled from here until it ends; stopped (the
    process and what it started) once they hold more than `stop_bytes` together."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(child_command("memory", "cold_compile", str(path), config,
                                               str(cache)),
                                 stdout=out, stderr=err, cwd=ROOT,
                                 start_new_session=True)  # its own group, to stop it whole
        sampler = Sampler(child.pid, interval).start()
        stopped = False
        while child.poll() is None:
            if sampler.peaks.total.pss > stop_bytes:
                os.killpg(child.pid, signal.SIGKILL)
                stopped = True
                break
            time.sleep(interval)
        child.wait()
        peaks = sampler.stop()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    row: dict[str, Any] = {"peak": {part: asdict(getattr(peaks, part))
                                    for part in ("total", "main", "children")},
                           "samples": peaks.samples, "timeline": peaks.timeline}
    if stopped:
        row["error"] = f"stopped above {stop_bytes / GB:.1f} GB"
    elif child.returncode != 0:
        lines = stderr.strip().splitlines()
        row["error"] = lines[-1] if lines else f"exit status {child.returncode}"
    else:
        row.update(json.loads(stdout.strip().splitlines()[-1]))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, models=MODELS, any_models=True, out=RESULTS)
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--stop-gb", type=float, default=18.0,
                        help="stop a compile whose processes hold more than this together")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-memory-") as tmp:
        for index, name in enumerate(args.models):
            path = model_path(name, Path(tmp))
            weights = weights_bytes(path)
            row = {"model": name, "weights_bytes": weights, "limit_bytes": limit(weights),
                   **sampled(path, args.config, Path(tmp, f"cache-{index}"), args.interval,
                             args.stop_gb * GB)}
            rows.append(row)
            print(f"{name}: {row['peak']['total']['pss'] / GB:.2f} GB "
                  f"({row.get('seconds', row.get('error'))})", file=sys.stderr, flush=True)
    result = header("memory", argv, config=args.config, interval_s=args.interval, rows=rows)
    publish(args.out / "memory", result, table(result))
    return 0


def _gb(value: float) -> str:
    return f"{value / GB:.2f}"


def table(result: dict[str, Any]) -> str:
    lines = [*preamble("Memory: peak of a cold compile against the weights' size", result),
             f"Each model compiled cold (empty caches, a fresh process) on "
             f"`{result['config']}`, sampled every {result['interval_s']:g} s from another "
             "process. Compile: the compiling process; worker: the processes it started (the "
             "measuring worker). PSS counts a page that several processes map (memory-mapped "
             "weights) once, divided among them; RSS counts it in each. Each peak is the "
             "highest sample of that column, so the columns need not add up. GB = 10^9 "
             f"bytes. Limit: {FACTOR} x weights + {EXTRA / GB:g} GB, on the PSS of both "
             "together.", "",
             *table_head("model", "weights GB", "limit GB",
                         "peak together GB, PSS (lower is better)", "within limit",
                         "compile PSS", "worker PSS", "together RSS", "compile RSS",
                         "worker RSS", "cold compile s", "plan")]
    for r in result["rows"]:
        peak = r["peak"]
        total = peak["total"]["pss"]
        outcome = r.get("error") or r.get("plan", "")
        met = "✓" if total <= r["limit_bytes"] and "error" not in r else "✗"
        lines.append(table_row(
            r["model"], _gb(r["weights_bytes"]), _gb(r["limit_bytes"]), _gb(total), met,
            _gb(peak["main"]["pss"]), _gb(peak["children"]["pss"]), _gb(peak["total"]["rss"]),
            _gb(peak["main"]["rss"]), _gb(peak["children"]["rss"]), r.get("seconds", ""),
            outcome))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
