"""What every bench shares around its measurements: the options it takes, the header of its
result (the command as given, the commit, the machine), and the result written as
`<out>.json` beside its markdown (bench/_markdown.py) as `<out>.md`."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._child import ROOT
from bench._rounds import machine

RESULTS = Path(__file__).resolve().parent / "results"


# -- the options ----------------------------------------------------------------------------
def arguments(doc: str | None, *, models: Sequence[str] | None = None,
              any_models: bool = False, choices: bool = False, rounds: int | None = None,
              seconds: float | None = None, out: Path | str | None = None
              ) -> argparse.ArgumentParser:
    """The parser of `python -m bench.<name>` (its docstring as the help), with the options
    given a default here: `--models` (one or more of `models`; with `any_models`, none or
    more; with `choices`, only those), `--rounds`, `--seconds` per block and `--out`."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if models is not None:
        parser.add_argument("--models", nargs="*" if any_models else "+", default=list(models),
                            choices=list(models) if choices else None)
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=rounds)
    if seconds is not None:
        parser.add_argument("--seconds", type=float, default=seconds, help="per block")
    if out is not None:
        parser.add_argument("--out", type=Path, default=Path(out))
    return parser


# -- the header -----------------------------------------------------------------------------
def command(module: str, argv: Sequence[str] | None) -> str:
    """The command that ran `python -m bench.<module>`, its arguments as given."""
    given = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", "-m", f"bench.{module}", *given])


def commit() -> str:
    """The checkout's commit, marked where tracked files differ from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT,
                              check=False)
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+uncommitted" if git("status", "--porcelain", "--untracked-files=no")
                   else "")


def header(module: str, argv: Sequence[str] | None, **fields: Any) -> dict[str, Any]:
    """What a result says first: the command, the commit and the machine, then `fields`."""
    return {"command": command(module, argv), "commit": commit(), "machine": machine(),
            **fields}


# -- the models -----------------------------------------------------------------------------
def first_line(err: BaseException) -> str:
    """'ErrorType: the first line of its message that says why' (a native library's
    location-only lines skipped), short enough for a table cell."""
    from tessera._private.text import typed_line

    return typed_line(err, limit=280) if str(err).strip() else type(err).__name__


def each_model(models: Sequence[str], bench: Callable[[str], dict[str, Any]],
               written: Callable[[list[dict[str, Any]], dict[str, str]], object]
               ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """`bench(model)` for each model in turn, and why each that failed did (the others go
    on); after each, its time on stderr and `written(results, failed)`, so a long run leaves
    a partial table."""
    results: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for name in models:
        began = time.perf_counter()
        try:
            results.append(bench(name))
        except Exception as err:
            failed[name] = first_line(err)
        print(f"{name}: {round(time.perf_counter() - began, 1)} s"
              + (f", failed: {failed[name]}" if name in failed else ""),
              file=sys.stderr, flush=True)
        written(results, failed)
    return results, failed


def by_model(args: argparse.Namespace, result: dict[str, Any],
             **sections: Callable[[str, int, float], list[dict[str, Any]]]) -> None:
    """The rows of each section for every model of `args.models` in turn, added to
    `result[section]`: `section(model, args.rounds, args.seconds)`."""
    for key in sections:
        result.setdefault(key, [])
    for name in args.models:
        for key, rows in sections.items():
            result[key] += rows(name, args.rounds, args.seconds)
        print(f"{name}: done", flush=True)


def geomean(values: Iterable[float]) -> float:
    """The geometric mean (nan of nothing)."""
    logs = [math.log(v) for v in values]
    return math.exp(statistics.fmean(logs)) if logs else float("nan")


# -- the files ------------------------------------------------------------------------------
def write(out: Path | str, result: Mapping[str, Any], markdown: str, indent: int = 2) -> None:
    """`result` as `out`.json and `markdown` as `out`.md, the folder made where missing."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=indent) + "\n")
    out.with_suffix(".md").write_text(markdown)


def publish(out: Path | str, result: Mapping[str, Any], markdown: str, indent: int = 2
            ) -> None:
    """`write`, then the markdown on stdout."""
    write(out, result, markdown, indent)
    print(markdown)


__all__ = ["RESULTS", "arguments", "by_model", "command", "commit", "each_model", "first_line",
           "geomean", "header", "publish", "write"]
