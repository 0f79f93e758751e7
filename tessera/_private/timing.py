"""Latency in blocks: warm up, then run one thing repeatedly until a time budget is spent.
Timing one plan's runs together keeps another backend's spinning pool from slowing them.
Throughput in blocks too: several threads call the one thing at once for the budget. Blocks
of several contenders repeat in rounds (`in_rounds`), one contender at a time. The
clock is a parameter, so tests of the decisions built on it run on a synthetic one."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

Clock = Callable[[], float]  # seconds, monotonic
_B = TypeVar("_B")
_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True)
class Latency:
    median_ms: float
    p90_ms: float
    min_ms: float
    mean_ms: float
    runs: int
    spread_ms: float = 0.0  # max - min of the samples

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        ordered = sorted(samples)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        return cls(round(statistics.median(ordered), 4), round(p90, 4), round(ordered[0], 4),
                   round(statistics.fmean(ordered), 4), len(ordered),
                   round(ordered[-1] - ordered[0], 4))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0 < q <= 100) of `samples`, interpolated between the two
    nearest ranks; 50 is exactly the median."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    if q == 50:
        return float(statistics.median(ordered))
    position = q / 100 * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def time_samples(run: Callable[[], object], *, warmup: int = 3, min_runs: int = 10,
                 max_runs: int = 2000, seconds: float = 1.0,
                 before: Callable[[], object] | None = None,
                 clock: Clock = time.perf_counter) -> list[float]:
    """Each call's latency (ms), `run` timed after `warmup` calls: at least `min_runs`,
    then until `seconds` pass. `before`, if given, runs untimed ahead of every timed call
    (to flush caches, say)."""
    for _ in range(warmup):
        run()
    samples: list[float] = []
    start = clock()
    while len(samples) < max_runs and (len(samples) < min_runs or clock() - start < seconds):
        if before is not None:
            before()
        began = clock()
        run()
        samples.append((clock() - began) * 1e3)
    return samples


def time_block(run: Callable[[], object], *, warmup: int = 3, min_runs: int = 10,
               max_runs: int = 2000, seconds: float = 1.0,
               before: Callable[[], object] | None = None,
               clock: Clock = time.perf_counter) -> Latency:
    """`time_samples` summarised."""
    return Latency.of(time_samples(run, warmup=warmup, min_runs=min_runs, max_runs=max_runs,
                                   seconds=seconds, before=before, clock=clock))


@dataclass(frozen=True)
class Throughput:
    """What `concurrency` callers got done together in one block."""

    per_second: float  # calls completed per second, every caller's together
    calls: int
    concurrency: int
    latencies_ms: tuple[float, ...]  # each call's own latency (ms), caller by caller

    def latency_ms(self, q: float = 50) -> float:
        """The `q`-th percentile of the per-call latencies."""
        return percentile(self.latencies_ms, q)


def time_throughput(run: Callable[[], object], *, concurrency: int, warmup: int = 1,
                    min_calls: int = 2, max_calls: int = 100_000, seconds: float = 1.0,
                    clock: Clock = time.perf_counter) -> Throughput:
    """`concurrency` threads each call `run` in a loop: `warmup` calls, then, all starting
    together, at least `min_calls` each and on until `seconds` have passed (or a caller
    made `max_calls`). Calls per
    second are every thread's calls over the time from the start to the last one's end.
    One caller runs on this thread; several, each on a thread of its own. `run` must be
    safe to call from several threads."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    ends = [0.0] * concurrency
    start: list[float] = []
    gate = threading.Barrier(concurrency, action=lambda: start.append(clock()))

    def caller(index: int) -> None:
        try:
            for _ in range(warmup):
                run()
            gate.wait()
            mine = latencies[index]
            while len(mine) < max_calls and (len(mine) < min_calls or
                                             clock() - start[0] < seconds):
                began = clock()
                run()
                mine.append((clock() - began) * 1e3)
            ends[index] = clock()
        except BaseException:
            gate.abort()  # the others stop waiting for this one
            raise

    failures: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            caller(index)
        except threading.BrokenBarrierError:
            pass  # another caller failed: its error is the one to report
        except BaseException as err:  # handed to the calling thread
            failures.append(err)

    if concurrency == 1:
        guarded(0)
    else:
        threads = [threading.Thread(target=guarded, args=(i,), name=f"tessera-caller-{i}",
                                    daemon=True) for i in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    calls = sum(len(mine) for mine in latencies)
    elapsed = max(ends) - start[0]
    return Throughput(calls / elapsed if elapsed > 0 else float("inf"), calls, concurrency,
                      tuple(t for mine in latencies for t in mine))


def in_rounds(names: Iterable[_K], block: Callable[[_K, bool], _B],
              cost: Callable[[_B], float] | None = None, rounds: int = 3, close: float = 0.0,
              extra_rounds: int = 0, *, far: float | None = None,
              on_start: Callable[[int], object] | None = None,
              on_block: Callable[[_K], object] | None = None,
              on_extra: Callable[[int], object] | None = None,
              on_drop: Callable[[int], object] | None = None) -> dict[_K, list[_B]]:
    """Each name's blocks, in the order of `names`: a round runs `block(name, first)` for
    each name in turn, never two at once, so one contender's spinning pool never slows
    another's and drift of a shared machine hits every one alike; `first` is true in the
    first round only (for a longer warm-up).

    Where `cost` is given:
    - with `far`, after each round from the second a name whose cheapest block costs more
      than `far` times the cheapest name's is timed no more: more blocks could not make it
      the cheapest (two blocks each first, so one block slowed by other work on the
      machine never drops a name);
    - after `rounds` rounds, where the two lowest of the names' cheapest blocks are within
      `close` of each other (second <= first * (1 + close)), `extra_rounds` more rounds
      run, of the names within `close` of the cheapest only.

    `on_start(rounds * len(names))` is called once before the first block, `on_block(name)`
    after each block, `on_drop(blocks)` with the planned blocks a name timed no more will
    not run, and, for a close race, `on_extra(blocks)` with the blocks the extra rounds
    add, before them."""
    blocks: dict[_K, list[_B]] = {name: [] for name in names}
    if on_start is not None:
        on_start(rounds * len(blocks))
    timing = list(blocks)

    def one_round(first: bool) -> None:
        for name in timing:
            blocks[name].append(block(name, first))
            if on_block is not None:
                on_block(name)

    def cheapest() -> dict[_K, float]:
        assert cost is not None
        return {n: min(cost(b) for b in blocks[n]) for n in timing if blocks[n]}

    for round_index in range(rounds):
        one_round(round_index == 0)
        if far is not None and cost is not None and 1 <= round_index < rounds - 1:
            lowest = cheapest()
            if lowest:
                best = min(lowest.values())
                dropped = [n for n in timing if lowest.get(n, 0.0) > best * far]
                timing = [n for n in timing if n not in dropped]
                if dropped and on_drop is not None:
                    on_drop(len(dropped) * (rounds - round_index - 1))
    if cost is None:
        return blocks
    lowest = cheapest()
    ranked = sorted(lowest.values())
    if len(ranked) > 1 and ranked[1] <= ranked[0] * (1 + close):
        timing = [n for n in timing if n in lowest and lowest[n] <= ranked[0] * (1 + close)]
        if on_extra is not None:
            on_extra(extra_rounds * len(timing))
        for _ in range(extra_rounds):
            one_round(False)
    return blocks


__all__ = ["Clock", "Latency", "Throughput", "in_rounds", "percentile", "time_block",
           "time_samples", "time_throughput"]
