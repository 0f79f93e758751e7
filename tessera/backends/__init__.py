"""Backends: one module each, plus plugins from other packages (the `tessera.backends`
entry-point group, docs/backends.md), and proposers: subgraphs that Collage measures as
candidate partitions, added to an existing backend with `register_proposer`. Importing this
registers tessera's own target kinds and protocol objects only; each backend's library loads
on first use, and plugins on the first lookup that misses or the first listing."""

from __future__ import annotations

from tessera.backends import iree, onnxruntime, openvino, reference, tensorrt, torch, tvm
from tessera.backends._answer import Proposal
from tessera.backends._devices import DeviceSettings
from tessera.backends._inputs import random_inputs, shapes_at
from tessera.backends._plugins import GROUP, PluginFailure, PluginWarning, load_plugins
from tessera.backends._plugins import failures as plugin_failures
from tessera.backends._probe import ProbedBackend
from tessera.backends._proposals import PROPOSERS, Proposer, register_proposer
from tessera.backends._protocol import (
    BACKENDS,
    Backend,
    CacheFormat,
    Compiled,
    KeepsDecoderCache,
    NativeRunner,
    StatefulDecoder,
    Support,
    TensorSpec,
)
from tessera.backends._quantize import Calibration
from tessera.backends._regions import region_support
from tessera.backends._threads import PolicyName, ThreadPolicy, prepare_environment
from tessera.errors import BackendUnavailableError
from tessera.target import KINDS

__all__ = [
    "BACKENDS",
    "GROUP",
    "PROPOSERS",
    "Backend",
    "CacheFormat",
    "Calibration",
    "Compiled",
    "DeviceSettings",
    "KeepsDecoderCache",
    "NativeRunner",
    "PluginFailure",
    "PluginWarning",
    "PolicyName",
    "ProbedBackend",
    "Proposal",
    "Proposer",
    "StatefulDecoder",
    "Support",
    "TensorSpec",
    "ThreadPolicy",
    "for_all",
    "get",
    "load_plugins",
    "names",
    "plugin_failures",
    "prepare_environment",
    "random_inputs",
    "region_support",
    "register_proposer",
    "shapes_at",
]

del iree, onnxruntime, openvino, reference, tensorrt, torch, tvm

# a plugin's kind and backend are found by the same lookups as tessera's own
KINDS.add_loader(load_plugins)
BACKENDS.add_loader(load_plugins)


def get(kind: str) -> Backend:
    """The backend for a kind name or alias ('onnxruntime', 'ort', ...)."""
    name = KINDS.canonical_name(kind) or kind
    found = BACKENDS.find(name)
    if found is not None:
        return found
    failure = plugin_failures().get(name)
    if failure is not None:
        raise BackendUnavailableError(failure.message())
    if name in KINDS:
        raise BackendUnavailableError(
            f"target kind {name!r} is declared, but this version of tessera has no backend "
            f"implementation for it yet (implemented: {', '.join(BACKENDS.names())})"
        )
    return BACKENDS.get(name)


def names() -> list[str]:
    """Names of the implemented backends (plugins included), in registration order."""
    return BACKENDS.names()


def for_all() -> list[str]:
    """The backends `-t all` takes: each available one that says `in_all`, by `rank`."""
    chosen = [b for _, b in BACKENDS.items() if b.in_all]
    return [b.name for b in sorted(chosen, key=lambda b: b.rank) if b.is_available().ok]
