"""Handing freed memory back to the system. glibc keeps the pages of freed heap memory for
later allocations; after a backend session of a large model is dropped (several hundred MB
in pieces below glibc's mmap threshold), the process would go on holding them."""

from __future__ import annotations

import ctypes
import functools
import gc
import platform
import sys
from typing import Any


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    if platform.libc_ver()[0] != "glibc":  # musl has no malloc_trim: nothing to trim
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def trim() -> None:
    """Collect what only reference cycles still hold (a dropped build may sit in one), then
    return the free pages of the C heap to the system, where the C library can."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


__all__ = ["trim"]
