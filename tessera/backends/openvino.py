"""OpenVINO backend: models read from ONNX and compiled for the CPU plugin."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind

KIND = register_kind(
    "openvino",
    serves=("cpu",),
    aliases=("ov",),
    doc="OpenVINO runtime, CPU plugin.",
    availability=library_availability("openvino", ("openvino",), "openvino"),
    attrs=(
        AttrSpec("num-threads", AttrType.INT, 0, "inference threads (0: the plan decides)",
                 minimum=0),
        AttrSpec("precision", AttrType.STR, "f32", "inference precision hint",
                 choices=("f32", "bf16", "f16")),
        AttrSpec("performance-hint", AttrType.STR, "latency", "OpenVINO performance mode",
                 choices=("latency", "throughput")),
        AttrSpec("num-streams", AttrType.INT, 1, "parallel inference streams", minimum=1),
        AttrSpec("cache-dir", AttrType.STR, doc="compiled-blob cache directory", tuning=False),
    ),
)
