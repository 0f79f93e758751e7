"""Registering a TEST-ONLY backend, with its own target kind, for the length of a test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tessera import backends
from tessera.backends import Backend
from tessera.target import KINDS, register_kind


@contextlib.contextmanager
def registered(name: str, backend: Backend, **kind: Any) -> Iterator[Backend]:
    """`backend` under `name` (a kind serving the CPU unless `kind` says otherwise), removed
    again afterwards, so no other test sees it."""
    backend.kind = register_kind(name, **{"serves": ("cpu",), "doc": "test-only", **kind})
    backends.BACKENDS.register(name, backend)
    try:
        yield backend
    finally:
        backends.BACKENDS.unregister(name)
        KINDS.unregister(name)
