"""The ONNX backend node-test suite (generated in memory by onnx) run on tessera's backends.

For each case and backend: a node the backend's `supports()` does not claim makes the case a
skip, with the reason. A claimed case is compiled and run through the backend's tessera
protocol; if it fails, it is run natively (the backend's own API) to tell a tessera bug from a
backend limitation. Full run: `python -m tests.backends.node_suite --out docs/coverage.md`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera import backends, load_model
from tessera.errors import ModelError, TesseraError

BACKENDS = ("onnxruntime", "reference")


@dataclass(frozen=True)
class Outcome:
    case: str
    backend: str
    status: str  # pass | skip | fail-native (fails natively too) | fail (tessera's fault)
    reason: str = ""


def collect_cases() -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sorted(collect_testcases(), key=lambda c: c.name)


def sample(cases: Sequence[Any], count: int) -> list[Any]:
    """Every k-th case by name: deterministic, and spread across op families."""
    step = max(1, len(cases) // count)
    return list(cases[::step])


def _tensor_only(model: Any) -> str | None:
    for value in (*model.graph.input, *model.graph.output):
        if not value.type.HasField("tensor_type"):
            return f"{value.name!r} is a {value.type.WhichOneof('value')} value, not a tensor"
    return None


def _compare(got: Sequence[Any], expected: Sequence[Any], rtol: float, atol: float) -> None:
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for g, e in zip(got, expected, strict=True):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, f"shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "OUS":
            assert np.array_equal(g.astype(object), e.astype(object)), "values differ"
        else:
            assert g.dtype == e.dtype, f"dtype {g.dtype}, expected {e.dtype}"
            np.testing.assert_allclose(g.astype(np.float64) if e.dtype.kind == "b" else g, e,
                                       rtol=rtol, atol=atol, equal_nan=True)


def _native_runner(backend: str, model: Any) -> Callable[[dict[str, Any]], list[Any]]:
    if backend == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, feeds)
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    return lambda feeds: evaluator.run(None, feeds)


def _array(value: Any) -> Any:
    """Test data stores exotic dtypes (float8, int4, ...) as TensorProto: make them arrays."""
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _run_all(run: Callable[[dict[str, Any]], list[Any]], case: Any, names: list[str]) -> None:
    for inputs, outputs in case.data_sets:
        feeds = {n: _array(v) for n, v in zip(names, inputs, strict=True)}
        _compare(run(feeds), [_array(o) for o in outputs], case.rtol, case.atol)


def run_case(case: Any, backend_name: str) -> Outcome:
    backend = backends.get(backend_name)
    not_tensor = _tensor_only(case.model)
    if not_tensor:
        return Outcome(case.name, backend_name, "skip", f"executor: {not_tensor}")
    try:
        model = load_model(case.model)
    except ModelError as err:
        return Outcome(case.name, backend_name, "skip", f"model: {err}")
    types = model.dataflow.value_types
    for node in model.dataflow.nodes:
        support = backend.supports(node, model.opset, types)
        if not support:
            return Outcome(case.name, backend_name, "skip", support.reason)
    names = model.input_names
    try:
        compiled = backend.compile(model.proto)
        _run_all(lambda feeds: [compiled.run(feeds)[o.name] for o in compiled.outputs],
                 case, names)
        return Outcome(case.name, backend_name, "pass")
    except (TesseraError, AssertionError) as err:
        failure = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    try:
        _run_all(_native_runner(backend_name, case.model), case, names)
    except Exception as err:  # the backend itself cannot do it either
        native = (str(err).splitlines() or [""])[0][:120]
        return Outcome(case.name, backend_name, "fail-native",
                       f"{failure}; natively: {type(err).__name__}: {native}")
    return Outcome(case.name, backend_name, "fail", failure)


def run_suite(cases: Sequence[Any], names: Sequence[str] = BACKENDS) -> list[Outcome]:
    return [run_case(case, name) for name in names for case in cases]


def coverage_markdown(outcomes: list[Outcome], total: int, seconds: float) -> str:
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        counts[o.backend][o.status] += 1
        if o.status != "pass":
            reasons[o.backend][o.reason.split(":")[0][:70]] += 1
    lines = [
        "# ONNX node-test coverage",
        "",
        f"All {total} node cases of `onnx.backend.test.case.node.collect_testcases()` (onnx "
        f"{_version('onnx')}), run by `python -m tests.backends.node_suite --out "
        f"docs/coverage.md` in {seconds:.0f} s on a 2-core CPU. Each case runs through "
        "tessera's backend protocol (`supports` → `compile` → `run`); a claimed case that "
        "fails is re-run natively through the backend's own API.",
        "",
        "- **pass**: claimed by `supports()`, and correct within the case's tolerances.",
        "- **skip**: some node is not claimed by `supports()` (the reason is recorded).",
        "- **fail-native**: claimed, fails in tessera, and fails natively too.",
        "- **fail**: claimed, fails in tessera, passes natively: a tessera bug (must be 0).",
        "",
        "| backend | version | pass | skip | fail-native | fail |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, c in counts.items():
        lines.append(f"| {name} | {_version(name)} | {c['pass']} | {c['skip']} | "
                     f"{c['fail-native']} | {c['fail']} |")
    lines += ["", "Most onnxruntime `fail-native` cases (about 150) have float8, int4 or bfloat16 "
              "tensors at the model boundary: ONNX Runtime has kernels for them, but its Python "
              "API cannot take or return those numpy (`ml_dtypes`) arrays. Inside a partition "
              "such types are fine; a partition boundary must not carry them."]
    for name, counter in reasons.items():
        lines += ["", f"## {name}: most common reasons for skip and fail-native", ""]
        lines += [f"- {count} × {reason}" for reason, count in counter.most_common(12)]
    failing = [o for o in outcomes if o.status in ("fail", "fail-native")]
    if failing:
        lines += ["", "## Claimed cases that fail", ""]
        lines += [f"- `{o.case}` on {o.backend} ({o.status}): {o.reason}" for o in failing]
    return "\n".join(lines) + "\n"


def _version(name: str) -> str:
    from importlib.metadata import version

    return version("onnx" if name == "reference" else name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the coverage table here (markdown)")
    parser.add_argument("--sample", type=int, default=0, help="run only about N cases")
    args = parser.parse_args(argv)
    cases = collect_cases()
    if args.sample:
        cases = sample(cases, args.sample)
    start = time.perf_counter()
    outcomes = run_suite(cases)
    text = coverage_markdown(outcomes, len(cases), time.perf_counter() - start)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)
    print(text)
    return 1 if any(o.status == "fail" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
