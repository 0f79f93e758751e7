"""Peak memory of a process and every process it started, sampled from outside it.

Each sample reads `/proc/PID/smaps_rollup` of the process and its descendants (the measuring
worker). Three figures per process: RSS (resident pages, where a page two processes map is
counted in each), PSS (each shared page divided among the processes that map it, so the sum
over processes counts it once) and USS (pages only this process maps). A model's weights
memory-mapped by the compiling process and the worker at once would be counted twice in the
sum of RSS; the sum of PSS is the memory the processes hold together."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_FIELDS = {"Rss:": "rss", "Pss:": "pss", "Private_Clean:": "uss", "Private_Dirty:": "uss"}


@dataclass(frozen=True)
class Usage:
    """One process's memory at one moment, in bytes."""

    rss: int = 0
    pss: int = 0
    uss: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.rss + other.rss, self.pss + other.pss, self.uss + other.uss)


def usage(pid: int) -> Usage | None:
    """`pid`'s memory now; None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    found = {"rss": 0, "pss": 0, "uss": 0}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in _FIELDS:
            found[_FIELDS[parts[0]]] += int(parts[1]) * 1024
    return Usage(**found)


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (from each process's parent in /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields follow its last ')'
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        parents.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    pending = [pid]
    while pending:
        children = parents.get(pending.pop(), [])
        found += children
        pending += children
    return found


@dataclass
class Peaks:
    """The highest sums seen: of every process together (`total`), of the process itself
    (`main`) and of its descendants (`children`); per figure, each at its own moment."""

    total: Usage = field(default_factory=Usage)
    main: Usage = field(default_factory=Usage)
    children: Usage = field(default_factory=Usage)
    samples: int = 0
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (s, main, children)

    def add(self, main: Usage, children: Usage, at: float) -> None:
        total = main + children
        self.total = _highest(self.total, total)
        self.main = _highest(self.main, main)
        self.children = _highest(self.children, children)
        self.samples += 1
        if not self.timeline or at - self.timeline[-1][0] >= 1.0:
            self.timeline.append((round(at, 1), main.pss, children.pss))


def _highest(a: Usage, b: Usage) -> Usage:
    return Usage(max(a.rss, b.rss), max(a.pss, b.pss), max(a.uss, b.uss))


def _summed(pids: Iterable[int]) -> Usage:
    total = Usage()
    for pid in pids:
        found = usage(pid)
        if found is not None:
            total = total + found
    return total


class Sampler:
    """Samples `pid` and its descendants every `interval` seconds on a thread until
    `stop()`; `peaks` holds what it saw."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._began = time.monotonic()

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        main = usage(self.pid)
        if main is None:
            return
        self.peaks.add(main, _summed(descendants(self.pid)), time.monotonic() - self._began)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join()
        return self.peaks


__all__ = ["Peaks", "Sampler", "Usage", "descendants", "usage"]
