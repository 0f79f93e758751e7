"""Dynamic shapes: one compiled plan for a model with symbolic dimensions, timed at each
point of its shape profile against the backends run natively at the same shapes.

Per model, exported with dynamic axes (`zoo.export(name, dynamic=True)`):

- `ORT native` and `OpenVINO native`: a default onnxruntime.InferenceSession and
  `openvino.Core().compile_model(path, "CPU")` of the dynamic model, each fed every shape;
- `tessera`: `tessera.compile(path, "openvino,onnxruntime,cpu", shapes=PROFILE)`, compiled
  cold (empty caches), one plan for every point.

At each point the three run on the same inputs, timed in rounds of blocks
(bench/_rounds.py); the ratio is tessera's speed over the best native backend's at that
point, paired within rounds (higher is faster). Compile time: the cold three-point compile
against a cold compile with a one-point profile (the middle point). Writes
bench/results/dynamic.{md,json} (`--out` for another directory).

    python -m bench.dynamic [--models bert-base mobilenetv2] [--rounds 3] [--seconds 0.5]
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, each_model, header, write
from bench._rounds import in_rounds, paired
from bench.precision import cold_caches
from tessera import zoo

CONFIG = "openvino,onnxruntime,cpu"
# each model's profile: three points, and the one-point profile a single-shape compile uses
PROFILES: dict[str, tuple[dict[str, list[int]], dict[str, list[int]]]] = {
    "bert-base": ({"batch": [1], "sequence": [32, 64, 128]},  # its positions stop at 128
                  {"batch": [1], "sequence": [64]}),
    "mobilenetv2": ({"batch": [1, 4, 8]}, {"batch": [4]}),
}
MODELS = list(PROFILES)


def feeds_at(name: str, path: str, sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Inputs of the model at `sizes`: token ids below the vocabulary, images in N(0, 1)."""
    from tessera.ir import load_model

    model = load_model(path, require_static=False).at(dict(sizes))
    rng = np.random.default_rng(0)
    high = zoo.ZOO.get(name).high or 0
    feeds = {}
    for spec in model.input_names:
        shape = model.static_shape(spec)
        assert shape is not None
        kind = model.dataflow.value_types[spec].elem_type
        feeds[spec] = (rng.integers(0, high, shape).astype(np.int64) if kind == 7 else
                       rng.standard_normal(shape).astype(np.float32))
    return feeds


def natives(path: str) -> dict[str, Callable[[dict[str, np.ndarray]], Any]]:
    import onnxruntime as ort
    import openvino as ov

    session = ort.InferenceSession(path)  # the defaults, as a user creates one
    compiled = ov.Core().compile_model(path, "CPU")
    request = compiled.create_infer_request()
    return {"ORT native": lambda feeds: session.run(None, feeds),
            "OpenVINO native": lambda feeds: request.infer(feeds)}


def compile_cold(path: str, shapes: Mapping[str, list[int]], cache: Path) -> tuple[Any, float]:
    import tessera

    with cold_caches(cache):
        began = time.perf_counter()
        compiled = tessera.compile(path, CONFIG, shapes=dict(shapes))
        return compiled, round(time.perf_counter() - began, 2)


def bench_model(name: str, rounds: int, seconds: float, work: Path) -> dict[str, Any]:
    from tessera.config._shapes import ShapeProfile

    profile, single = PROFILES[name]
    path = str(zoo.export(name, dynamic=True))
    _, single_seconds = compile_cold(path, single, work / f"{name}-single")
    compiled, profile_seconds = compile_cold(path, profile, work / f"{name}-profile")
    from tessera.ir import load_model

    symbols = load_model(path, require_static=False).symbols
    points = ShapeProfile.parse(profile).points(symbols)
    runners = natives(path)
    rows: list[dict[str, Any]] = []
    for point in points:
        feeds = feeds_at(name, path, point.as_dict())
        want = runners["ORT native"](feeds)[0]
        got = next(iter(compiled.run(feeds).values()))
        error = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
        blocks: dict[str, Callable[[], object]] = {
            label: functools.partial(run, feeds) for label, run in runners.items()}
        blocks["tessera"] = functools.partial(compiled.run, feeds)
        measured = in_rounds(blocks, rounds=rounds, seconds=seconds, min_runs=3, warmup=2)
        best = min(runners, key=lambda label: measured[label].median_ms)
        rows.append({"point": str(point), "best_native": best,
                     "ms": {label: m.median_ms for label, m in measured.items()},
                     "measured": {label: m.to_dict() for label, m in measured.items()},
                     "speed_vs_best_native": paired(measured[best], measured["tessera"]),
                     "max_abs_vs_ort": error})
    return {"model": name, "profile": str(ShapeProfile.parse(profile)),
            "single_profile": str(ShapeProfile.parse(single)), "plan": compiled.plan.summary(),
            "single_compile_seconds": single_seconds, "profile_compile_seconds": profile_seconds,
            "compile_ratio": round(profile_seconds / single_seconds, 2), "points": rows}


def markdown(result: Mapping[str, Any]) -> str:
    lines = [*preamble("Dynamic shapes: one plan for every shape", result),
             f"Config `{CONFIG}`. Each model is exported with dynamic axes and compiled once, "
             "cold, with a three-point shape profile; at each point tessera's plan and the "
             "backends run natively on the dynamic model (default sessions) are timed on the "
             f"same inputs in {result['rounds']} rounds of {result['seconds']} s blocks. "
             "`speed vs best native` is the best native backend's time over tessera's, "
             "paired within rounds (higher is faster; 1.00 is a tie).", ""]
    for entry in result["results"]:
        lines += [f"## {entry['model']}", "",
                  f"Profile `{entry['profile']}`; plan: {entry['plan']}.", "",
                  *table_head("point", "ORT native ms", "OpenVINO native ms", "tessera ms",
                              "best native", "speed vs best native (higher is faster)",
                              "max abs vs ORT (lower is closer)")]
        lines += [table_row(row["point"], f"{row['ms']['ORT native']:.3f}",
                            f"{row['ms']['OpenVINO native']:.3f}",
                            f"{row['ms']['tessera']:.3f}", row["best_native"],
                            f"{row['speed_vs_best_native']:.2f}x",
                            f"{row['max_abs_vs_ort']:.2e}")
                  for row in entry["points"]]
        lines += ["", f"Cold compile: {entry['profile_compile_seconds']} s with the three-point "
                      f"profile, {entry['single_compile_seconds']} s with one point "
                      f"(`{entry['single_profile']}`): {entry['compile_ratio']}x "
                      "(lower is cheaper).", ""]
    for name, why in result.get("failed", {}).items():
        lines += [f"## {name}", "", f"Failed: {why}", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, models=MODELS, choices=True, rounds=3, seconds=0.5,
                     out=RESULTS).parse_args(argv)
    top = header("dynamic", argv, rounds=args.rounds, seconds=args.seconds, config=CONFIG)

    def written(results: list[dict[str, Any]], failed: dict[str, str]) -> None:
        done = {**top, "results": results, "failed": failed}
        write(args.out / "dynamic", done, markdown(done))

    with tempfile.TemporaryDirectory(prefix="tessera-dynamic-") as tmp:
        results, failed = each_model(
            args.models, lambda name: bench_model(name, args.rounds, args.seconds, Path(tmp)),
            written)
    print(markdown({**top, "results": results, "failed": failed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
