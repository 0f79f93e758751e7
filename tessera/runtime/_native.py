"""Each backend run natively on the whole model: its own library with its own defaults, no
tessera in between. This is the baseline that `tessera bench` and `bench/` compare with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tessera import backends
from tessera.backends._threads import ThreadPolicy
from tessera.target import Target

Runner = Callable[[Mapping[str, np.ndarray]], Any]


def native_runner(backend: str, model: bytes) -> Runner:
    """A callable running `model` with `backend`'s library as its users would call it."""
    if backend == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, dict(feeds))
    if backend == "openvino":
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(core.read_model(model), "CPU")
        request = compiled.create_infer_request()
        return lambda feeds: request.infer(dict(feeds), share_inputs=True)
    # torch, iree, tvm and the reference have no ONNX runtime of their own: their tessera
    # backend alone, with the library's own thread settings, is the native way to run it
    import onnx

    target = ThreadPolicy.for_partitions(1).apply(Target(backend))
    compiled = backends.get(backend).compile(onnx.load_from_string(model), target)
    return compiled.run


__all__ = ["native_runner"]
