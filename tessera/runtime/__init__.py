"""Build and run: compile a plan's partitions and chain them."""

from __future__ import annotations

from tessera.runtime._artifact import FallbackWarning, load
from tessera.runtime._compiled import CompiledModel, build_partitions, compile
from tessera.runtime._place import partition

__all__ = ["CompiledModel", "FallbackWarning", "build_partitions", "compile", "load", "partition"]
