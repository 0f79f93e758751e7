"""What the precision search adds to a cold compile: each model compiled cold (empty caches,
a fresh process) on `openvino,onnxruntime,cpu` without samples (the fp32 decision only),
then cold again with the precision table's samples and budget (bench/precision.py), in
alternating rounds; the medians and their ratio. After each compile with the precision search
the same compile runs again on its caches: the warm time. Writes
bench/results/precision-cold.{md,json} (`--out` for another directory).

    python -m bench.precision_cold [--models bert-base gpt2-small] [--rounds 2] [--no-exact]
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
from bench.precision import CONFIG, MODELS, SAMPLES, budget_for, cold_caches
from tessera import zoo


def compile_seconds(name: str, cache: Path | str, precision: bool, fine_search: str = "auto"
                    ) -> dict[str, Any]:
    """One cold compile in this process (and with `precision`, a warm one after it)."""
    from tessera.runtime import compile as compile_model  # tessera.compile

    path = str(zoo.export(name))
    options: dict[str, Any] = {"fine_search": fine_search}
    if precision:
        options.update(samples=[zoo.example_inputs(name, seed=s) for s in range(SAMPLES)],
                       accuracy=str(budget_for(name)))
    with cold_caches(Path(cache)):
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
    return dict(in_child("precision_cold", "compile_seconds", name, str(cache), precision,
                         fine_search, check=True))


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, models=MODELS, rounds=2, out=RESULTS)
    parser.add_argument("--no-exact", action="store_true",
                        help="skip the fp32 compiles with the exact search")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-cold-") as tmp:
        for name in args.models:
            zoo.export(name)
            fp32: list[float] = []
            exact: list[float] = []
            searched: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                fp32.append(_in_child(name, Path(tmp, name, f"fp32-{round_}"), False)["seconds"])
                if not args.no_exact:
                    exact.append(_in_child(name, Path(tmp, name, f"exact-{round_}"), False,
                                           "everywhere")["seconds"])
                searched.append(_in_child(name, Path(tmp, name, f"int8-{round_}"), True))
                print(f"{name} round {round_ + 1}: {fp32[-1]} s, {searched[-1]['seconds']} s",
                      file=sys.stderr, flush=True)
            fp32_median = round(statistics.median(fp32), 1)
            searched_median = round(statistics.median(s["seconds"] for s in searched), 1)
            exact_median = round(statistics.median(exact), 1) if exact else None
            rows.append({"model": name, "fp32_seconds": fp32, "exact_seconds": exact,
                         "exact_median": exact_median,
                         "exact_ratio": round(searched_median / exact_median, 2)
                         if exact_median else None,
                         "precision_seconds": [s["seconds"] for s in searched],
                         "fp32_median": fp32_median, "precision_median": searched_median,
                         "ratio": round(searched_median / fp32_median, 2),
                         "warm_seconds": max(s["warm_seconds"] for s in searched),
                         "plan": searched[-1]["plan"]})
    result = header("precision_cold", argv, config=CONFIG, rounds=args.rounds, rows=rows)
    publish(args.out / "precision-cold", result, table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    lines = [*preamble("Cold compile with the precision search", result),
             "Each compile cold (empty caches, a fresh process), config "
             f"`{result['config']}`: fp32 only (no samples), with the default search "
             "(`fine-search=auto`: regions first) and with the exact one "
             "(`fine-search=everywhere`, the search before regions existed"
             + ("; skipped here, --no-exact" if not any(r["exact_seconds"] for r in
                                                       result["rows"]) else "")
             + "); then with "
             f"{SAMPLES} samples and the budget of bench/results/precision.md; "
             f"{result['rounds']} alternating round(s), the median of each and the ratios of "
             "the medians. Warm: the slowest compile with the precision search run again on "
             "its own caches.", "",
             *table_head("model", "fp32 only s (median; rounds)", "fp32, exact search s",
                         "with the precision search s (median; rounds)",
                         "ratio to fp32 (lower is cheaper)",
                         "ratio to fp32, exact search (lower is cheaper)", "warm s",
                         "plan kept")]
    lines += [table_row(r["model"], median_and_rounds(r["fp32_median"], r["fp32_seconds"]),
                        median_and_rounds(r["exact_median"], r["exact_seconds"])
                        if r["exact_seconds"] else "– (--no-exact)",
                        median_and_rounds(r["precision_median"], r["precision_seconds"]),
                        f"{r['ratio']}x", f"{r['exact_ratio']}x" if r["exact_ratio"] else "–",
                        r["warm_seconds"], r["plan"])
              for r in result["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
