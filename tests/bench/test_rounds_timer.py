"""The round-based timer that bench and the placement race share
(`tessera._private.timing.in_rounds`): blocks of each name in turn, round by round, extra
rounds of the close names in a close race, names far slower timed no more, and the
callbacks that report its progress. The blocks here are SYNTHETIC: each returns a figure
given in advance and counts its calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tessera._private.timing import in_rounds


class _Blocks:
    """A block function whose n-th block of a name returns figures[name][n] (the last one
    once they run out), recording every call in order."""

    def __init__(self, figures: Mapping[str, Sequence[float]]) -> None:
        self.figures = figures
        self.calls: list[tuple[str, bool]] = []

    def __call__(self, name: str, first: bool) -> float:
        done = sum(1 for n, _ in self.calls if n == name)
        self.calls.append((name, first))
        figures = self.figures[name]
        return figures[min(done, len(figures) - 1)]


class _Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def start(self, total: int) -> None:
        self.seen.append(("start", total))

    def block(self, name: str) -> None:
        self.seen.append(("block", name))

    def extra(self, added: int) -> None:
        self.seen.append(("extra", added))

    def drop(self, removed: int) -> None:
        self.seen.append(("drop", removed))


def _run(figures: Mapping[str, Sequence[float]], **options: Any
         ) -> tuple[dict[str, list[float]], _Blocks, _Events]:
    block, events = _Blocks(figures), _Events()
    blocks = in_rounds(list(figures), block, on_start=events.start, on_block=events.block,
                       on_extra=events.extra, on_drop=events.drop, **options)
    return blocks, block, events


def test_each_round_runs_one_block_of_every_name_in_turn_the_first_round_marked() -> None:
    blocks, block, events = _run({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}, rounds=3)
    assert blocks == {"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}
    assert block.calls == [("a", True), ("b", True), ("a", False), ("b", False),
                           ("a", False), ("b", False)]
    assert events.seen == [("start", 6), ("block", "a"), ("block", "b"), ("block", "a"),
                           ("block", "b"), ("block", "a"), ("block", "b")]


def test_a_close_race_gets_extra_rounds_of_the_close_names_and_says_how_many_blocks() -> None:
    # the cheapest blocks are 10.0 and 10.4: within 5% of each other; c is not close
    blocks, block, events = _run({"a": [10.0, 12.0], "b": [10.4], "c": [30.0]},
                                 cost=lambda ms: ms, rounds=2, close=0.05, extra_rounds=2)
    assert [len(b) for b in blocks.values()] == [4, 4, 2]
    assert blocks["a"] == [10.0, 12.0, 12.0, 12.0]
    assert all(not first for _, first in block.calls[3:])
    assert events.seen[0] == ("start", 6)
    assert events.seen[7] == ("extra", 4)  # after the 6 blocks of the planned rounds
    assert [e for e in events.seen if e[0] == "block"] == [
        ("block", n) for n in "abcabcabab"]


def test_a_name_far_slower_after_two_rounds_is_timed_no_more_and_says_so() -> None:
    # c's cheapest block is 3x a's after two rounds; b's first block was slowed 4x by other
    # work, but its second is as fast as a's: two blocks each before anything is dropped
    blocks, block, events = _run({"a": [10.0], "b": [40.0, 10.5], "c": [30.0]},
                                 cost=lambda ms: ms, rounds=4, far=2.0)
    assert [len(b) for b in blocks.values()] == [4, 4, 2]
    assert ("drop", 2) in events.seen  # the two blocks c would have run
    assert events.seen.index(("drop", 2)) == 1 + 6  # right after the second round
    assert [n for n, _ in block.calls] == list("abcabcabab")
    # without a cost, or without `far`, every name runs every round
    assert [len(b) for b in _run({"a": [10.0], "c": [30.0]}, rounds=4, far=2.0)[0].values()
            ] == [4, 4]
    assert [len(b) for b in _run({"a": [10.0], "c": [30.0]}, cost=lambda ms: ms,
                                 rounds=4)[0].values()] == [4, 4]


def test_a_clear_race_ends_after_the_planned_rounds() -> None:
    # 10.0 against 10.6: 6% apart, more than `close`
    blocks, block, events = _run({"a": [10.0], "b": [10.6]}, cost=lambda ms: ms, rounds=3,
                                 close=0.05, extra_rounds=2)
    assert [len(b) for b in blocks.values()] == [3, 3] and len(block.calls) == 6
    assert ("extra", 4) not in events.seen and len(events.seen) == 1 + 6


def test_the_cost_decides_closeness_and_a_lone_name_or_no_cost_never_gets_more() -> None:
    # the blocks are (per second, latency): the cost is the time per inference
    figures = {"x": (100.0, 1.0), "y": (99.0, 9.0)}  # latencies far apart, rates close

    def block(name: str, first: bool) -> tuple[float, float]:
        return figures[name]

    blocks = in_rounds(["x", "y"], block, lambda b: 1 / b[0], 1, 0.05, 1)
    assert [len(b) for b in blocks.values()] == [2, 2]
    assert len(in_rounds(["x"], block, lambda b: 1 / b[0], 1, 0.05, 3)["x"]) == 1
    assert [len(b) for b in in_rounds(["x", "y"], block, None, 2, 1.0, 3).values()] == [2, 2]


def test_no_callbacks_are_needed_and_no_rounds_time_nothing() -> None:
    block = _Blocks({"a": [1.0]})
    assert in_rounds(["a"], block, rounds=2) == {"a": [1.0, 1.0]}
    assert in_rounds(["a", "b"], block, lambda ms: ms, rounds=0, close=1.0,
                     extra_rounds=2) == {"a": [], "b": []}
