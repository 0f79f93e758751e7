"""A bench function run in a fresh interpreter: nothing an earlier compile or run left in
this process (loaded sessions, spinning pools, warm caches) touches it. Its arguments and
its result travel as JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child_command(module: str, function: str, *args: Any) -> list[str]:
    """The command line that prints `bench.<module>.<function>(*args)` as JSON."""
    code = (f"import json, sys; from bench.{module} import {function}; "
            f"print(json.dumps({function}(*json.loads(sys.argv[1]))))")
    return [sys.executable, "-c", code, json.dumps(args)]


def in_child(module: str, function: str, *args: Any, env: Mapping[str, str] | None = None,
         stop_after: float | None = None, check: bool = False) -> Any:
    """`bench.<module>.<function>(*args)` in a fresh interpreter (in its own process group),
    and what it returned. Where it fails: with `check`, CalledProcessError; else
    {"error": its last lines}. Stopped after `stop_after` seconds, with what it started:
    {"error": ..., "over_s": stop_after}."""
    child = subprocess.Popen(child_command(module, function, *args), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env=None if env is None else dict(env), start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=stop_after)
    except subprocess.TimeoutExpired:  # the child and what it started (a measuring worker)
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"stopped after {stop_after:g} s", "over_s": stop_after}
    if child.returncode != 0:
        if check:
            raise subprocess.CalledProcessError(child.returncode, child.args, stdout, stderr)
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[:400] or f"exit status {child.returncode}"}
    return json.loads(stdout.strip().splitlines()[-1])


__all__ = ["ROOT", "child_command", "in_child"]
