"""The typed error hierarchy. Every error tessera raises on purpose is a `TesseraError`.

Messages name what is wrong, where, and how to fix it. Value-like errors also derive from
`ValueError` so that callers catching the standard type keep working.
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "BackendUnavailableError",
    "CacheWarning",
    "CompileError",
    "ConfigError",
    "DeviceUnavailableError",
    "ExecutionError",
    "InputError",
    "InterruptedCompile",
    "MeasuringError",
    "ModelError",
    "PartitionError",
    "RegistryError",
    "TargetError",
    "TesseraError",
]


class TesseraError(Exception):
    """Base of every error tessera raises on purpose."""


class RegistryError(TesseraError, KeyError):
    """An unknown name was looked up in a registry (kinds, tags, backends, ...)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TargetError(TesseraError, ValueError):
    """A target string, dict or JSON is malformed or inconsistent."""


class ConfigError(TesseraError, ValueError):
    """A CompilationConfig cannot be built from what was given."""


class ModelError(TesseraError, ValueError):
    """An ONNX model cannot be loaded, checked or used."""


class BackendUnavailableError(TesseraError, RuntimeError):
    """A backend's library is not installed; the message names the pip extra."""


class DeviceUnavailableError(BackendUnavailableError):
    """A device the config (or a pin) asks for has no backend on this machine to serve it;
    the message names the device, the nodes that needed it, and what would serve it. The
    config itself stays valid: it may describe another machine."""


class CompileError(TesseraError, RuntimeError):
    """A backend failed to compile a subgraph."""


class ExecutionError(TesseraError, RuntimeError):
    """A backend failed while running a subgraph."""


class InputError(TesseraError, ValueError):
    """Inputs given to `run` do not match what the model expects."""


class PartitionError(TesseraError, RuntimeError):
    """No valid placement exists for the model under the given config."""


class MeasuringError(TesseraError, RuntimeError):
    """Candidates could not be measured where the flow options ask: no Ray node matches
    measure-on, or every matching node left the cluster (what they measured is kept)."""


class ArtifactError(TesseraError, ValueError):
    """A saved artifact is corrupt, from another format version, or needs a backend (or a
    backend version) this machine does not have."""


class InterruptedCompile(TesseraError, KeyboardInterrupt):
    """A compile interrupted (Ctrl-C) where no plan could be kept: outside the search, or a
    second time while the plan kept after the first was being built. It is a
    KeyboardInterrupt too, so code that stops on one stops on it."""


class CacheWarning(UserWarning):
    """A cache (the cost database) was unreadable or of an older layout and was rebuilt; the
    old file is kept beside it."""
