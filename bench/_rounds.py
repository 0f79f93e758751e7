"""Timing in rounds of blocks: each configuration runs alone for a block of calls (so one
backend's spinning pool never slows another's), and the blocks repeat in rounds so slow drift
of a shared machine hits every configuration alike. A result is the median of the block
medians, with the spread (lowest and highest block median) and every block's median, so two
configurations can also be compared round by round (`paired`). The rounds are tessera's own
(`tessera._private.timing.in_rounds`), as the placement race runs them."""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tessera._private.cores import core_budget, cpu_fields, parse_cpuinfo
from tessera._private.timing import Latency, time_block
from tessera._private.timing import in_rounds as timed_rounds

# a block: a callable timed alone, or (callable, something run untimed before each call)
Block = Callable[[], object] | tuple[Callable[[], object], Callable[[], object]]


@dataclass(frozen=True)
class Measured:
    median_ms: float
    low_ms: float
    high_ms: float
    runs: int
    blocks_ms: tuple[float, ...] = ()

    @classmethod
    def of(cls, medians: Sequence[float], runs: int) -> Measured:
        """The summary of the block medians (ms) of `runs` runs in all."""
        return cls(round(statistics.median(medians), 4), round(min(medians), 4),
                   round(max(medians), 4), runs, tuple(round(v, 4) for v in medians))

    @property
    def spread(self) -> float:
        """(high - low) / median of the block medians."""
        return (self.high_ms - self.low_ms) / self.median_ms if self.median_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "blocks_ms": list(self.blocks_ms),
                "spread": round(self.spread, 4)}


def in_rounds(blocks: Mapping[str, Block], *, rounds: int = 3, seconds: float = 0.5,
              min_runs: int = 10, warmup: int = 3) -> dict[str, Measured]:
    """Each block timed for `seconds` per round (`tessera._private.timing.in_rounds`)."""
    def one(label: str, first: bool) -> Latency:
        block = blocks[label]
        run, before = block if isinstance(block, tuple) else (block, None)
        return time_block(run, seconds=seconds, before=before, min_runs=min_runs,
                          warmup=warmup)

    timed = timed_rounds(blocks, one, rounds=rounds)
    return {label: Measured.of([b.median_ms for b in latencies],
                               sum(b.runs for b in latencies))
            for label, latencies in timed.items()}


def paired(numerator: Measured | list[Measured], denominator: Measured | list[Measured]
           ) -> float:
    """The median over rounds of numerator / denominator within each round (a list of
    Measured is summed round by round): drift between rounds cancels within a round."""
    def per_round(m: Measured | list[Measured]) -> list[float]:
        group = m if isinstance(m, list) else [m]
        return [sum(x) for x in zip(*(g.blocks_ms for g in group), strict=True)]

    return paired_blocks(per_round(numerator), per_round(denominator))


def paired_blocks(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """The median of numerator[i] / denominator[i] over the rounds both have."""
    return round(statistics.median(a / b for a, b in zip(numerator, denominator,
                                                         strict=False)), 4)


# the instruction sets that decide which precision pays on a CPU (int8 dot products, bf16)
_ISA = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def machine() -> str:
    """The machine a table was measured on: its CPU model and the instruction sets that
    change which form wins, the cores, the OS and Python."""
    return (f"{platform.machine()} {cpu()}".strip()
            + f", {core_budget()} cores, {sys.platform}, Python {platform.python_version()}")


def cpu(cpuinfo: str | None = None) -> str:
    """'AMD EPYC (avx2 avx512f ...)' from /proc/cpuinfo (or `cpuinfo`'s text), or what
    `platform` says."""
    fields = cpu_fields() if cpuinfo is None else parse_cpuinfo(cpuinfo)
    model = fields.get("model name", "") or ("" if cpuinfo else platform.processor())
    flags = fields.get("flags", "").split()
    isa = " ".join(name for name in _ISA if name in flags)
    return f"{model} ({isa})" if isa else model
