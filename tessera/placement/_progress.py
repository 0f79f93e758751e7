"""Progress of a placement, phase by phase. Each long phase reports through a `Reporter`:
the units done of all where known, what it is on, the seconds it has taken and an estimate
of the seconds left, from the rate measured so far in the phase (None until at least
`MIN_UNITS` units have been timed). The user's callback receives `ProgressEvent`s; the older
form `(done, total, target)` still receives the measuring phase.

The reporter also keeps the search's trail (`Trail`): what an interrupt may keep instead of
the search's answer (`_interrupted.py`)."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from tessera.errors import ConfigError

if TYPE_CHECKING:
    from tessera.placement._builder import Built
    from tessera.placement._plan import Plan

# The phases, in the order a compile usually meets them. A phase may come again: the search
# runs again after calibration, and plans are built for the race, the guard and precision.
PHASES = ("support", "measuring", "search", "race", "build", "guard", "precision")
PHASE_WORDS = {"support": "the support table", "measuring": "measuring",
               "search": "the search", "race": "the end-to-end race", "build": "building",
               "guard": "the numeric guard", "precision": "the precision search"}
MIN_UNITS = 2  # units timed in a phase before its time left is estimated


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a placement: `phase` (one of `PHASES`), `done` units of `total` (None
    where the phase cannot count ahead), what it is on (`detail`: a target, a rival plan, a
    step), the seconds since the phase (or its current batch) began, and the seconds left
    at the rate measured so far (None until it can be estimated)."""

    phase: str
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
    for form, arguments in (("event", (None,)), ("measuring", (0, 0, ""))):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return cast(Progress, given) if form == "event" else _Measuring(given)
    raise ConfigError(f"progress must take one argument, a ProgressEvent (or three: done, "
                      f"total, target), but {getattr(progress, '__name__', progress)!r} takes "
                      f"{signature}")


@dataclass(frozen=True)
class _Measuring:
    """The older callback, called for the measuring phase only."""

    callback: MeasuringCallback

    def __call__(self, event: ProgressEvent, /) -> None:
        if event.phase == "measuring" and event.total is not None and event.detail:
            self.callback(event.done, event.total, event.detail)


@dataclass
class _Stretch:
    """A phase's current batch: when it began, the units done before it, and the last
    count and total reported."""

    started: float
    base: int
    done: int
    total: int | None


@dataclass
class Trail:
    """What the search has found so far, for an interrupt: the best plan it finished (with
    its rank: 1 searched, 2 raced end to end; a later one of a lower rank does not replace
    it) and its build, and how to price the known plans from the costs measured so far."""

    kept: tuple[int, str, Plan, Built | None] | None = None
    priced: Callable[[], SoFar] | None = None


@dataclass(frozen=True)
class SoFar:
    """The known plans (greedy, each target alone) whose every partition was measured,
    their modelled costs, and what the search had priced and measured."""

    plans: dict[str, Plan] = field(default_factory=dict)
    modelled_ms: dict[str, float] = field(default_factory=dict)
    candidates: int = 0
    measurements: int = 0

    def best(self) -> tuple[str, Plan] | None:
        if not self.modelled_ms:
            return None
        name = min(self.modelled_ms, key=lambda n: (self.modelled_ms[n], n))
        return name, self.plans[name]


class Reporter:
    """Sends a placement's progress to the user's `Progress` (none: the events go nowhere),
    with each phase's elapsed time and time left, and keeps the search's `Trail`. One
    reporter follows one compile; `Reporter.of` a reporter is the reporter itself, so every
    layer of the compile reports through the same one."""

    def __init__(self, sink: Progress | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._clock = clock
        self._stretches: dict[str, _Stretch] = {}
        self.phase: str | None = None  # the phase of the last event
        # ... other than building: the race, the guard and the precision search build plans
        self.stage: str | None = None
        self.trail = Trail()

    @classmethod
    def of(cls, progress: ProgressLike | None) -> Reporter:
        if isinstance(progress, Reporter):
            return progress
        return cls(as_progress(progress))

    def __call__(self, event: ProgressEvent, /) -> None:
        """Forward an event as it is (a reporter is a `Progress` too)."""
        self.phase = event.phase
        if event.phase != "build":
            self.stage = event.phase
        if self._sink is not None:
            self._sink(event)

    def begin(self, phase: str, total: int | None = None, detail: str = "",
              done: int = 0) -> None:
        """A phase (or a new batch of it) begins, `done` units counted before it."""
        self._stretches[phase] = _Stretch(self._clock(), done, done, total)
        self._emit(phase, detail)

    def step(self, phase: str, done: int, total: int | None = None, detail: str = "") -> None:
        """`done` units of `total` of the phase are done (a phase not begun begins here)."""
        stretch = self._stretches.get(phase)
        if stretch is None:
            self.begin(phase, total, detail, done)
            return
        stretch.done, stretch.total = done, total
        self._emit(phase, detail)

    def advance(self, phase: str, detail: str = "") -> None:
        """One more unit of the phase done, of the total it began with."""
        stretch = self._stretches.get(phase)
        if stretch is None:
            self.begin(phase, None, detail, 1)
            return
        self.step(phase, stretch.done + 1, stretch.total, detail)

    def counted(self, phase: str) -> tuple[int, int | None]:
        """The units done and the total of the phase's current batch."""
        stretch = self._stretches.get(phase)
        return (stretch.done, stretch.total) if stretch is not None else (0, None)

    def keep(self, rank: int, name: str, plan: Plan, built: Built | None = None) -> None:
        """A plan the search finished: what an interrupt keeps, unless it has a better one."""
        if self.trail.kept is None or rank >= self.trail.kept[0]:
            self.trail.kept = (rank, name, plan, built)

    def pricing(self, priced: Callable[[], SoFar]) -> None:
        """How to price the known plans from what has been measured, should it stop."""
        self.trail.priced = priced

    def _emit(self, phase: str, detail: str) -> None:
        assert phase in PHASES, phase
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


__all__ = ["MIN_UNITS", "PHASES", "PHASE_WORDS", "MeasuringCallback", "Progress", "ProgressEvent",
           "ProgressLike", "Reporter", "SoFar", "Trail", "as_progress", "time_left"]
