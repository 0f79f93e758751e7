"""Build and run: compile a plan's partitions, chain them, save and load artifacts."""

from __future__ import annotations

from tessera.runtime._artifact import FallbackWarning, load
from tessera.runtime._compiled import (
    CompiledModel,
    RuntimeBuilder,
    build_partitions,
    compile,
    partition,
)

__all__ = ["CompiledModel", "FallbackWarning", "RuntimeBuilder", "build_partitions", "compile",
           "load", "partition"]
