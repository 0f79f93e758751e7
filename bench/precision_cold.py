"""What the precision search adds to a cold compile: each model compiled cold (empty caches,
a fresh process) on `openvino,onnxruntime,cpu` without samples (the fp32 decision only),
then cold again with the precision table's samples and budget (bench/precision.py), in
alternating rounds; the medians and their ratio. After each compile with the precision search
the same compile runs again on its caches: the warm time. Writes
bench/results/precision-cold.{md,json} (`--out` for another directory).

    python -m bench.precision_cold [--models bert-base gpt2-small] [--rounds 2]
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
from bench.precision import CONFIG, MODELS, SAMPLES, budget_for, cold_caches, commit
from tessera import zoo

OUT = Path(__file__).resolve().parent / "results"


def compile_seconds(name: str, cache: Path, precision: bool, fine_search: str = "auto"
                    ) -> dict[str, Any]:
    """One cold compile in this process (and with `precision`, a warm one after it)."""
    from tessera.runtime import compile as compile_model  # tessera.compile

    path = str(zoo.export(name))
    options: dict[str, Any] = {"fine_search": fine_search}
    if precision:
        options.update(samples=[zoo.example_inputs(name, seed=s) for s in range(SAMPLES)],
                       accuracy=str(budget_for(name)))
    with cold_caches(cache):
        began = time.perf_counter()
        compiled = compile_model(path, CONFIG, **options)
        cold = time.perf_counter() - began
        warm = None
        if precision:
            began = time.perf_counter()
            compile_model(path, CONFIG, **options)
            warm = round(time.perf_counter() - began, 2)
    return {"seconds": round(cold, 1), "warm_seconds": warm,
            "plan": compiled.plan.summary().splitlines()[0]}


def _in_child(name: str, cache: Path, precision: bool, fine_search: str = "auto"
              ) -> dict[str, Any]:
    """`compile_seconds` in a fresh interpreter: nothing an earlier compile left in memory
    (quantized forms, loaded sessions) makes the next one warm."""
    code = ("import json, sys; from pathlib import Path; from bench.precision_cold import "
            f"compile_seconds; print(json.dumps(compile_seconds({name!r}, Path({str(cache)!r}),"
            f" {precision!r}, {fine_search!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-cold-") as tmp:
        for name in args.models:
            zoo.export(name)
            fp32: list[float] = []
            exact: list[float] = []
            searched: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                fp32.append(_in_child(name, Path(tmp, name, f"fp32-{round_}"), False)["seconds"])
                exact.append(_in_child(name, Path(tmp, name, f"exact-{round_}"), False,
                                       "everywhere")["seconds"])
                searched.append(_in_child(name, Path(tmp, name, f"int8-{round_}"), True))
                print(f"{name} round {round_ + 1}: {fp32[-1]} s, {searched[-1]['seconds']} s",
                      file=sys.stderr, flush=True)
            fp32_median = round(statistics.median(fp32), 1)
            searched_median = round(statistics.median(s["seconds"] for s in searched), 1)
            exact_median = round(statistics.median(exact), 1)
            rows.append({"model": name, "fp32_seconds": fp32, "exact_seconds": exact,
                         "exact_median": exact_median,
                         "exact_ratio": round(searched_median / exact_median, 2),
                         "precision_seconds": [s["seconds"] for s in searched],
                         "fp32_median": fp32_median, "precision_median": searched_median,
                         "ratio": round(searched_median / fp32_median, 2),
                         "warm_seconds": max(s["warm_seconds"] for s in searched),
                         "plan": searched[-1]["plan"]})
    result = {"command": shlex.join(["python", "-m", "bench.precision_cold", *given]),
              "commit": commit(), "machine": machine(), "config": CONFIG,
              "rounds": args.rounds, "rows": rows}
    (args.out).mkdir(parents=True, exist_ok=True)
    (args.out / "precision-cold.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "precision-cold.md").write_text(table(result))
    print(table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    lines = ["# Cold compile with the precision search", "",
             f"Command: `{result['command']}` at commit `{result['commit']}`", "",
             f"Machine: {result['machine']}", "",
             f"Each compile cold (empty caches, a fresh process), config `{result['config']}`: "
             "fp32 only (no samples), with the default search (`fine-search=auto`: regions "
             "first) and with the exact one (`fine-search=everywhere`, the search before "
             f"regions existed); then with {SAMPLES} samples and the budget of "
             f"bench/results/precision.md; {result['rounds']} alternating round(s), the "
             "median of each and the ratios of the medians. Warm: the slowest compile "
             "with the precision search run again on its own caches.", "",
             "| model | fp32 only s (median; rounds) | fp32, exact search s | with the "
             "precision search s (median; rounds) | ratio to fp32 (lower is cheaper) | "
             "ratio to fp32, exact search (lower is cheaper) | warm s | plan kept |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['fp32_median']}; {', '.join(map(str, r['fp32_seconds']))} "
              f"| {r['exact_median']}; {', '.join(map(str, r['exact_seconds']))} "
              f"| {r['precision_median']}; {', '.join(map(str, r['precision_seconds']))} | "
              f"{r['ratio']}x | {r['exact_ratio']}x | {r['warm_seconds']} | {r['plan']} |"
              for r in result["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
