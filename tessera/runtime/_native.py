"""Each backend run natively on the whole model: its own library with its own defaults, no
tessera in between. This is the baseline that `tessera bench` and `bench/` compare with; each
backend says how in its `native_runner` hook."""

from __future__ import annotations

from tessera import backends
from tessera.backends import NativeRunner


def native_runner(backend: str, model: bytes) -> NativeRunner:
    """A callable running `model` with `backend`'s library as its users would call it."""
    return backends.get(backend).native_runner(model)


def native_precision(backend: str) -> str | None:
    """What `backend` computes in natively where that is not fp32 (None: fp32)."""
    return backends.get(backend).native_precision()


__all__ = ["native_precision", "native_runner"]
