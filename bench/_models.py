"""The driver the per-model tables share: arguments, one bench per model, the command and
commit that produced the table, and its JSON and markdown written side by side."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._rounds import machine

Row = dict[str, Any]


def run_models(module: str, doc: str | None, models: Sequence[str], out: Path,
               bench: Callable[[str, int, float], Row], markdown: Callable[[Row], str],
               line: Callable[[Row], str], argv: Sequence[str] | None = None) -> int:
    """`python -m bench.<module>`: `bench(model, rounds, seconds)` per model, each row
    printed with `line`, then `out`.json and `out`.md (`markdown` of the whole result)."""
    from bench.precision import commit

    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(models))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--out", default=str(out))
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        row = bench(name, args.rounds, args.seconds)
        print(line(row), flush=True)
        rows.append(row)
    command = f"python -m bench.{module}" + (
        f" --models {' '.join(args.models)}" if args.models != list(models) else "") + (
        f" --rounds {args.rounds}" if args.rounds != 3 else "") + (
        f" --seconds {args.seconds}" if args.seconds != 1.0 else "")
    result = {"command": command, "commit": commit(), "machine": machine(),
              "rounds": args.rounds, "seconds": args.seconds, "models": rows}
    path = Path(args.out)
    path.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


__all__ = ["run_models"]
