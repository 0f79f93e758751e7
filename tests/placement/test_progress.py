"""Progress by phase with the time left, and an interrupt (Ctrl-C) that keeps the best plan
known so far. The interrupt is raised from the progress callback, where a terminal's
KeyboardInterrupt would land in the middle of the search."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tessera
from tessera import backends
from tessera.errors import ConfigError, InterruptedCompile
from tessera.placement import ProgressEvent
from tessera.placement.record import PHASES, Phase
from tessera.placement.record._progress import Reporter, time_left

from ..ir.models import mlp

BOTH = all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_follows_the_rate_measured_in_the_phase() -> None:
    events: list[ProgressEvent] = []
    clock = Clock()
    report = Reporter(events.append, clock=clock)
    report.begin(Phase.MEASURING, 10, "onnxruntime")
    clock.now += 2.0
    report.advance(Phase.MEASURING, "onnxruntime")
    assert events[-1].left_s is None  # one unit timed: too few to say
    clock.now += 2.0
    report.advance(Phase.MEASURING, "openvino")
    assert (events[-1].phase, events[-1].done, events[-1].total) == ("measuring", 2, 10)
    assert events[-1].elapsed_s == 4.0 and events[-1].left_s == 16.0
    assert str(events[-1]) == "measuring 2/10 (openvino): 4 s, about 16 s left"
    # a new batch of the phase restarts the rate from the units it adds
    report.begin(Phase.MEASURING, 20, done=10)
    clock.now += 1.0
    report.step(Phase.MEASURING, 12, 20)
    assert events[-1].left_s == 4.0


@given(st.integers(0, 50), st.integers(0, 60), st.integers(1, 100),
       st.floats(0.01, 1e4))
def test_time_left_is_none_or_the_rate_times_the_units_left(
        timed: int, done: int, total: int, elapsed: float) -> None:
    left = time_left(timed, done, total, elapsed)
    if done >= total:
        assert left == 0.0
    elif timed < 2:
        assert left is None
    else:
        assert left == round(elapsed / timed * (total - done), 1)
    assert time_left(timed, done, None, elapsed) is None


def test_a_callback_of_three_arguments_follows_the_measuring_only() -> None:
    calls: list[tuple[int, int, str]] = []
    report = Reporter.of(lambda done, total, target: calls.append((done, total, target)))
    report.begin(Phase.SUPPORT)
    report.begin(Phase.MEASURING, 3, "onnxruntime")
    report.advance(Phase.MEASURING, "openvino")
    report.begin(Phase.RACE, 2)
    assert calls == [(0, 3, "onnxruntime"), (1, 3, "openvino")]


def test_a_callback_that_takes_no_event_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="takes"):
        tessera.compile(mlp(), "onnxruntime", progress=lambda a, b: None)
    with pytest.raises(ConfigError, match="callable"):
        Reporter.of(42)  # type: ignore[arg-type]


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_a_search_reports_its_phases_in_order() -> None:
    events: list[ProgressEvent] = []
    tessera.compile(mlp(seed=11), "onnxruntime,openvino", partitioner="collage",
                    progress=events.append)
    phases = list(dict.fromkeys(e.phase for e in events))
    assert phases[:3] == ["support", "measuring", "search"]
    assert "race" in phases and set(phases) <= set(PHASES)
    measuring = [e for e in events if e.phase == "measuring" and e.total is not None]
    assert measuring and measuring[-1].done == measuring[-1].total
    assert all(e.left_s is None or e.left_s >= 0 for e in events)


class StopAt:
    """Raises KeyboardInterrupt at the `at`-th event of `phase`, as Ctrl-C would."""

    def __init__(self, phase: str, at: int) -> None:
        self.phase, self.at, self.seen = phase, at, 0

    def __call__(self, event: ProgressEvent) -> None:
        if event.phase == self.phase:
            self.seen += 1
            if self.seen == self.at:
                raise KeyboardInterrupt


def _reference(model: object, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return backends.get("reference").compile(model).run(feeds)["y"]


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
@pytest.mark.parametrize("phase, at, kept", [
    ("measuring", 3, "greedy plan"),  # nothing measured whole yet
    ("race", 1, "searched plan"),  # the search finished, the race had not
])
def test_an_interrupt_keeps_the_best_plan_known_so_far(phase: str, at: int, kept: str,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path))  # cold: costs measured by other tests
    model = mlp(seed=20 + at)
    compiled = tessera.compile(model, "onnxruntime,openvino", partitioner="collage",
                               progress=StopAt(phase, at))
    record = compiled.plan.stats.interrupted
    assert record is not None and record.phase == phase and kept in record.kept
    assert "interrupted during" in str(record) and "not remembered" in str(record)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y"], _reference(model, feeds), rtol=1e-5)
    # never remembered: the next compile searches, and finishes
    again = tessera.compile(model, "onnxruntime,openvino", partitioner="collage")
    source = again.plan.stats.source
    assert again.plan.stats.interrupted is None and (source is None or source.cache is None)
    source = tessera.compile(model, "onnxruntime,openvino", partitioner="collage").plan.stats.source
    assert source is not None and source.cache is not None


def test_an_interrupt_while_building_is_an_interrupted_compile() -> None:
    with pytest.raises(InterruptedCompile, match="no plan was kept") as caught:
        tessera.compile(mlp(seed=31), "onnxruntime", progress=StopAt("build", 1))
    assert isinstance(caught.value, KeyboardInterrupt)


# `tessera compile` that says on the pipe `READY_FD` names when its measuring is under way:
# its progress callback writes one line once a few candidates are measured (on a pipe the
# command itself draws no progress)
_CLI_SAYING_WHEN_MEASURING = """
import contextlib, os, signal
from tessera.cli import _build, main

# as a shell starts a command: Ctrl-C raises KeyboardInterrupt, whatever the test process
# that started this one had made of SIGINT (a process inherits an ignored signal)
signal.signal(signal.SIGINT, signal.default_int_handler)

ready = os.fdopen(int(os.environ["READY_FD"]), "w")

def progress(event):
    if event.phase == "measuring" and event.done >= 3 and not ready.closed:
        ready.write("measuring\\n")
        ready.close()

_build.progress_display = lambda: (contextlib.nullcontext(), progress)
main()
"""


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_ctrl_c_in_the_cli_saves_the_plan_kept_and_says_so(tmp_path: Path) -> None:
    """A real SIGINT to `tessera compile` during the measuring of a model big enough to
    measure for a while, sent once the command says its measuring is under way: the
    artifact kept is saved, one line says what was kept, and the exit status is the
    shell's for Ctrl-C; no traceback."""
    import select

    from bench._generated import conv_stack

    path = tmp_path / "stack.onnx"
    path.write_bytes(conv_stack(120))
    readable, writable = os.pipe()
    env = {**os.environ, "TESSERA_CACHE": str(tmp_path / "cache"), "READY_FD": str(writable)}
    command = [sys.executable, "-c", _CLI_SAYING_WHEN_MEASURING, "compile",
               str(path), "-t", "onnxruntime,openvino", "-o", str(tmp_path / "stack.tess")]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, pass_fds=(writable,))
    os.close(writable)  # the child's copy is the only one: its exit ends the pipe
    with os.fdopen(readable) as ready:
        # the bound only keeps a broken child from hanging the test
        said = ready.readline() if select.select([ready], [], [], 300)[0] else ""
    if said != "measuring\n":
        process.kill()
        pytest.fail(f"the command never said it was measuring: {process.communicate()}")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, (out, err)
    assert "Traceback" not in err
    assert "interrupted during" in err
    assert (tmp_path / "stack.tess").exists()
    assert tessera.load(tmp_path / "stack.tess").plan.stats.interrupted is not None
