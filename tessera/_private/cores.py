"""How many cores this process may use, and what the CPU is."""

from __future__ import annotations

import functools
import os


def core_budget() -> int:
    """The cores this process may use (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@functools.cache
def cpu_fields() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo ('model name', 'flags', ...); empty
    where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            return parse_cpuinfo(info.read())
    except OSError:
        return {}


def parse_cpuinfo(text: str) -> dict[str, str]:
    first = text.split("\n\n", 1)[0]  # one processor's block: the others repeat it
    return {key.strip(): value.strip() for key, value in
            (line.split(":", 1) for line in first.splitlines() if ":" in line)}


def cpu_flags() -> tuple[str, ...]:
    """The instruction-set flags the CPU reports ('avx2', 'avx512_vnni', 'amx_int8', ...)."""
    return tuple(cpu_fields().get("flags", "").split())


__all__ = ["core_budget", "cpu_fields", "cpu_flags", "parse_cpuinfo"]
