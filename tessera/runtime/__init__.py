"""Build and run: compile a plan's partitions, chain them, save and load artifacts."""

from __future__ import annotations

from tessera.config._options import EXECUTOR_CLASSES, RUNTIME_CLASSES
from tessera.runtime._artifact import FallbackWarning
from tessera.runtime._compiled import (
    CompiledModel,
    RuntimeBuilder,
    build_partitions,
    compile,
    partition,
)
from tessera.runtime._executor import GraphExecutor
from tessera.runtime._generate import DecoderLayout, GenerateResult, generate
from tessera.runtime._loading import load

__all__ = ["CompiledModel", "DecoderLayout", "FallbackWarning", "GenerateResult",
           "RuntimeBuilder", "build_partitions", "compile", "generate", "load", "partition"]

# the code of the executor and the runtime config names (tessera.config.EXECUTORS, RUNTIMES)
EXECUTOR_CLASSES.register("graph", GraphExecutor)
RUNTIME_CLASSES.register("python", CompiledModel)
