"""Measurement isolation: a backend that really segfaults or really hangs on some candidates
only invalidates those candidates (with the reason, in the plan's statistics); the compile
goes on, and the worker is reused between candidates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends
from tessera.placement.measure._worker import shared_worker

from ..ir.models import mlp
from . import faulty_backends


@pytest.fixture
def faulty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TESSERA_PLUGINS", faulty_backends.__name__)
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    shared_worker().close()  # the next worker starts with the plugin loaded
    faulty_backends.register()
    yield
    faulty_backends.unregister()
    shared_worker().close()


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend, reason", [("test-segfault", "SIGSEGV"),
                                             ("test-hang", "hung: no result within 3 s")])
def test_a_crashing_or_hanging_backend_only_loses_its_candidates(
        faulty: None, backend: str, reason: str) -> None:
    worker = shared_worker()
    before = worker.restarts
    compiled = tessera.compile(mlp(), f"{backend},onnxruntime", partitioner="collage",
                               measure_timeout=3)
    stats = compiled.plan.stats.measuring
    assert stats is not None and stats.invalid >= 1
    assert any(reason in str(e) and "softmax" in e.nodes and e.fault is not None
               for e in stats.invalid_examples)
    softmax = next(p for p in compiled.plan.partitions if "softmax" in p.nodes)
    # never on the faulty backend (maybe on ONNX Runtime's one-thread choice)
    assert softmax.kind == "onnxruntime"
    assert worker.restarts - before == stats.invalid  # one restart per lost candidate, no more
    from tessera.cli._explain import render

    text = render(compiled.plan, compiled.model, "mlp")
    assert "crashed or hung in the measuring worker" in text and reason in text
    expected = backends.get("reference").compile(mlp()).run(_feeds())["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], expected, rtol=1e-5, atol=1e-6)


def test_without_isolation_the_measure_runs_in_process(faulty: None) -> None:
    """The switch is honoured: a healthy compile with isolate=off starts no worker."""
    worker = shared_worker()
    tessera.compile(mlp(), "onnxruntime,openvino", partitioner="collage", isolate=False)
    assert worker._process is None


@pytest.mark.timeout(300)
def test_a_script_without_a_main_guard_can_compile(tmp_path: Path) -> None:
    """The measuring worker is spawned; spawn re-runs an unguarded main script in the child
    (which would compile again, and fail) unless tessera hides it."""
    import os
    import subprocess
    import sys

    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import tessera\n"
        f"compiled = tessera.compile({str(model)!r}, ['onnxruntime', 'reference'],\n"
        "                          partitioner='collage')\n"
        "print('measured', compiled.plan.stats.measuring.measurements)\n")
    env = {**os.environ, "TESSERA_COST_DB": str(tmp_path / "costs.sqlite")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("measured") == 1 and int(done.stdout.split()[-1]) > 0


def test_a_ctrl_c_while_a_worker_starts_is_delivered_once_it_has_started() -> None:
    """Ctrl-C is held, not dropped, for the milliseconds a measuring worker starts: the
    compile sees it as soon as the start is over."""
    import signal
    import threading
    import time

    from tessera.placement.measure._worker import _ctrl_c_held

    reached = False
    handled = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a shell
    try:
        with pytest.raises(KeyboardInterrupt), _ctrl_c_held():
            # to this thread: held, it stays pending (another thread taking a process-wide
            # one would hand it to this thread at once, which is not lost either)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            time.sleep(0.05)  # a signal not held would interrupt here
            reached = True
    finally:
        signal.signal(signal.SIGINT, handled)
    assert reached
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_the_measuring_worker_ignores_ctrl_c_meant_for_the_compile() -> None:
    import os
    import signal

    from tessera.ir import extract_submodel, load_model
    from tessera.placement.measure._protocol import MeasureSettings
    from tessera.target import Target

    model = load_model(mlp())
    submodel = extract_submodel(model, model.dataflow.all_nodes()).SerializeToString()
    worker = shared_worker()
    first = worker.measure(submodel, "onnxruntime", MeasureSettings())
    assert first.ok and worker._process is not None
    restarts = worker.restarts
    os.kill(worker._process.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the group
    again = worker.measure(submodel, str(Target("onnxruntime")), MeasureSettings())
    assert again.ok and again.invalid is None
    assert worker.restarts == restarts and worker._process.is_alive()
