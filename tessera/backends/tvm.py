"""TVM backend: the Relax ONNX frontend built for llvm (or cuda)."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import AttrSpec, AttrType, register_kind


def _check_opt_level(value: int) -> str | None:
    return None if 0 <= value <= 3 else f"{value} is not an optimisation level between 0 and 3"


KIND = register_kind(
    "tvm",
    serves=("cpu", "cuda"),
    doc="Apache TVM Relax, untuned (slow on CPU; correctness only).",
    availability=library_availability("tvm", ("apache-tvm",), "tvm"),
    attrs=(
        AttrSpec("opt-level", AttrType.INT, 3, "Relax pass optimisation level",
                 check=_check_opt_level),
        AttrSpec("mcpu", AttrType.STR, doc="llvm -mcpu for generated code"),
        AttrSpec("num-threads", AttrType.INT, 0, "runtime threads (0: the plan decides)",
                 minimum=0),
    ),
)
