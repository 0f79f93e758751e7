"""Measuring in a worker process. A backend may segfault, abort, hang or run out of memory on
a candidate; in the worker that costs the candidate only (it is marked invalid with the
reason) and the worker is restarted. One worker serves all the candidates of a process, so
there is no process-per-measurement tax.

A candidate of a loaded model crosses the pipe as a `Part`: the path of the model's skeleton
(saved beside its weights file) and the candidate's node mask. The worker opens each skeleton
once, extracts the submodel itself, and its backends read the weights from the file: no
weight crosses the pipe, and none is parsed twice.

Backends of installed plugins (the `tessera.backends` entry points) load in the worker as in
the caller; others registered by hand (test backends) reach it through `TESSERA_PLUGINS`: a
comma-separated list of modules the worker imports first."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import signal
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tessera._private.memory import trim
from tessera._private.text import first_line
from tessera.config import MEASURE_TIMEOUT_S
from tessera.errors import TesseraError
from tessera.placement.measure._protocol import MeasureSettings, measure_points
from tessera.placement.record._costdb import Cost
from tessera.target import Target

if TYPE_CHECKING:
    import onnx

    from tessera.ir import Model


@dataclass(frozen=True)
class Part:
    """A candidate as the worker receives it: where its model's skeleton is saved
    (`Model.skeleton_file`) and its node mask."""

    skeleton: str
    mask: int


# what the worker is sent for one candidate: a Part, or a serialized submodel (weights and
# all) for a model that has no weights file
Source = Part | bytes
_SKELETONS_KEPT = 4  # models whose skeletons the worker keeps open
STARTUP_S = 120.0  # a worker still importing after this long is not going to measure
EXIT_S = 5.0  # how long a worker that closed its pipe may take to exit


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Spawn re-runs the caller's main script in the child unless it is guarded by
    `if __name__ == "__main__"`; the worker needs nothing from it, so it sees a bare one."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


class MeasureWorker:
    def __init__(self) -> None:
        self._process: Any = None
        self._conn: Any = None
        self._lock = threading.Lock()  # one request at a time
        self.restarts = 0
        self.sent_bytes = 0  # through the pipe, over every request

    def _start(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no inherited backend threads
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True,
                                        name="tessera-measure")
        with _main_module_hidden(), _ctrl_c_held():
            self._process.start()
        child.close()
        # a candidate's timeout counts its measuring, not the worker's start (imports, a
        # busy machine): the worker says when it is ready
        if not self._conn.poll(STARTUP_S):
            raise OSError(f"the measuring worker did not start within {STARTUP_S:g} s")
        self._conn.recv_bytes()

    def measure(self, submodel: Source, target: str, settings: MeasureSettings,
                timeout_s: float = MEASURE_TIMEOUT_S, *, device: str | None = None) -> Cost:
        return self.measure_points(submodel, target, settings, [{}], timeout_s,
                                   device=device)[0]

    def measure_points(self, submodel: Source, target: str, settings: MeasureSettings,
                       points: Sequence[Mapping[str, Sequence[int]]],
                       timeout_s: float = MEASURE_TIMEOUT_S, *, device: str | None = None
                       ) -> list[Cost]:
        """One compile (for the device target `device`, as the backend target and the
        current device target while it compiles), a cost per point (its inputs' shapes);
        the timeout covers them all."""
        shapes = [{n: [int(d) for d in s] for n, s in p.items()} for p in points]
        request = pickle.dumps((submodel, target, asdict(settings), shapes, device))
        with self._lock:
            try:
                if self._process is None or not self._process.is_alive():
                    self._start()
                self._conn.send_bytes(request)
                self.sent_bytes += len(request)
                if not self._conn.poll(timeout_s * len(points)):
                    return [self._lost(timeout_s, hung=True)] * len(points)
                return [Cost(*c) for c in self._conn.recv()]
            except (EOFError, OSError):  # its end of the pipe closed: it is exiting
                return [self._lost(timeout_s, hung=False)] * len(points)
            except KeyboardInterrupt:  # its answer would be read as the next request's
                self._discard()
                raise

    def _lost(self, timeout_s: float, hung: bool) -> Cost:
        """Why the worker gave no answer; it is replaced before the next candidate. A
        worker whose pipe closed is reaped first: it may still be exiting."""
        process, self._process = self._process, None
        self.restarts += 1
        if not hung:
            process.join(EXIT_S)
        if process.is_alive():
            process.kill()
            process.join(5)
            return Cost.failed(f"hung: no result within {timeout_s:g} s (the worker was "
                               "killed)", "hung")
        process.join(5)
        code = process.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            fault = "out of memory" if name == "SIGKILL" else "crashed"
            what = "ran out of memory" if name == "SIGKILL" else "crashed"
            return Cost.failed(f"{what}: the backend killed its process with {name}", fault)
        return Cost.failed(f"crashed: the backend exited its process with status {code}",
                           "crashed")

    def _discard(self) -> None:
        """Stop the worker without a verdict on its candidate (the caller was interrupted)."""
        process, self._process = self._process, None
        if process is not None and process.is_alive():
            process.kill()
            process.join(5)

    def close(self) -> None:
        with self._lock:
            if self._process is not None and self._process.is_alive():
                try:
                    self._conn.send_bytes(pickle.dumps(None))
                    self._process.join(5)
                except OSError:
                    pass
                if self._process.is_alive():
                    self._process.kill()
            self._process = None


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT blocked on this thread while the worker starts: the worker inherits the
    blocked signal, so a Ctrl-C while it imports stays pending there until `_serve` ignores
    it (neither killing it nor printing its traceback). Here it is never dropped: pending
    until the start is over, or taken at once by another thread. (Ignoring SIGINT for those
    milliseconds instead lost a Ctrl-C pressed then.) Only the main thread may change
    signal handling."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not hasattr(signal, "pthread_sigmask"):  # no signal masks here: ignore it meanwhile
        held = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, held)
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _serve(conn: Any) -> None:
    # Ctrl-C in a terminal reaches the whole process group: the compiling process decides
    # what an interrupt means, and a worker dying of it would mark its candidate crashed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards one pending since the start
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    for module in filter(None, os.environ.get("TESSERA_PLUGINS", "").split(",")):
        importlib.import_module(module.strip())
    importlib.import_module("tessera.backends").load_plugins()  # entry-point plugins
    conn.send_bytes(b"ready")
    skeletons: OrderedDict[str, Model] = OrderedDict()
    while True:
        message = conn.recv_bytes()
        request = pickle.loads(message)
        if request is None:
            return
        source, target, settings, points, device = request
        costs = _measured(source, skeletons, Target(target), MeasureSettings(**settings),
                          points, None if device is None else Target(device))
        trim()  # the candidate's session is gone: its pages go back to the system
        conn.send([(c.ms, c.spread, c.samples, c.invalid) for c in costs])


def _measured(source: Source, skeletons: OrderedDict[str, Model], target: Target,
              settings: MeasureSettings, points: list[dict[str, list[int]]],
              device: Target | None) -> list[Cost]:
    try:
        submodel = _submodel(source, skeletons)
    except TesseraError as err:
        return [Cost.failed(first_line(err))] * len(points)
    return measure_points(submodel, target, settings, points, device=device)


def _submodel(source: Source, skeletons: OrderedDict[str, Model]) -> onnx.ModelProto:
    """The candidate's submodel: extracted here from its model's skeleton (opened once and
    kept among the last few), or parsed from the bytes sent."""
    import onnx

    from tessera.ir import extract_submodel, load_skeleton

    if isinstance(source, bytes):
        return onnx.load_from_string(source)
    model = skeletons.get(source.skeleton)
    if model is None:
        model = skeletons[source.skeleton] = load_skeleton(source.skeleton)
        while len(skeletons) > _SKELETONS_KEPT:
            skeletons.popitem(last=False)
    skeletons.move_to_end(source.skeleton)
    return extract_submodel(model, source.mask)


_shared: MeasureWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> MeasureWorker:
    """The process's measuring worker, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MeasureWorker()
            atexit.register(_shared.close)
        return _shared


__all__ = ["MeasureWorker", "Part", "Source", "shared_worker"]
