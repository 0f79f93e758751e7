"""ONNX Runtime backend: the CPU execution provider, and CUDA with the onnxruntime-gpu build."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind

KIND = register_kind(
    "onnxruntime",
    serves=("cpu", "cuda"),
    aliases=("ort",),
    doc="ONNX Runtime sessions (CPU EP; CUDA EP with onnxruntime-gpu).",
    availability=library_availability("onnxruntime", ("onnxruntime", "onnxruntime-gpu"), "all"),
    attrs=(
        AttrSpec("opt-level", AttrType.STR, "all", "graph optimisation level",
                 choices=("disable", "basic", "extended", "all")),
        AttrSpec("num-threads", AttrType.INT, 0, "intra-op threads (0: the plan decides)",
                 minimum=0),
        AttrSpec("spinning", AttrType.BOOL, False, "let idle pool threads spin"),
        AttrSpec("execution-mode", AttrType.STR, "sequential", "operator scheduling",
                 choices=("sequential", "parallel")),
    ),
)
