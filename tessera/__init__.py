"""tessera: compile one ONNX model across several inference backends.

`import tessera` is light: it registers target kinds and backends, and loads no backend
library; each one loads on first use.
"""

from __future__ import annotations

from tessera import (
    backends,
    errors,
)
from tessera._private.version import __version__
from tessera.config import CompilationConfig
from tessera.target import Target, TargetKind

__all__ = [
    "CompilationConfig",
    "Target",
    "TargetKind",
    "__version__",
    "backends",
    "compile",
    "errors",
    "load",
    "load_model",
    "partition",
]


def __getattr__(name: str) -> object:
    # The model layer imports onnx; load it on first use so `import tessera` stays light.
    if name == "load_model":
        from tessera.ir import load_model

        return load_model
    if name == "compile":
        from tessera.runtime import compile

        return compile
    if name == "load":
        from tessera.runtime import load

        return load
    if name == "partition":
        from tessera.runtime import partition

        return partition
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")
