"""The coarse step of the search: regions, the best mix of targets per region, and targets too
slow to keep measuring. Costs here are FAKE numbers: tests of the algorithm only."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import onnx
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tessera.ir import load_model, members
from tessera.placement.record import CoarseRecord, SearchStats
from tessera.placement.search._regions import (
    SLOW,
    SLOW_AFTER,
    Slowness,
    coarse_choice,
    regions,
)


def _chain(length: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}")
             for i in range(length)]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(f"v{length}", TensorProto.FLOAT,
                                                             [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_regions_cut_the_model_into_convex_runs_of_about_the_size() -> None:
    flow = load_model(_chain(100)).dataflow
    cut = regions(flow, range(len(flow)), size=25)
    assert len(cut) == 4
    assert sorted(i for mask in cut for i in members(mask)) == list(range(100))
    assert all(flow.is_convex(mask) for mask in cut)
    assert all(20 <= len(list(members(mask))) <= 30 for mask in cut)
    assert len(regions(flow, range(len(flow)), size=200)) == 1


def test_no_mix_beats_one_target_within_noise_so_nothing_is_refined() -> None:
    # ONNX Runtime and OpenVINO within 2% of each other on every region
    costs = [{"ov": 10.0, "ort": 10.2}, {"ov": 5.1, "ort": 5.0}, {"ov": 8.0, "ort": 8.1}]
    choice = coarse_choice(costs, ["ov", "ort"], overhead_ms=0.05)
    assert choice.single == "ov" and choice.single_ms == 23.1
    assert choice.saving < 0.05 and not choice.worth_refining()
    assert choice.refined() == ()


def test_regions_much_faster_elsewhere_are_refined_with_their_neighbours() -> None:
    costs = [{"ov": 6.0, "ort": 10.5}, {"ov": 20.0, "ort": 4.0}, {"ov": 5.0, "ort": 8.4}]
    choice = coarse_choice(costs, ["ov", "ort"], overhead_ms=0.1)
    assert choice.single == "ort"  # 22.9 against ov's 31
    assert choice.choice == ("ov", "ort", "ov")
    assert math.isclose(choice.mixed_ms, 6.0 + 0.1 + 4.0 + 0.1 + 5.0)
    assert choice.worth_refining() and choice.refined() == (0, 1, 2)  # and neighbours


def test_the_chain_overhead_can_make_a_mix_not_worth_it() -> None:
    costs = [{"a": 1.0, "b": 1.2}, {"a": 1.2, "b": 1.0}, {"a": 1.0, "b": 1.2}]
    cheap = coarse_choice(costs, ["a", "b"], overhead_ms=0.0)
    assert cheap.choice == ("a", "b", "a") and cheap.worth_refining()
    costly = coarse_choice(costs, ["a", "b"], overhead_ms=1.0)
    assert costly.choice == ("a", "a", "a") and not costly.worth_refining()


def test_a_mix_must_beat_the_single_target_measured_on_the_whole_model() -> None:
    # the regions' sums (3.2 and 3.3) each pay three calls; the mix, 3.0, looks 6% faster
    costs = [{"a": 1.2, "b": 1.0}, {"a": 1.0, "b": 1.2}, {"a": 1.0, "b": 1.1}]
    by_regions = coarse_choice(costs, ["a", "b"], overhead_ms=0.0)
    assert by_regions.single == "a" and by_regions.worth_refining()
    # measured whole (one call), a runs in 3.05 ms: the mix would save under 2%
    whole = replace(by_regions, whole_ms=3.05)
    assert whole.single == "a" and whole.single_ms == 3.2
    assert math.isclose(whole.saving, (3.05 - 3.0) / 3.05)
    assert not whole.worth_refining() and whole.refined() == ()
    # a target much faster on one region still gets its regions refined
    lopsided = [{"a": 1.2, "b": 0.3}, {"a": 1.0, "b": 1.2}, {"a": 1.0, "b": 1.1}]
    assert replace(coarse_choice(lopsided, ["a", "b"], 0.0), whole_ms=2.55).worth_refining()


def test_a_region_no_target_runs_whole_is_always_refined() -> None:
    costs = [{"a": 1.0, "b": 2.0}, {}, {"a": 1.0}]
    choice = coarse_choice(costs, ["a", "b"], overhead_ms=0.0)
    assert choice.single == "a" and choice.choice == ("a", None, "a")
    assert not choice.worth_refining() and choice.refined() == (0, 1, 2)
    four = coarse_choice([{"a": 1.0}, {"a": 1.0}, {"a": 1.0}, {}], ["a", "b"], 0.0)
    assert four.refined() == (2, 3)
    nothing_whole = coarse_choice([{"a": 1.0}, {"b": 1.0}], ["a", "b"], overhead_ms=0.0)
    assert nothing_whole.single is None and nothing_whole.worth_refining()
    assert nothing_whole.refined() == (0, 1)  # the mix leaves no single target


@given(st.lists(st.fixed_dictionaries({"a": st.floats(0.1, 100), "b": st.floats(0.1, 100)}),
                min_size=1, max_size=8), st.floats(0, 5))
def test_the_mix_is_the_cheapest_chain_and_never_above_the_best_single(
        costs: list[dict[str, float]], overhead: float) -> None:
    choice = coarse_choice(costs, ["a", "b"], overhead)
    assert choice.mixed_ms <= choice.single_ms + 1e-9
    # brute force over every assignment of targets to regions
    best = math.inf
    for bits in range(1 << len(costs)):
        picked = ["a" if bits >> r & 1 else "b" for r in range(len(costs))]
        total = sum(c[t] for c, t in zip(costs, picked, strict=True))
        total += overhead * sum(1 for x, y in itertools.pairwise(picked) if x != y)
        best = min(best, total)
    assert math.isclose(choice.mixed_ms, best, rel_tol=1e-9, abs_tol=1e-9)
    chosen = [c[t] for c, t in zip(costs, choice.choice, strict=True) if t is not None]
    switches = sum(1 for x, y in zip(choice.choice, choice.choice[1:], strict=False) if x != y)
    assert math.isclose(sum(chosen) + overhead * switches, choice.mixed_ms, rel_tol=1e-9,
                        abs_tol=1e-9)


def test_a_target_many_times_slower_on_every_region_so_far_is_hopeless() -> None:
    slowness = Slowness()
    for region in range(5):
        slowness.record("ort", region, 1.0)
    for region in range(SLOW_AFTER - 1):
        slowness.record("tvm", region, SLOW * 2)
        assert not slowness.hopeless("tvm")  # too few regions to tell
    slowness.record("tvm", SLOW_AFTER - 1, math.inf)  # a failure is slowest of all
    assert slowness.hopeless("tvm")
    assert slowness.describe("tvm") == f"at least {2 * SLOW:.1f}x the best on each of " \
        f"{SLOW_AFTER} region(s)"
    # winning one region keeps a target measured
    for region in range(SLOW_AFTER):
        slowness.record("torch", region, 0.5 if region == 1 else 50.0)
    assert not slowness.hopeless("torch")
    assert not slowness.hopeless("ort")


def test_the_coarse_record_round_trips_and_reads_well() -> None:
    record = CoarseRecord(12, 0.0213, 0, ("tvm: at least 9.3x the best on each of 3 region(s)",))
    stats = SearchStats(coarse=record)
    assert SearchStats.create(stats.to_dict()) == stats
    assert str(record) == ("12 region(s); mixing targets per region would save 2.1%: the "
                           "fine search skipped; stopped measuring tvm: at least 9.3x the best "
                           "on each of 3 region(s)")
    assert "2 searched node by node" in str(CoarseRecord(5, 0.3, 2))
