"""Measuring on the nodes of a Ray cluster: the flow options measure=ray, ray-address and
measure-on. The nodes that match measure-on (a node label KEY=VALUE, a custom resource of
that name, or a machine fingerprint) each get one long-lived measuring actor
(`_ray_node.NodeMeasurer`, pinned to its node, `max_concurrency=1`, restarted by Ray when it
dies); candidates are handed to whichever is free, so N nodes measure N at a time.

A model is shipped once per node (its skeleton, and its weights file through the object
store where the node's cache lacks it); a candidate is then a mask. Each answer carries the
measuring node's fingerprint, under which its record is kept: the build machine's search
prices candidates with the records of the matching nodes' fingerprints.

Faults: a backend that crashes or hangs on a node costs its candidate (the node's worker
process, or its restarted actor); a node that leaves the cluster has its candidate sent to
another matching node (at most `MOVES` times); with every matching node gone, a
`MeasuringError` ends the compile, and what was measured stays in the cost database."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar, cast

from tessera.config import MEASURE_TIMEOUT_S
from tessera.errors import ConfigError, MeasuringError
from tessera.ir import Model, NodeSet
from tessera.placement.measure._local import _MIXED, LocalMeasurer
from tessera.placement.measure._protocol import Job, Measured, MeasureSettings, NodeJob, Point
from tessera.placement.measure._ray_node import NodeMeasurer, NodeRequest
from tessera.placement.record._costdb import Cost
from tessera.target import Target

_R = TypeVar("_R")

MOVES = 2  # a candidate whose node left is sent on at most this many times
RACE_TIMEOUTS = 10  # a race on a node may take this many measuring timeouts
RESTARTS = 16  # an actor that died (its backend crashed it) is restarted by Ray this often
GRACE_S = 60.0  # beyond the node's own timeout (and a model's first shipping) until hung
_POLL_S = 1.0
_MODELS_KEPT = 8


@dataclass(frozen=True)
class _Shipped:
    """A model as the nodes receive it: its name there, its skeleton in the object store,
    its weights entry's key and file (None: the skeleton holds every weight)."""

    key: str
    skeleton: Any
    weights_key: str | None
    weights_file: str | None


@dataclass(eq=False)
class _Node:
    node_id: str
    actor: Any
    machine: str
    loaded: set[str] = field(default_factory=set)
    fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.machine} (node {self.node_id[:8]})"


class _Pool:
    """One cluster's measuring actors on the nodes that match one selector."""

    def __init__(self, ray: Any, selector: str | None, isolate: bool,
                 plugins: tuple[str, ...]) -> None:
        self.ray, self.selector, self.isolate, self.plugins = ray, selector, isolate, plugins
        self.nodes: dict[str, _Node] = {}
        self.others: set[str] = set()  # nodes checked and found not to match
        self.left: list[str] = []  # nodes that left the cluster, by name
        self.models: OrderedDict[int, tuple[Model, _Shipped]] = OrderedDict()
        self.weights: dict[str, Any] = {}  # weights key -> the file's bytes in the store
        self.tally: Counter[str] = Counter()  # measurements per node machine
        self.lock = threading.Lock()  # one search at a time drives the pool

    def refresh(self) -> list[_Node]:
        """The matching nodes' actors: one started on each new matching node, the nodes
        that left dropped."""
        alive = {n["NodeID"]: n for n in self.ray.nodes() if n.get("Alive")}
        for node_id in [i for i in self.nodes if i not in alive]:
            self.left.append(self.nodes.pop(node_id).name)
        new = [i for i, info in alive.items() if i not in self.nodes and i not in self.others
               and _matches(info, self.selector)]
        self.others.update(i for i in alive if i not in self.nodes and i not in new)
        for node in self._started(new):  # all at once: each imports tessera and its backends
            if self.selector is not None and "=" not in self.selector and \
                    node.machine != self.selector:
                self.ray.kill(node.actor, no_restart=True)
                self.others.add(node.node_id)
                continue
            self.nodes[node.node_id] = node
        return list(self.nodes.values())

    def _started(self, node_ids: list[str]) -> list[_Node]:
        """A measuring actor started on each node, in node order; a node whose actor does
        not start (it went, or cannot import tessera) is left out."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actors = [self.ray.remote(NodeMeasurer).options(
            num_cpus=0, max_concurrency=1, max_restarts=RESTARTS, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(self.isolate, list(self.plugins)) for node_id in node_ids]
        asked = [actor.describe.remote() for actor in actors]
        started = []
        for node_id, actor, answer in zip(node_ids, actors, asked, strict=True):
            try:
                described = self.ray.get(answer, timeout=GRACE_S)
            except Exception:  # not a node to measure on
                with contextlib.suppress(Exception):
                    self.ray.kill(actor, no_restart=True)
                self.others.add(node_id)
                continue
            started.append(_Node(node_id, actor, str(described["machine"])))
        return started

    def drop(self, node: _Node) -> None:
        if self.nodes.pop(node.node_id, None) is not None:
            self.left.append(node.name)
        with contextlib.suppress(Exception):
            self.ray.kill(node.actor, no_restart=True)

    def shipped(self, model: Model) -> _Shipped:
        found = self.models.get(id(model))
        if found is not None and found[0] is model:
            self.models.move_to_end(id(model))
            return found[1]
        skeleton = model.proto.SerializeToString()
        key = hashlib.sha1(skeleton, usedforsecurity=False).hexdigest()[:24]
        weights = model.weights
        shipped = _Shipped(key, self.ray.put(skeleton),
                           None if weights is None else weights.key,
                           None if weights is None else str(weights.path))
        self.models[id(model)] = (model, shipped)
        while len(self.models) > _MODELS_KEPT:
            self.models.popitem(last=False)
        return shipped

    def load(self, node: _Node, shipped: _Shipped) -> None:
        """The model onto the node, once: its weights file from the object store only where
        the node's weights cache lacks it (a node on this machine shares its cache)."""
        if shipped.key in node.loaded:
            return
        weights = None
        if shipped.weights_key is not None and not self.ray.get(
                node.actor.holds_weights.remote(shipped.weights_key), timeout=GRACE_S):
            weights = self.weights.get(shipped.weights_key)
            if weights is None:
                assert shipped.weights_file is not None
                with open(shipped.weights_file, "rb") as handle:
                    weights = self.weights[shipped.weights_key] = self.ray.put(handle.read())
        # the actor runs its calls in order: this load comes before the measurements
        node.actor.load.remote(shipped.key, shipped.skeleton, shipped.weights_key, weights)
        node.loaded.add(shipped.key)

    def fingerprint(self, node: _Node, kind: str) -> str:
        if kind not in node.fingerprints:
            node.fingerprints[kind] = str(self.ray.get(node.actor.fingerprint.remote(kind),
                                                       timeout=GRACE_S))
        return node.fingerprints[kind]


def _matches(info: Mapping[str, Any], selector: str | None) -> bool:
    """Whether a node (an entry of `ray.nodes()`) is one to measure on: every node without a
    selector, a label or custom resource KEY=VALUE, or (checked once its actor reports it)
    a machine fingerprint."""
    if selector is None or "=" not in selector:
        return True
    key, _, value = selector.partition("=")
    labels = info.get("Labels") or {}
    resources = info.get("Resources") or {}
    return labels.get(key.strip()) == value.strip() or resources.get(selector, 0) > 0


_pools: dict[tuple[str | None, str | None, bool, tuple[str, ...]], _Pool] = {}
_connected: list[str | None] = []
_pools_lock = threading.Lock()


def _pool(address: str | None, selector: str | None, isolate: bool) -> _Pool:
    try:
        import ray
    except ImportError:
        raise ConfigError("option measure=ray needs Ray, which is not installed here: "
                          "pip install 'tessera[ray]'") from None
    with _pools_lock:
        if not _connected:
            try:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                         logging_level=logging.ERROR, configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"at {address}" if address else "on this machine"
                raise ConfigError(
                    f"cannot reach a Ray cluster {where}: {err}; start its head node with "
                    "`ray start --head` (see docs/distributed.md) or fix option "
                    "ray-address") from None
            _connected.append(address)
        elif address is not None and _connected[0] != address:
            raise ConfigError(f"option ray-address={address}: this process measures on the Ray "
                              f"cluster at {_connected[0] or 'this machine'} already; one "
                              "process talks to one cluster")
        # modules the nodes import first (TESSERA_PLUGINS: backends registered by hand)
        plugins = tuple(m.strip() for m in os.environ.get("TESSERA_PLUGINS", "").split(",")
                        if m.strip())
        key = (address, selector, isolate, plugins)
        if key not in _pools:
            _pools[key] = _Pool(ray, selector, isolate, plugins)
        return _pools[key]


def disconnect() -> None:
    """Stop every measuring actor and leave the cluster (the next Ray measurement connects
    again, to the address it names)."""
    with _pools_lock:
        if not _connected:
            return
        import ray

        for pool in _pools.values():
            for node in pool.nodes.values():
                with contextlib.suppress(Exception):
                    ray.kill(node.actor, no_restart=True)
        _pools.clear()
        _connected.clear()
        ray.shutdown()


@dataclass(frozen=True)
class RayMeasurer:
    """Measures on the Ray nodes that match `measure_on` (`_matches`), a candidate per
    node at a time. The cost is what the node measured; its record is kept under the
    node's fingerprint."""

    address: str | None = None
    measure_on: str | None = None
    isolate: bool = True
    timeout_s: float = MEASURE_TIMEOUT_S
    settings: MeasureSettings = field(default_factory=MeasureSettings)
    devices: tuple[Target, ...] = ()

    @classmethod
    def connect(cls, address: str | None, measure_on: str | None, *, isolate: bool = True,
                timeout_s: float = MEASURE_TIMEOUT_S, devices: tuple[Target, ...] = ()
                ) -> RayMeasurer:
        """For the cluster at `address` (None: `RAY_ADDRESS`, else a Ray instance started on
        this machine), connected when it first measures (a remembered plan needs no
        cluster), as are the nodes looked up."""
        return cls(address, measure_on, isolate, timeout_s, devices=devices)

    @property
    def pool(self) -> _Pool:
        return _pool(self.address, self.measure_on, self.isolate)

    def _here(self) -> LocalMeasurer:
        return LocalMeasurer(False, self.timeout_s, self.settings, self.devices)

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        ((_, measured),) = self.measure_all([Job(model, mask, target)])
        return measured.costs[0]

    def at_points(self, model: Model, mask: NodeSet, target: Target,
                  points: Sequence[Point]) -> list[Cost]:
        ((_, measured),) = self.measure_all([Job(model, mask, target, tuple(points))])
        return list(measured.costs)

    def bounded(self, give_up_ms: float) -> RayMeasurer:
        return replace(self, settings=replace(self.settings, give_up_ms=give_up_ms))

    def built_for(self, target: Target) -> Target:
        return self._here().built_for(target)

    points_in_one_compile = True

    @property
    def measures_here(self) -> bool:
        return False

    def tally(self) -> dict[str, int]:
        """Measurements made so far, by the machine fingerprint of the node."""
        return dict(self.pool.tally)

    def fingerprints(self, target: Target) -> tuple[str, ...]:
        with self.pool.lock:
            nodes = self._nodes(0, 0)
            return tuple(dict.fromkeys(self.pool.fingerprint(n, target.kind.name)
                                       for n in nodes))

    def _nodes(self, done: int, total: int) -> list[_Node]:
        nodes = self.pool.refresh()
        if nodes:
            return nodes
        selector = self.pool.selector
        wanted = f"matching measure-on={selector}" if selector else "at all"
        if self.pool.left:
            kept = f"; the {done} of {total} measured are kept in the cost database, and the " \
                   "next compile measures only the rest" if total else ""
            raise MeasuringError(
                f"every Ray node {wanted} left the cluster while measuring (lost: "
                f"{', '.join(self.pool.left)}){kept}; start one again (see "
                "docs/distributed.md) and compile again")
        how = f'ray start --address=HEAD:6379 --labels "{selector}"' if selector and \
            "=" in selector else "ray start --address=HEAD:6379"
        raise MeasuringError(f"no Ray node {wanted} is in the cluster; start one on the "
                             f"machine to measure on with `{how}`")

    def measure_all(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
        """Each job on a free matching node, in order; answers in the order they come."""
        with self.pool.lock:
            yield from self._dispatch(jobs)

    def _dispatch(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
        ray = self.pool.ray
        queue = deque(range(len(jobs)))
        moved: Counter[int] = Counter()
        running: dict[Any, tuple[int, _Node, float]] = {}
        hung: set[int] = set()
        done = 0
        nodes = self._nodes(done, len(jobs)) if jobs else []
        while queue or running:
            busy = {node.node_id for _, node, _ in running.values()}
            for node in nodes:
                if queue and node.node_id not in busy and node.node_id in self.pool.nodes:
                    index = queue.popleft()
                    try:
                        ref = self._submit(node, jobs[index])
                    except ray.exceptions.RayError:  # the node failed while given the model
                        node.loaded.clear()
                        if not self._still_there(node):
                            self.pool.drop(node)
                        moved[index] += 1
                        if moved[index] <= MOVES:
                            queue.appendleft(index)
                            continue
                        done += 1
                        yield index, Measured(_failed(jobs[index], Cost.failed(
                            f"lost: {node.name} failed while it was sent the model",
                            "crashed")), node.fingerprints.get(jobs[index].target.kind.name))
                        continue
                    running[ref] = (index, node, time.monotonic())
            ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                index, node, _ = running.pop(ref)
                answer = self._answer(ref, node, jobs[index], index in hung)
                if answer is None:  # its node left: another one measures it
                    moved[index] += 1
                    if moved[index] <= MOVES:
                        queue.appendleft(index)
                        continue
                    answer = Measured(_failed(jobs[index], Cost.failed(
                        f"lost: the node measuring it left the cluster {moved[index]} times",
                        "crashed")), node.fingerprints.get(jobs[index].target.kind.name))
                done += 1
                yield index, answer
            now = time.monotonic()
            for index, node, began in running.values():
                limit = self.timeout_s * max(1, len(jobs[index].points)) + GRACE_S
                if index not in hung and now - began > limit:  # the node's own timeout failed
                    hung.add(index)
                    ray.kill(node.actor, no_restart=False)  # restarted: its answer is an error
            if queue and (ready or not running):
                nodes = self._nodes(done, len(jobs))

    def _submit(self, node: _Node, job: Job) -> Any:
        target = _MIXED.apply(job.target, self._here().device(job.target))
        device = self._here().device(job.target)
        shipped = self.pool.shipped(job.model)
        self.pool.load(node, shipped)
        self.pool.fingerprint(node, job.target.kind.name)  # known, should the node fail
        points = [{n: [int(d) for d in s] for n, s in p.items()} for p in job.points] or [{}]
        request = NodeRequest(shipped.key, job.mask, str(target), points,
                              None if device is None else str(device))
        return node.actor.measure.remote(request, asdict(self.settings), self.timeout_s)

    def _answer(self, ref: Any, node: _Node, job: Job, hung: bool) -> Measured | None:
        """The node's answer; None when the node left the cluster with the job."""
        ray = self.pool.ray
        try:
            finger, rows = ray.get(ref)
        except ray.exceptions.RayActorError as err:
            node.loaded.clear()  # a restarted actor holds no model
            if not self._still_there(node):
                self.pool.drop(node)
                return None
            if hung:
                why = Cost.failed(f"hung: no result within {self.timeout_s:g} s on "
                                  f"{node.name} (its actor was restarted)", "hung")
            else:
                why = Cost.failed(f"crashed: the measuring actor on {node.name} died "
                                  f"({_first(err)})", "crashed")
            return Measured(_failed(job, why), node.fingerprints.get(job.target.kind.name))
        except ray.exceptions.RayError as err:
            return Measured(_failed(job, Cost.failed(f"failed on {node.name}: {_first(err)}")),
                            node.fingerprints.get(job.target.kind.name))
        self.pool.tally[node.machine] += 1
        return Measured(tuple(Cost(*row) for row in rows), str(finger))

    def run_on_node(self, model: Model, job: NodeJob[_R]) -> _R | str:
        """`job` (the race and the guard, `judge._remote`) on a matching node; a node that
        fails or leaves hands it to the next, at most `MOVES` more. Why none answered,
        instead."""
        ray = self.pool.ray
        reasons: list[str] = []
        with self.pool.lock:
            try:
                nodes = self._nodes(0, 0)
            except MeasuringError as err:
                return str(err)
            for node in nodes[:1 + MOVES]:
                try:
                    shipped = self.pool.shipped(model)
                    self.pool.load(node, shipped)
                    ref = node.actor.run.remote(shipped.key, job)
                    answer = ray.get(ref, timeout=self.timeout_s * RACE_TIMEOUTS + GRACE_S)
                except Exception as err:  # the node or its actor failed: the next one
                    if isinstance(err, ray.exceptions.GetTimeoutError):
                        ray.kill(node.actor, no_restart=False)  # hung: restarted
                    node.loaded.clear()
                    reasons.append(f"{node.name}: {_first(err)}")
                    if not self._still_there(node):
                        self.pool.drop(node)
                    continue
                return cast(_R, answer)
        return "the measuring nodes failed (" + "; ".join(reasons) + ")"

    def _still_there(self, node: _Node) -> bool:
        """Whether the node is in the cluster with its actor (restarted where it died)."""
        ray = self.pool.ray
        try:
            ray.get(node.actor.describe.remote(), timeout=GRACE_S)
        except Exception:  # died for good: its node left, or it crashed once too often
            return False
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        return node.node_id in alive


def _failed(job: Job, cost: Cost) -> tuple[Cost, ...]:
    return (cost,) * max(1, len(job.points))


def _first(err: BaseException) -> str:
    from tessera._private.text import first_line

    return first_line(err, 200)


__all__ = ["GRACE_S", "MOVES", "RayMeasurer", "disconnect"]
