"""Per-call overhead: what tessera's `run` costs on top of the backend's own call.

1. one partition: a plan of one partition on ONNX Runtime or OpenVINO, run by
   `CompiledModel.run`, against the backend's own call on the very same compiled object and
   inputs (`InferenceSession.run(None, feeds)`; `InferRequest.infer(feeds, share_inputs=True)`
   on a request of the same compiled model), and against the backend run natively with its
   own defaults (`tessera bench`'s native row). Goal: at most 3 us over the backend's own
   call, and on the MLP at least 0.9x the native speed.
2. mixed plan: the model cut into k partitions in a row, alternating ONNX Runtime and
   OpenVINO, run by tessera, against the sum of each partition's own backend call on the
   inputs it sees in the chain: the executor's overhead per partition.

Every configuration runs alone in its own block, the blocks repeat in rounds
(bench/_rounds.py), and differences and ratios are paired within rounds. Writes
bench/results/overhead.{md,json}.

    python -m bench.overhead [--models mlp gpt2-block-tiny] [--rounds 5] [--seconds 0.5]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from bench._markdown import preamble, table_head, table_row
from bench._report import arguments, by_model, header, publish
from bench._rounds import Measured, in_rounds, paired
from bench.threads import against_native, chained, needs, part_feeds, settle
from tessera import zoo
from tessera.backends import Compiled
from tessera.backends._threads import ThreadPolicy
from tessera.ir import load_model
from tessera.runtime._compiled import CompiledModel

MODELS = ["mlp", "gpt2-block-tiny"]
BACKENDS = ["onnxruntime", "openvino"]
CHAIN = [2, 4]
GOAL_US = 3.0
GOAL_SPEED = 0.9


def own_call(part: Compiled, feeds: Mapping[str, Any]) -> Callable[[], object]:
    """The backend's own call on `part`'s compiled object, as its users would make it."""
    session = getattr(part, "session", None)
    if session is not None:
        return partial(session.run, None, dict(feeds))
    request = part.compiled.create_infer_request()  # type: ignore[attr-defined]
    return partial(request.infer, dict(feeds), share_inputs=True)


def over_us(mine: Measured, base: Measured | list[Measured]) -> float:
    """The median over rounds of (mine - base) in microseconds (a list summed per round)."""
    group = base if isinstance(base, list) else [base]
    sums = [sum(x) for x in zip(*(g.blocks_ms for g in group), strict=True)]
    return round(float(statistics.median((a - b) * 1000 for a, b in zip(
        mine.blocks_ms, sums, strict=False))), 2)


def bench_single(name: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    def measure(backend: str, feeds: dict[str, Any], native: Callable[..., Any],
                mine: CompiledModel) -> dict[str, Any]:
        assert len(mine.plan.partitions) == 1
        mine.run(feeds)  # the first call is checked in full; the timed ones are not
        measured = in_rounds({"native defaults": partial(native, feeds),
                              "own call": own_call(mine.parts[0], feeds),
                              "tessera": partial(mine.run, feeds)},
                             rounds=rounds, seconds=seconds)
        return {"model": name, "backend": backend,
                **{k: v.to_dict() for k, v in measured.items()},
                "over_own_us": over_us(measured["tessera"], measured["own call"]),
                "speed_vs_native": paired(measured["native defaults"], measured["tessera"])}

    return against_native(name, BACKENDS, measure)


def bench_mixed(name: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    path = zoo.export(name, 1)
    model = load_model(path)
    feeds = zoo.example_inputs(name, 1)
    rows = []
    for k in CHAIN:
        if k > len(model.dataflow):
            continue
        compiled = chained(model, k, BACKENDS, ThreadPolicy.for_partitions(k))
        seen = part_feeds(compiled, feeds)
        blocks: dict[str, Callable[[], object]] = {"tessera": partial(compiled.run, feeds)}
        blocks.update({f"part {i}": own_call(part, inputs)
                       for i, (part, inputs) in enumerate(zip(compiled.parts, seen,
                                                              strict=True))})
        measured = in_rounds(blocks, rounds=rounds, seconds=seconds)
        parts = [measured[f"part {i}"] for i in range(k)]
        over = over_us(measured["tessera"], parts)
        rows.append({"model": name, "k": k, "targets": "/".join(BACKENDS),
                     "tessera": measured["tessera"].to_dict(),
                     "parts_sum_ms": round(sum(p.median_ms for p in parts), 4),
                     "over_us": over, "per_partition_us": round(over / k, 2)})
        del compiled
        settle()
    return rows


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def markdown(result: Mapping[str, Any]) -> str:
    out = [*preamble("Per-call overhead: tessera's `run` on top of the backend's own call",
                     result, f". Batch 1. Each configuration timed alone in blocks of "
                     f"{result['seconds']} s, {result['rounds']} rounds; times are the median "
                     "of the block medians, differences and ratios are paired within rounds."),
           "## One partition", "",
           "`own call`: the backend's own call on the same compiled object and inputs "
           "(ONNX Runtime `InferenceSession.run(None, feeds)`, OpenVINO "
           "`InferRequest.infer(feeds, share_inputs=True)`). `native defaults`: the backend "
           "run natively with its own default settings (`tessera bench`'s native row). "
           f"Goals: at most {GOAL_US:g} us over the own call; on the MLP, "
           f"{GOAL_SPEED:g}x the native speed or better.", "",
           *table_head("model", "backend", "native defaults ms", "own call ms", "tessera ms",
                       "tessera over own call, us (lower is better)",
                       "speed vs native defaults (higher is faster)", "goal")]
    for r in result["single"]:
        ok = r["over_own_us"] <= GOAL_US and (r["model"] != "mlp"
                                              or r["speed_vs_native"] >= GOAL_SPEED)
        out.append(table_row(r["model"], r["backend"], f"{r['native defaults']['median_ms']:.4f}",
                             f"{r['own call']['median_ms']:.4f}",
                             f"{r['tessera']['median_ms']:.4f}", f"{r['over_own_us']:.2f}",
                             f"{r['speed_vs_native']:.2f}x", _mark(ok)))
    out += ["", "## Mixed plan: the executor per partition", "",
            "The model cut into k partitions in a row, alternating the targets; `parts` is the "
            "sum of each partition's own backend call on the inputs it sees in the chain.", "",
            *table_head("model", "k", "targets", "tessera ms", "parts ms",
                        "overhead us (lower is better)", "per partition us (lower is better)")]
    out += [table_row(r["model"], r["k"], r["targets"], f"{r['tessera']['median_ms']:.4f}",
                      f"{r['parts_sum_ms']:.4f}", f"{r['over_us']:.2f}",
                      f"{r['per_partition_us']:.2f}") for r in result["mixed"]]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, models=MODELS, rounds=5, seconds=0.5,
                     out="bench/results/overhead").parse_args(argv)
    if not needs(BACKENDS, "overhead"):
        return 2
    result = header("overhead", argv, rounds=args.rounds, seconds=args.seconds)
    by_model(args, result, single=bench_single, mixed=bench_mixed)
    publish(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
