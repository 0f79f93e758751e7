"""The model layer: load ONNX, a dataflow view with convexity, submodels, structural hashes."""

from __future__ import annotations

from tessera.ir._graph import DataflowGraph, NodeSet, ValueType, bits, members
from tessera.ir._model import Model, extract_submodel, load_model, structural_hash

__all__ = [
    "DataflowGraph",
    "Model",
    "NodeSet",
    "ValueType",
    "bits",
    "extract_submodel",
    "load_model",
    "members",
    "structural_hash",
]
