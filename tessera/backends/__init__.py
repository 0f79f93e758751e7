"""Backends: one module each. Importing them registers their target kinds only; each
backend's library loads on first use."""

from __future__ import annotations

from tessera.backends import iree, onnxruntime, openvino, reference, tensorrt, torch, tvm

__all__ = ["iree", "onnxruntime", "openvino", "reference", "tensorrt", "torch", "tvm"]
