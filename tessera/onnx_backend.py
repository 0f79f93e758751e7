"""tessera as a standard ONNX backend (`onnx.backend.base.Backend`), like
`onnxruntime.backend`, so `onnx.backend.test.BackendTest` runs over it.

    import tessera.onnx_backend as backend
    rep = backend.prepare(model, config="openvino,onnxruntime")
    outputs = rep.run([x])

`TesseraBackend.configured(config, **options)` gives a backend class bound to one config,
for test runners that take a class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.runtime import CompiledModel

__all__ = ["TesseraBackend", "TesseraRep", "prepare", "run_model", "run_node",
           "supports_device"]


class TesseraRep(BackendRep):
    def __init__(self, compiled: CompiledModel) -> None:
        self.compiled = compiled

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        import numpy as np

        names = [s.name for s in self.compiled.inputs]
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = dict(zip(names, values, strict=False))
        outputs = self.compiled.run(feeds)
        result: tuple[np.ndarray, ...] = namedtupledict("Outputs", list(outputs))(
            *outputs.values())
        return result


class TesseraBackend(Backend):
    config: ClassVar[Any] = "onnxruntime"
    options: ClassVar[dict[str, Any]] = {}

    @classmethod
    def configured(cls, config: Any, **options: Any) -> type[TesseraBackend]:
        name = f"TesseraBackend[{config}]"
        return type(name, (cls,), {"config": config, "options": dict(options)})

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any
                ) -> TesseraRep:
        from tessera.runtime import compile as tessera_compile

        if not cls.supports_device(device):
            raise RuntimeError(f"tessera's ONNX backend runs on CPU, not {device}")
        config = kwargs.pop("config", cls.config)
        options = {**cls.options, **kwargs}
        return TesseraRep(tessera_compile(model, config, **options))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        raise NotImplementedError("tessera compiles whole models; use run_model")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return bool(Device(device).type == DeviceType.CPU)


prepare = TesseraBackend.prepare
run_model = TesseraBackend.run_model
run_node = TesseraBackend.run_node
supports_device = TesseraBackend.supports_device
