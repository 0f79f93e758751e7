"""Each backend run natively on the whole model: its own library with its own defaults, no
tessera in between. This is the baseline that `tessera bench` and `bench/` compare with; each
backend says how in its `native_runner` hook."""

from __future__ import annotations

from tessera import backends
from tessera.backends import NativeRunner


def native_runner(backend: str, model: bytes) -> NativeRunner:
    """A callable running `model` with `backend`'s library as its users would call it."""
    return backends.get(backend).native_runner(model)


__all__ = ["native_runner"]
