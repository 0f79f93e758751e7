"""CompilationConfig: targets, host, executor, runtime and flow options, or several named
executors each with their own."""

from __future__ import annotations

from tessera._private.accuracy import AccuracyBudget
from tessera.config._config import (
    CompilationConfig,
    ConfigLike,
    NamedTarget,
    split_target_option,
)
from tessera.config._executors import ExecutorConfig
from tessera.config._options import (
    EXECUTORS,
    MEASURE_TIMEOUT_S,
    RUNTIMES,
    FlowOptions,
    OptionInfo,
    option_infos,
)

__all__ = [
    "EXECUTORS",
    "MEASURE_TIMEOUT_S",
    "RUNTIMES",
    "AccuracyBudget",
    "CompilationConfig",
    "ConfigLike",
    "ExecutorConfig",
    "FlowOptions",
    "NamedTarget",
    "OptionInfo",
    "option_infos",
    "split_target_option",
]
