"""Reference backend: onnx.reference.ReferenceEvaluator, the fallback that covers every op."""

from __future__ import annotations

from tessera.backends._availability import library_availability
from tessera.target import register_kind

KIND = register_kind(
    "reference",
    serves=("cpu",),
    doc="onnx.reference.ReferenceEvaluator: slow, complete, the fallback.",
    availability=library_availability("onnx", ("onnx",), "all"),
)
