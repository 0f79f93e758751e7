"""What the precision search adds to a cold compile: each model compiled cold (empty caches)
on `openvino,onnxruntime,cpu` without samples (the fp32 decision only), then cold again with
the precision table's samples and budget (bench/precision.py), and the ratio. Writes
bench/results/precision-cold.{md,json} (`--out` for another directory).

    python -m bench.precision_cold [--models bert-base gpt2-small]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._rounds import machine
from bench.precision import CONFIG, SAMPLES, budget_for, cold_caches, commit
from tessera import zoo

MODELS = ["bert-base", "gpt2-small"]
OUT = Path(__file__).resolve().parent / "results"


def cold_seconds(path: str, cache: Path, **options: Any) -> tuple[float, str]:
    import tessera

    with cold_caches(cache):
        began = time.perf_counter()
        compiled = tessera.compile(path, CONFIG, **options)
        return round(time.perf_counter() - began, 1), compiled.plan.summary().splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-cold-") as tmp:
        for name in args.models:
            path = str(zoo.export(name))
            samples = [zoo.example_inputs(name, seed=s) for s in range(SAMPLES)]
            fp32, _ = cold_seconds(path, Path(tmp, name, "fp32"))
            searched, plan = cold_seconds(path, Path(tmp, name, "precision"), samples=samples,
                                          accuracy=str(budget_for(name)))
            rows.append({"model": name, "fp32_seconds": fp32, "precision_seconds": searched,
                         "ratio": round(searched / fp32, 2), "plan": plan})
            print(f"{name}: {fp32} s, {searched} s", file=sys.stderr, flush=True)
    result = {"command": shlex.join(["python", "-m", "bench.precision_cold", *given]),
              "commit": commit(), "machine": machine(), "config": CONFIG, "rows": rows}
    lines = ["# Cold compile with the precision search", "",
             f"Command: `{result['command']}` at commit `{result['commit']}`", "",
             f"Machine: {result['machine']}", "",
             f"Each compile cold (empty caches), config `{CONFIG}`; the second with "
             f"{SAMPLES} samples and the budget of bench/results/precision.md.", "",
             "| model | fp32 only s | with the precision search s | ratio (lower is cheaper) "
             "| plan kept |", "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['fp32_seconds']} | {r['precision_seconds']} | "
              f"{r['ratio']}x | {r['plan']} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision-cold.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "precision-cold.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
