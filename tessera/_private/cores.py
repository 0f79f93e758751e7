"""How many cores this process may use."""

from __future__ import annotations

import os


def core_budget() -> int:
    """The cores this process may use (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


__all__ = ["core_budget"]
