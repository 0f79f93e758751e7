"""PyTorch backend: ONNX nodes converted to torch operations by tessera's own converter."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind

KIND = register_kind(
    "torch",
    serves=("cpu", "cuda"),
    aliases=("pytorch",),
    doc="PyTorch eager, or torch.compile with -compile.",
    availability=library_availability("torch", ("torch",), "torch"),
    attrs=(
        AttrSpec("compile", AttrType.BOOL, False, "wrap the module in torch.compile"),
        AttrSpec("compile-mode", AttrType.STR, "default", "torch.compile mode",
                 choices=("default", "reduce-overhead", "max-autotune")),
        AttrSpec("num-threads", AttrType.INT, 0, "intra-op threads (0: the plan decides)",
                 minimum=0),
    ),
)
