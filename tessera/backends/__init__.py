"""Backends: one module each. Importing them registers their target kinds and protocol
objects only; each backend's library loads on first use."""

from __future__ import annotations

from tessera.backends import iree, onnxruntime, openvino, reference, tensorrt, torch, tvm
from tessera.backends._protocol import BACKENDS, Backend, Compiled, Support, TensorSpec
from tessera.errors import BackendUnavailableError
from tessera.target import KINDS

__all__ = ["BACKENDS", "Backend", "Compiled", "Support", "TensorSpec", "get", "names"]

del iree, onnxruntime, openvino, reference, tensorrt, torch, tvm


def get(kind: str) -> Backend:
    """The backend for a kind name or alias ('onnxruntime', 'ort', ...)."""
    name = KINDS.canonical_name(kind) or kind
    if name in KINDS and name not in BACKENDS:
        raise BackendUnavailableError(
            f"target kind {name!r} is declared, but this version of tessera has no backend "
            f"implementation for it yet (implemented: {', '.join(BACKENDS.names())})"
        )
    return BACKENDS.get(name)


def names() -> list[str]:
    """Names of the implemented backends, in registration order."""
    return BACKENDS.names()
