"""Progress of a placement, phase by phase. Each long phase reports through a `Reporter`:
the units done of all where known, what it is on, the seconds it has taken and an estimate
of the seconds left, from the rate measured so far in the phase (None until at least
`MIN_UNITS` units have been timed). The user's callback receives `ProgressEvent`s; the older
form `(done, total, target)` still receives the measuring phase.

The reporter also carries the search's trail (`_trail.Trail`): what an interrupt may keep
instead of the search's answer (`placement/_interrupted.py`)."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, cast

from tessera.errors import ConfigError
from tessera.placement.record._phase import Phase
from tessera.placement.record._trail import Trail

MIN_UNITS = 2  # units timed in a phase before its time left is estimated


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a placement: its `phase`, `done` units of `total` (None
    where the phase cannot count ahead), what it is on (`detail`: a target, a rival plan, a
    step), the seconds since the phase (or its current batch) began, and the seconds left
    at the rate measured so far (None until it can be estimated)."""

    phase: Phase
    done: int = 0
    total: int | None = None
    detail: str = ""
    elapsed_s: float = 0.0
    left_s: float | None = None

    def __str__(self) -> str:
        count = f" {self.done}/{self.total}" if self.total is not None else \
            (f" {self.done}" if self.done else "")
        detail = f" ({self.detail})" if self.detail else ""
        left = f", about {_seconds(self.left_s)} left" if self.left_s is not None else ""
        return f"{self.phase}{count}{detail}: {_seconds(self.elapsed_s)}{left}"


class Progress(Protocol):
    """What follows a placement: called with each `ProgressEvent`."""

    def __call__(self, event: ProgressEvent, /) -> None: ...


# The older form: called after each candidate measured, with the candidates priced so far,
# of all, and the current target.
MeasuringCallback = Callable[[int, int, str], None]
ProgressLike: TypeAlias = "Progress | MeasuringCallback"


def as_progress(progress: ProgressLike | None) -> Progress | None:
    """`progress` as a `Progress`: a callable of one event as it is, one of three
    arguments (the older form) following the measuring phase only."""
    if progress is None or isinstance(progress, Reporter):
        return progress
    given: Any = progress  # either form: told apart by its signature
    if not callable(given):
        raise ConfigError(f"progress must be callable with a ProgressEvent, got "
                          f"{type(progress).__name__}")
    try:
        signature = inspect.signature(given)
    except (TypeError, ValueError):  # a builtin without one: the current form
        return cast(Progress, given)
    forms: tuple[tuple[tuple[Any, ...], Callable[[Any], Progress]], ...] = (
        ((None,), lambda f: cast(Progress, f)), ((0, 0, ""), _Measuring))
    for arguments, wrap in forms:
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return wrap(given)
    raise ConfigError(f"progress must take one argument, a ProgressEvent (or three: done, "
                      f"total, target), but {progress!r} takes "
                      f"{signature}")


@dataclass(frozen=True)
class _Measuring:
    """The older callback, called for the measuring phase only."""

    callback: MeasuringCallback

    def __call__(self, event: ProgressEvent, /) -> None:
        if event.phase is Phase.MEASURING and event.total is not None and event.detail:
            self.callback(event.done, event.total, event.detail)


@dataclass
class _Stretch:
    """A phase's current batch: when it began, the units done before it, and the last
    count and total reported."""

    started: float
    base: int
    done: int
    total: int | None


class Reporter:
    """Sends a placement's progress to the user's `Progress` (none: the events go nowhere),
    with each phase's elapsed time and time left, and keeps the search's `Trail`. One
    reporter follows one compile; `Reporter.of` a reporter is the reporter itself, so every
    layer of the compile reports through the same one."""

    def __init__(self, sink: Progress | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._clock = clock
        self._stretches: dict[Phase, _Stretch] = {}
        self.phase: Phase | None = None  # the phase of the last event
        # ... other than building: the race, the guard and the precision search build plans
        self.stage: Phase | None = None
        self.trail = Trail()

    @classmethod
    def of(cls, progress: ProgressLike | None) -> Reporter:
        if isinstance(progress, Reporter):
            return progress
        return cls(as_progress(progress))

    def __call__(self, event: ProgressEvent, /) -> None:
        """Forward an event as it is (a reporter is a `Progress` too)."""
        self.phase = event.phase
        if event.phase is not Phase.BUILD:
            self.stage = event.phase
        if self._sink is not None:
            self._sink(event)

    def begin(self, phase: Phase, total: int | None = None, detail: str = "",
              done: int = 0) -> None:
        """A phase (or a new batch of it) begins, `done` units counted before it."""
        self._stretches[phase] = _Stretch(self._clock(), done, done, total)
        self._emit(phase, detail)

    def step(self, phase: Phase, done: int, total: int | None = None, detail: str = "") -> None:
        """`done` units of `total` of the phase are done (a phase not begun begins here)."""
        stretch = self._stretches.get(phase)
        if stretch is None:
            self.begin(phase, total, detail, done)
            return
        stretch.done, stretch.total = done, total
        self._emit(phase, detail)

    def advance(self, phase: Phase, detail: str = "") -> None:
        """One more unit of the phase done, of the total it began with."""
        stretch = self._stretches.get(phase)
        if stretch is None:
            self.begin(phase, None, detail, 1)
            return
        self.step(phase, stretch.done + 1, stretch.total, detail)

    def counted(self, phase: Phase) -> tuple[int, int | None]:
        """The units done and the total of the phase's current batch."""
        stretch = self._stretches.get(phase)
        return (stretch.done, stretch.total) if stretch is not None else (0, None)

    def _emit(self, phase: Phase, detail: str) -> None:
        stretch = self._stretches[phase]
        elapsed = max(0.0, self._clock() - stretch.started)
        self(ProgressEvent(phase, stretch.done, stretch.total, detail, round(elapsed, 3),
                           time_left(stretch.done - stretch.base, stretch.done,
                                     stretch.total, elapsed)))


def time_left(timed: int, done: int, total: int | None, elapsed: float) -> float | None:
    """Seconds left at the rate of the `timed` units that took `elapsed` seconds; None
    before `MIN_UNITS` were timed or without a total; 0 once all are done."""
    if total is None:
        return None
    if done >= total:
        return 0.0
    if timed < MIN_UNITS or elapsed <= 0 or not math.isfinite(elapsed):
        return None
    return round(elapsed / timed * (total - done), 1)


def _seconds(value: float | None) -> str:
    seconds = float(value or 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


__all__ = ["MIN_UNITS", "MeasuringCallback", "Progress", "ProgressEvent", "ProgressLike",
           "Reporter", "as_progress", "time_left"]
