"""Build and run: compile a plan's partitions, chain them, save and load artifacts."""

from __future__ import annotations

from tessera.runtime._artifact import FallbackWarning
from tessera.runtime._compiled import (
    CompiledModel,
    RuntimeBuilder,
    build_partitions,
    compile,
    partition,
)
from tessera.runtime._loading import load

__all__ = ["CompiledModel", "FallbackWarning", "RuntimeBuilder", "build_partitions", "compile",
           "load", "partition"]
