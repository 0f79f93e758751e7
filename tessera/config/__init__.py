"""CompilationConfig: targets, host, executor, runtime and flow options, or several named
executors each with their own."""

from __future__ import annotations

from tessera.config._accuracy import DEFAULT_BUDGET, AccuracyBudget, AccuracyReport, accuracy_of
from tessera.config._config import (
    CompilationConfig,
    ConfigLike,
    NamedTarget,
    split_target_option,
)
from tessera.config._executors import ExecutorConfig
from tessera.config._objective import Objective
from tessera.config._options import (
    EXECUTORS,
    MEASURE_TIMEOUT_S,
    RUNTIMES,
    FineSearch,
    FlowOptions,
    MeasureOn,
    ObjectiveName,
    OptionInfo,
    Partitioner,
    ThreadChoice,
    option_infos,
)
from tessera.config._shapes import DimProfile, ShapePoint, ShapeProfile

__all__ = [
    "DEFAULT_BUDGET",
    "EXECUTORS",
    "MEASURE_TIMEOUT_S",
    "RUNTIMES",
    "AccuracyBudget",
    "AccuracyReport",
    "CompilationConfig",
    "ConfigLike",
    "DimProfile",
    "ExecutorConfig",
    "FineSearch",
    "FlowOptions",
    "MeasureOn",
    "NamedTarget",
    "Objective",
    "ObjectiveName",
    "OptionInfo",
    "Partitioner",
    "ShapePoint",
    "ShapeProfile",
    "ThreadChoice",
    "accuracy_of",
    "option_infos",
    "split_target_option",
]
