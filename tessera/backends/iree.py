"""IREE backend: ONNX import, compiled for llvm-cpu (or cuda) and run by the IREE runtime."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind

KIND = register_kind(
    "iree",
    serves=("cpu", "cuda"),
    doc="IREE compiler and runtime (llvm-cpu; cuda when present).",
    availability=library_availability("iree.compiler", ("iree-base-compiler",), "iree"),
    attrs=(
        AttrSpec("opt-level", AttrType.STR, "O2", "compiler optimisation level",
                 choices=("O0", "O1", "O2", "O3")),
        AttrSpec("cpu-features", AttrType.STR, "host", "llvm-cpu target CPU ('host': this one)"),
        AttrSpec("num-threads", AttrType.INT, 0, "task-system workers (0: the plan decides)",
                 minimum=0),
    ),
)
