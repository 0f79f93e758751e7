"""The model layer: load ONNX, a dataflow view with convexity, submodels, structural hashes,
the IR verifier, and the user's samples of inputs."""

from __future__ import annotations

from tessera.ir._constant import constant_tensor
from tessera.ir._external import inline as inline_weights
from tessera.ir._graph import DataflowGraph, NodeSet, ValueType, bits, members
from tessera.ir._graph import value_type_of as value_type
from tessera.ir._model import (
    Model,
    extract_submodel,
    load_model,
    load_skeleton,
    structural_hash,
)
from tessera.ir._regions import REGION_DOMAIN, ValueKind, cuttable, region_function, value_kind
from tessera.ir._samples import Sample, Samples, SampleSource
from tessera.ir._verify import verify_model
from tessera.ir._weights import Weights

__all__ = [
    "REGION_DOMAIN",
    "DataflowGraph",
    "Model",
    "NodeSet",
    "Sample",
    "SampleSource",
    "Samples",
    "ValueKind",
    "ValueType",
    "Weights",
    "bits",
    "constant_tensor",
    "cuttable",
    "extract_submodel",
    "inline_weights",
    "load_model",
    "load_skeleton",
    "members",
    "region_function",
    "structural_hash",
    "value_kind",
    "value_type",
    "verify_model",
]
