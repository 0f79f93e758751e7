"""What runs on a Ray node: the measuring actor's class, plain Python (the compiling side
makes it a Ray actor, one per node, with `max_concurrency=1` so that two measurements never
share the node's cores). It needs tessera installed on the node, and no Ray import of its
own.

A model arrives once per node: its skeleton (a few hundred KB; the whole model where it has
no weights file) and, where the node's weights cache lacks the model's entry, the entry's
weights file, read from Ray's object store once. After that a candidate is a node mask: the
node extracts the submodel itself, as the local worker does. With `isolate`, measurements
run in the node's own worker process (`_worker`), so a backend that crashes or hangs costs
its candidate only and the actor lives on with its warm caches; without it they run in the
actor, whose crash Ray answers by restarting it."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from tessera import backends
from tessera._private.cache import atomic_write_bytes, cache_dir
from tessera._private.memory import trim
from tessera._private.text import first_line
from tessera.errors import TesseraError
from tessera.placement.measure._protocol import MeasureSettings, NodeJob, measure_points
from tessera.placement.measure._worker import MeasureWorker, Part
from tessera.placement.record._costdb import Cost, fingerprint, machine
from tessera.target import Target

if TYPE_CHECKING:
    from tessera.ir import Model, Weights

_R = TypeVar("_R")
CostRow = tuple[float | None, float, int, str | None, str | None]
_MODELS_KEPT = 4  # models whose skeletons a node keeps open


@dataclass(frozen=True)
class NodeRequest:
    """One candidate for a node to measure, as plain values: the loaded model's key, the
    candidate's mask, its target and device target as text, and the points' shapes."""

    key: str
    mask: int
    target: str
    points: list[dict[str, list[int]]]
    device: str | None = None


class NodeMeasurer:
    def __init__(self, isolate: bool, plugins: Sequence[str]) -> None:
        if plugins:  # test backends registered by hand reach the node's worker this way too
            os.environ["TESSERA_PLUGINS"] = ",".join(plugins)
        for module in plugins:
            importlib.import_module(module)
        backends.load_plugins()
        self.isolate = isolate
        self.worker = MeasureWorker() if isolate else None
        self.models: dict[str, tuple[str, Model, Weights | None]] = {}
        # the skeletons of models without a weights file, by their content's key: in the
        # cache, since a node's process may end without `close` (nothing left in /tmp)
        self._skeletons = cache_dir("node-models")

    def describe(self) -> dict[str, Any]:
        """The node's machine fingerprint (without a backend) and its process id."""
        return {"machine": machine(), "pid": os.getpid()}

    def fingerprint(self, kind: str) -> str:
        """The fingerprint this node's records of backend `kind` are kept under."""
        try:
            version = backends.get(kind).is_available().version
        except TesseraError:
            version = None
        return fingerprint(kind, version)

    def holds(self, key: str) -> bool:
        """Whether the model `key` is loaded here already."""
        return key in self.models

    def holds_weights(self, weights_key: str) -> bool:
        from tessera.ir import _weights

        found = _weights.held(weights_key)
        if found is None:
            return False
        found.close()
        return True

    def load(self, key: str, skeleton: bytes, weights_key: str | None,
             weights: bytes | None = None) -> None:
        """Keep the model `key`: its skeleton, referring to this node's copy of its weights
        (written from `weights` where the node has none)."""
        import onnx

        from tessera.ir import _weights, load_skeleton

        proto = onnx.load_from_string(skeleton)
        held = None
        if weights_key is not None:
            held = _weights.adopt(weights_key, weights) if weights is not None else \
                _weights.attach(cache_dir("weights") / weights_key)
            _weights.mark(proto, held.directory)
            path = held.skeleton(proto)
        else:
            path = self._skeletons / f"{key}.onnx"
            if not path.is_file():
                atomic_write_bytes(path, skeleton, durable=False)
        model = load_skeleton(path)
        self.models[key] = (str(path), model, held)
        while len(self.models) > _MODELS_KEPT:
            oldest = next(iter(self.models))
            _, _, weights_held = self.models.pop(oldest)
            if weights_held is not None:
                weights_held.close()

    def measure(self, request: NodeRequest, settings: Mapping[str, Any], timeout_s: float
                ) -> tuple[str, list[CostRow]]:
        """The candidate of the request: this node's fingerprint for its backend and one
        cost per point ([{}]: the model's own static shapes)."""
        found = self.models.get(request.key)
        measured = Target(request.target)
        fingerprint_here = self.fingerprint(measured.kind.name)
        if found is None:  # sent after the node restarted: the caller loads it again
            return fingerprint_here, [_row(Cost.failed(
                f"model {request.key} is not loaded here"))]
        path, model, _ = found
        ask = MeasureSettings(**settings)
        if self.worker is not None:
            costs = self.worker.measure_points(Part(path, request.mask), request.target, ask,
                                               request.points, timeout_s,
                                               device=request.device)
        else:
            device = None if request.device is None else Target(request.device)
            costs = _in_process(model, request.mask, measured, ask, request.points, device)
            trim()
        return fingerprint_here, [_row(c) for c in costs]

    def run(self, key: str, job: NodeJob[_R]) -> _R:
        """`job` on the loaded model `key` (the end-to-end race and the guard, which build
        with the compiling side's builder class, constructed here). It runs in the actor:
        a backend that crashes it costs the job, which Ray answers by restarting the
        actor."""
        found = self.models.get(key)
        if found is None:  # sent after the node restarted: the caller loads it again
            raise TesseraError(f"model {key} is not loaded here")
        _, model, _ = found
        try:
            return job(model)
        finally:
            trim()  # the builds go with the race

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        for _, _, held in self.models.values():
            if held is not None:
                held.close()
        self.models.clear()


def _in_process(model: Model, mask: int, target: Target, settings: MeasureSettings,
                points: list[dict[str, list[int]]], device: Target | None) -> list[Cost]:
    from tessera.ir import extract_submodel

    try:
        submodel = extract_submodel(model, mask)
    except TesseraError as err:
        return [Cost.failed(first_line(err))] * len(points)
    return measure_points(submodel, target, settings, points, device=device)


def _row(cost: Cost) -> CostRow:
    return (cost.ms, cost.spread, cost.samples, cost.invalid, cost.fault)


__all__ = ["CostRow", "NodeMeasurer", "NodeRequest"]
