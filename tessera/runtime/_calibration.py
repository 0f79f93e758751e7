"""Calibration data for a partition: the values that flow into it when the fp32 model runs
on the calibration samples. A static int8 form is calibrated on what its partition really
receives, so the model runs once with those values added as outputs (ONNX Runtime, else the
reference), only on a compile that quantizes, and each value is kept for the compile."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tessera import backends
from tessera.backends._quantize import DigestedCalibration
from tessera.errors import TesseraError
from tessera.ir import Model, Samples

if TYPE_CHECKING:
    import numpy as np
    import onnx


class Activations:
    """The model's values on the calibration half of `samples` (its first `count`
    samples, where given), computed on demand."""

    def __init__(self, model: Model, samples: Samples, count: int | None = None) -> None:
        self.model = model
        self.samples = samples.split(count)[0]
        self._values: dict[str, list[np.ndarray]] = {}

    def of(self, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        """One dict per calibration sample, holding `names`."""
        missing = [n for n in names if n not in self._values]
        if missing:
            self._compute(missing)
        return [{n: self._values[n][i] for n in names} for i in range(len(self.samples))]

    def for_partition(self, inputs: Sequence[str]) -> PartitionCalibration:
        return PartitionCalibration(self, tuple(inputs))

    def _compute(self, names: list[str]) -> None:
        feeds = [dict(s) for s in self.samples]
        graph_inputs = [n for n in names if feeds and n in feeds[0]]
        for name in graph_inputs:
            self._values[name] = [f[name] for f in feeds]
        inner = [n for n in names if n not in graph_inputs]
        if not inner:
            return
        proto = _with_outputs(self.model, inner)
        runner = None
        for kind in ("onnxruntime", "reference"):
            backend = backends.get(kind)
            if backend.is_available().ok:
                try:
                    runner = backend.compile(proto, check=False)
                    break
                except TesseraError:
                    continue
        if runner is None:  # the reference runs every model tessera loads
            runner = backends.get("reference").compile(proto, check=False)
        results = [runner.run(feed) for feed in feeds]
        for name in inner:
            self._values[name] = [r[name] for r in results]


class PartitionCalibration(DigestedCalibration):
    """A partition's calibration samples, computed the first time they are read. `digest`
    names them without computing them: the model, the samples and the values' names fix
    them, so a warm compile that finds the int8 form in its cache runs nothing."""

    def __init__(self, activations: Activations, inputs: tuple[str, ...]) -> None:
        self._activations = activations
        self._inputs = inputs
        self._items: list[dict[str, np.ndarray]] | None = None
        self.digest = "|".join((activations.model.content_digest,
                                activations.samples.digest, *inputs))

    def _all(self) -> list[dict[str, np.ndarray]]:
        if self._items is None:
            self._items = self._activations.of(self._inputs)
        return self._items

    def __len__(self) -> int:
        return len(self._activations.samples)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        return self._all()[index]

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self._all())


def _with_outputs(model: Model, names: list[str]) -> onnx.ModelProto:
    """The model with `names` as extra graph outputs."""
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    types = model.dataflow.value_types
    present = {o.name for o in proto.graph.output}
    for name in names:
        if name in present:
            continue
        value_type = types.get(name)
        elem = value_type.elem_type if value_type is not None and value_type.elem_type else \
            onnx.TensorProto.FLOAT
        proto.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
    return proto


__all__ = ["Activations", "PartitionCalibration"]
