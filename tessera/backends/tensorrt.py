"""TensorRT backend (CUDA only). Declared so configs can name it; it needs a CUDA machine with
`pip install tensorrt`, so it is not part of the CPU extras."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind

KIND = register_kind(
    "tensorrt",
    serves=("cuda",),
    aliases=("trt",),
    doc="NVIDIA TensorRT engines (CUDA only).",
    availability=library_availability("tensorrt", ("tensorrt", "tensorrt-cu12"), None),
    attrs=(
        AttrSpec("precision", AttrType.STR, "fp32", "engine precision",
                 choices=("fp32", "fp16", "int8")),
        AttrSpec("workspace-bytes", AttrType.INT, 1 << 30, "builder workspace limit", minimum=1),
        AttrSpec("builder-opt-level", AttrType.INT, 3, "builder optimisation level", minimum=0),
        AttrSpec("timing-cache", AttrType.STR, doc="timing-cache file", tuning=False),
    ),
)
