"""Thread-policy benchmark: what tessera's executor costs on top of the backends it chains.

1. single: a one-partition plan vs the same backend run natively (goal: speed >= 0.98x).
2. chain: the model cut into k partitions in a row (all onnxruntime, or alternating
   onnxruntime/openvino), run by tessera, vs the sum of its parts each run alone
   (goal: <= 1.05x).
3. policy: ten partitions chained with each backend's own default pools (spinning ONNX
   Runtime sessions, OpenVINO's defaults) vs tessera's shared policy, both against the whole
   model in one native session. This is the "chained sessions fight for the cores" problem
   and its fix. Each configuration runs in its own process: idle pools of one configuration
   keep spinning into the next one's timings (measured here: 10x slower for ~1 s).

Every number is timed in rounds of blocks (bench/_rounds.py) and ratios are taken in the same
run. Writes bench/results/threads.{md,json}.

    python -m bench.threads [--models resnet-tiny bert-tiny] [--rounds 3] [--seconds 0.5]
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from bench._child import in_child
from bench._markdown import table_head, table_row
from bench._report import arguments, by_model, publish
from bench._rounds import Block, in_rounds, machine, paired
from tessera import backends, zoo
from tessera._private.timing import time_block
from tessera.backends._threads import ThreadPolicy
from tessera.ir import Model, load_model
from tessera.placement import Plan
from tessera.placement.record._plan import make_partitions
from tessera.placement.search._threads import (
    CHAIN_TOLERANCE,
    SMALL_MS,
    one_thread,
    prefer_one_thread,
)
from tessera.runtime._compiled import CompiledModel, as_config, build_partitions
from tessera.runtime._compiled import compile as compile_model
from tessera.target import Target

MODELS = ["resnet-tiny", "bert-tiny", "mobilenetv2-tiny", "resnet50"]
SINGLE_BACKENDS = ["onnxruntime", "openvino"]
CHAIN_LENGTHS = [2, 4, 10]


def chained(model: Model, k: int, targets: Sequence[str], policy: ThreadPolicy
            ) -> CompiledModel:
    """`model` cut into k runs of consecutive nodes (topological order, hence convex), the
    i-th placed on targets[i % len(targets)], compiled under `policy`."""
    flow = model.dataflow
    n = len(flow)
    bounds = [round(i * n / k) for i in range(k + 1)]
    groups = [(sum(1 << j for j in range(lo, hi)), targets[i % len(targets)], None)
              for i, (lo, hi) in enumerate(itertools.pairwise(bounds)) if hi > lo]
    plan = Plan(make_partitions(flow, groups), "bench-chain")
    parts, failed = build_partitions(model, plan, policy)
    if failed:
        raise RuntimeError(f"chain of {k} on {targets}: {failed}")
    return CompiledModel(model, as_config(list(dict.fromkeys(targets)), {}), plan, parts,
                         policy)


def part_feeds(compiled: CompiledModel, feeds: dict[str, np.ndarray]
               ) -> list[dict[str, np.ndarray]]:
    """The inputs each partition sees in a run of the whole chain."""
    values: dict[str, Any] = dict(feeds)
    seen = []
    for part, built in zip(compiled.plan.partitions, compiled.parts, strict=True):
        inputs = {name: values[name] for name in part.inputs}
        seen.append(inputs)
        values.update(built.run(inputs))
    return seen


# what a single-backend row measures: (backend, the model's inputs, the backend run natively,
# tessera's plan on that backend alone) -> the row
MeasureSingle = Callable[[str, dict[str, np.ndarray], Callable[..., Any], CompiledModel],
                         dict[str, Any]]


def against_native(name: str, names: Sequence[str], measure: MeasureSingle
                   ) -> list[dict[str, Any]]:
    """A row per backend: the model (batch 1) run natively on it and compiled by tessera
    for it alone, measured; one backend's pools alive at a time."""
    path = zoo.export(name, 1)
    feeds = zoo.example_inputs(name, 1)
    rows = []
    for backend in names:
        native = backends.get(backend).native_runner(path.read_bytes())
        mine = compile_model(path, backend)
        rows.append(measure(backend, feeds, native, mine))
        del native, mine
        settle()
    return rows


def bench_single(name: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    def measure(backend: str, feeds: dict[str, np.ndarray], native: Callable[..., Any],
                mine: CompiledModel) -> dict[str, Any]:
        measured = in_rounds({"native": partial(native, feeds),
                              "tessera": partial(mine.run, feeds)},
                             rounds=rounds, seconds=seconds)
        return {"model": name, "backend": backend, "native": measured["native"].to_dict(),
                "tessera": measured["tessera"].to_dict(),
                "speed": paired(measured["native"], measured["tessera"]),
                "speed_of_medians": round(measured["native"].median_ms
                                          / measured["tessera"].median_ms, 4)}

    return against_native(name, SINGLE_BACKENDS, measure)


def bench_chain(name: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    """Each chain timed with its parts alone, with warm caches (each part in a loop) and
    with cold ones (each call after touching `FLUSH_BYTES`), and against the same compiled
    parts chained by the plainest loop (`bare_chain`), which is the floor for any executor.
    A mixed chain is also timed with the parts below `SMALL_MS` on one thread, the variant
    Collage measures and keeps when faster."""
    model = load_model(zoo.export(name, 1))
    feeds = zoo.example_inputs(name, 1)
    shared = ThreadPolicy.for_partitions(2)
    flush = cache_flush()
    rows = []
    for mix in (["onnxruntime"], ["onnxruntime", "openvino"]):
        for k in CHAIN_LENGTHS:
            chains = {"": chained(model, k, mix, shared)}
            if len(mix) > 1:
                chains["one-thread "] = chained(
                    model, k, one_thread_targets(model, k, mix, shared, feeds), shared)
            blocks: dict[str, Block] = {}
            for label, chain in chains.items():
                blocks[f"{label}chain"] = partial(chain.run, feeds)
                blocks[f"{label}bare chain"] = partial(bare_chain(chain), feeds)
                for i, (built, inputs) in enumerate(zip(chain.parts, part_feeds(chain, feeds),
                                                        strict=True)):
                    blocks[f"{label}part {i}"] = partial(built.run, inputs)
                    blocks[f"{label}cold part {i}"] = (partial(built.run, inputs), flush)
            measured = in_rounds(blocks, rounds=rounds, seconds=seconds / 4)
            count = len(chains[""].parts)
            small = [i for i, p in enumerate(chains.get("one-thread ", chains[""]).plan
                                             .partitions) if "-num-threads=1" in str(p.target)]
            del chains, blocks
            settle()
            row: dict[str, Any] = {"model": name, "targets": "/".join(mix), "k": count}
            for label in ("", "one-thread ") if len(mix) > 1 else ("",):
                entry = chain_entry(measured, label)
                if label:
                    row["one_thread"] = {**entry, "parts": small, "speedup": paired(
                        measured["chain"], measured[f"{label}chain"])}
                else:
                    row.update(entry)
            rows.append(row)
    return rows


def chain_entry(measured: dict[str, Any], label: str) -> dict[str, Any]:
    """A chain's time against its parts (warm and cold) and its bare chain, round by round."""
    def parts(prefix: str) -> list[Any]:
        return [m for key, m in measured.items()
                if key.startswith(f"{label}{prefix}part ")]

    chain = measured[f"{label}chain"]
    warm, cold = parts(""), parts("cold ")
    return {"chain": chain.to_dict(), "bare_chain": measured[f"{label}bare chain"].to_dict(),
            "sum_of_parts_ms": round(sum(m.median_ms for m in warm), 4),
            "sum_of_cold_parts_ms": round(sum(m.median_ms for m in cold), 4),
            "ratio": paired(chain, warm), "cold_ratio": paired(chain, cold),
            "vs_bare_chain": paired(chain, measured[f"{label}bare chain"])}


FLUSH_BYTES = 8 << 20  # more than a core's L2, a fair share of a shared L3


def cache_flush() -> Callable[[], object]:
    """Touches `FLUSH_BYTES` of memory: what the other partitions of a chain do to a part's
    caches between two of its runs."""
    junk = np.ones(FLUSH_BYTES, dtype=np.uint8)
    return partial(np.sum, junk)


def bare_chain(compiled: CompiledModel) -> Callable[[dict[str, np.ndarray]], dict[str, Any]]:
    """The same compiled parts chained by the plainest loop a user could write: each library
    called directly (ONNX Runtime's `session.run`, an OpenVINO infer request), no input
    checks, nothing freed. What tessera's executor adds is the chain's time over this."""
    steps = [(tuple(part.inputs), library_call(built))
             for part, built in zip(compiled.plan.partitions, compiled.parts, strict=True)]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        values: dict[str, Any] = dict(feeds)
        for names, call in steps:
            values.update(call({n: values[n] for n in names}))
        return values

    return run


def library_call(built: Any) -> Callable[[dict[str, np.ndarray]], dict[str, Any]]:
    names = [o.name for o in built.outputs]
    if built.backend == "onnxruntime":
        session = built.session
        return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))
    if built.backend == "openvino":
        request = built.compiled.create_infer_request()
        return lambda feeds: dict(zip(names, request.infer(feeds, share_inputs=True)
                                      .to_tuple(), strict=True))
    return built._run  # type: ignore[no-any-return]


def one_thread_targets(model: Model, k: int, mix: Sequence[str], policy: ThreadPolicy,
                       feeds: dict[str, np.ndarray]) -> list[str]:
    """Each partition's target as Collage picks it: on one thread where its part is below
    `SMALL_MS` alone and `prefer_one_thread` says so."""
    pooled = chained(model, k, mix, policy)
    variants = [one_thread(Target(mix[i % len(mix)])) for i in range(len(pooled.parts))]
    single = chained(model, k, [str(v or mix[i % len(mix)]) for i, v in enumerate(variants)],
                     policy)
    targets = []
    for i, (base, variant, inputs) in enumerate(zip(pooled.parts, single.parts,
                                                    part_feeds(pooled, feeds), strict=True)):
        alone = time_block(partial(base.run, inputs), seconds=0.1).median_ms
        chosen = prefer_one_thread(time_block(partial(variant.run, inputs), seconds=0.1)
                                   .median_ms, alone, len(pooled.parts))
        targets.append(str(variants[i]) if alone < SMALL_MS and chosen and variants[i]
                       else mix[i % len(mix)])
    return targets


POLICY_CONFIGS = {
    "whole model, native onnxruntime": ([], ""),
    "10 x onnxruntime, native pools": (["onnxruntime"], "native"),
    "10 x onnxruntime, shared policy": (["onnxruntime"], "shared"),
    "10 x onnxruntime/openvino, native pools": (["onnxruntime", "openvino"], "native"),
    "10 x onnxruntime/openvino, shared policy": (["onnxruntime", "openvino"], "shared"),
}


def policy_child(name: str, label: str, seconds: float) -> float:
    """One configuration of the policy section, alone in this process: idle pools of another
    configuration would otherwise keep spinning into its timings (that is the problem)."""
    path = zoo.export(name, 1)
    feeds = zoo.example_inputs(name, 1)
    mix, policy = POLICY_CONFIGS[label]
    if not mix:
        runner = backends.get("onnxruntime").native_runner(path.read_bytes())
        return time_block(lambda: runner(feeds), seconds=seconds).median_ms
    chain = chained(load_model(path), 10, mix,
                    ThreadPolicy(policy, ThreadPolicy.for_partitions(1).budget))  # type: ignore[arg-type]
    return time_block(lambda: chain.run(feeds), seconds=seconds).median_ms


def bench_policy(name: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    medians: dict[str, list[float]] = {label: [] for label in POLICY_CONFIGS}
    for _ in range(rounds):
        for label in POLICY_CONFIGS:
            ms = in_child("threads", "policy_child", name, label, seconds, check=True)
            medians[label].append(float(ms))
    base = statistics.median(medians["whole model, native onnxruntime"])
    rows = []
    for label, values in medians.items():
        mid = statistics.median(values)
        rows.append({"model": name, "config": label, "median_ms": round(mid, 4),
                     "spread": round((max(values) - min(values)) / mid, 4),
                     "vs_whole": round(mid / base, 4)})
    return rows


def settle(seconds: float = 1.0) -> None:
    """Let the pools of what was just timed (and freed) stop spinning."""
    gc.collect()
    time.sleep(seconds)


def needs(names: Sequence[str], bench: str) -> bool:
    """Whether the backends `bench` times are installed (if not, it says so)."""
    missing = [b for b in names if not backends.get(b).is_available().ok]
    if missing:
        print(f"bench.{bench} needs {', '.join(missing)}: pip install -e '.[all]'")
    return not missing


CHAIN_COLUMNS = ("chain ms", "bare chain ms", "parts, warm ms", "parts, cold ms",
                 "chain / warm parts (lower is cheaper)", "chain / cold parts (lower is cheaper)",
                 "chain / bare chain (lower is cheaper)")


def markdown(result: dict[str, Any]) -> str:
    out = ["# Thread-policy benchmark", "", f"{result['machine']}. Times are the median of the "
           f"block medians over {result['rounds']} rounds; ratios are paired: the median over "
           "rounds of the ratio within each round, so drift between rounds cancels.", "",
           "## Single partition vs native (goal: speed >= 0.98)", "",
           *table_head("model", "backend", "native ms", "tessera ms",
                       "speed vs native (higher is faster)", align="llrrr")]
    out += [table_row(r["model"], r["backend"], f"{r['native']['median_ms']:.4f}",
                      f"{r['tessera']['median_ms']:.4f}", f"{r['speed']:.3f}")
            for r in result["single"]]
    out += ["", "## A chain of k partitions vs the sum of its parts alone (goal: <= 1.05)", "",
            "Each part alone is timed warm (in a loop, its code and data in cache) and cold "
            f"(each call after touching {FLUSH_BYTES >> 20} MB, as the other parts of a chain "
            "do). The bare chain is the same compiled parts called by the plainest Python "
            "loop, straight into each library: what the executor adds is chain / bare chain.",
            "", *table_head("model", "targets", "k", *CHAIN_COLUMNS, align="llr" + "r" * 7)]
    out += [table_row(r["model"], r["targets"], r["k"], *chain_cells(r))
            for r in result["chain"]]
    mixed = [r for r in result["chain"] if "one_thread" in r]
    out += ["", "### Mixed chains with Collage's one-thread choice", "",
            f"The same chains, with each part below {SMALL_MS} ms that runs alone on one "
            f"thread at most {CHAIN_TOLERANCE}x slower than with its pool set to one thread, "
            "as Collage does, and the speed-up over the chain above.", "",
            *table_head("model", "k", "parts on one thread", *CHAIN_COLUMNS,
                        "speed-up (higher is faster)", align="lrr" + "r" * 8)]
    out += [table_row(r["model"], r["k"], len(v["parts"]), *chain_cells(v),
                      f"{v['speedup']:.3f}") for r in mixed for v in [r["one_thread"]]]
    out += ["", "## Chained pools: each backend's defaults vs the shared policy", "",
            *table_head("model", "configuration", "ms (lower is faster)",
                        "spread (lower is steadier)", "time vs whole model (lower is faster)",
                        align="llrrr")]
    out += [table_row(r["model"], r["config"], f"{r['median_ms']:.4f}", f"{r['spread']:.2f}",
                      f"{r['vs_whole']:.2f}x") for r in result["policy"]]
    return "\n".join(out) + "\n"


def chain_cells(r: dict[str, Any]) -> list[str]:
    return [f"{r['chain']['median_ms']:.4f}", f"{r['bare_chain']['median_ms']:.4f}",
            f"{r['sum_of_parts_ms']:.4f}", f"{r['sum_of_cold_parts_ms']:.4f}",
            f"{r['ratio']:.3f}", f"{r['cold_ratio']:.3f}", f"{r['vs_bare_chain']:.3f}"]


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, models=MODELS, any_models=True, rounds=3, seconds=0.5,
                     out="bench/results/threads").parse_args(argv)
    if not needs(SINGLE_BACKENDS, "threads"):
        return 2
    result: dict[str, Any] = {"machine": machine(), "rounds": args.rounds}
    by_model(args, result, single=bench_single, chain=bench_chain, policy=bench_policy)
    publish(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
