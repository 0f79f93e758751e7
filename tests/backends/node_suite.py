"""The ONNX backend node-test suite (generated in memory by onnx) run on tessera's backends.

For each case and backend: a node the backend's `supports()` does not claim makes the case a
skip, with the reason. A claimed case is compiled and run through the backend's tessera
protocol; if it fails, it is run natively (the backend's own API) to tell a tessera bug from a
backend limitation. Full run: `python -m tests.backends.node_suite --out docs/coverage.md`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tessera
from tessera import backends, load_model
from tessera.backends import NativeRunner
from tessera.errors import ModelError, PartitionError, TesseraError

ALL = tuple(sorted(backends.names(), key=lambda b: backends.get(b).rank))  # plugins too
BACKENDS = tuple(b for b in ALL if backends.get(b).is_available().ok)


MODES = ("protocol", "tessera", "fallback")


@dataclass(frozen=True)
class Outcome:
    case: str
    backend: str
    status: str  # pass | skip | fail-native (fails natively too) | fail (tessera's fault)
    reason: str = ""
    mode: str = "protocol"  # protocol: supports/compile/run; tessera: tessera.compile with
    # only this backend, fallback off; fallback: the same with fallback to the reference


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
            atol = max(atol, _resolution(e))
            np.testing.assert_allclose(g.astype(np.float64) if e.dtype.kind == "b" else g, e,
                                       rtol=rtol, atol=atol, equal_nan=True)


def _resolution(expected: Any) -> float:
    """8 ulp at the output's largest finite magnitude. Some cases ask for atol 1e-7 on float32
    outputs in the hundreds (DFT, STFT), which no float32 implementation can meet."""
    if expected.dtype.name not in ("float16", "float32", "float64") or not expected.size:
        return 0.0
    finite = np.abs(expected[np.isfinite(expected)])
    return 8 * float(np.finfo(expected.dtype).eps) * float(finite.max()) if finite.size else 0.0


def _native_runner(backend_name: str, model: Any) -> NativeRunner | None:
    """The backend's own library, without tessera (`Backend.native_runner`); None where the
    library has no ONNX entry of its own (torch: tessera's converter is the only way in, so
    a torch failure is always tessera's)."""
    backend = backends.get(backend_name)
    return backend.native_runner(model.SerializeToString()) if backend.native_import else None


def _array(value: Any) -> Any:
    """Test data stores exotic dtypes (float8, int4, ...) as TensorProto: make them arrays."""
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _run_all(run: Callable[[dict[str, Any]], Sequence[Any]], case: Any, names: list[str]
             ) -> None:
    for inputs, outputs in case.data_sets:
        feeds = {n: _array(v) for n, v in zip(names, inputs, strict=True)}
        _compare(run(feeds), [_array(o) for o in outputs], case.rtol, case.atol)


def run_case(case: Any, backend_name: str, mode: str = "protocol") -> Outcome:
    def outcome(status: str, reason: str = "") -> Outcome:
        return Outcome(case.name, backend_name, status, reason, mode)

    not_tensor = _tensor_only(case.model)
    if not_tensor:
        return outcome("skip", f"executor: {not_tensor}")
    random_ops = sorted({n.op_type for n in case.model.graph.node} & _RANDOM)
    if random_ops:
        return outcome("skip", f"nondeterministic: {', '.join(random_ops)} draws random "
                               "values; no run can match the recorded ones")
    try:
        model = load_model(case.model)
    except ModelError as err:
        return outcome("skip", f"model: {err}")
    names = model.input_names
    try:
        run = _tessera_runner(model, backend_name, mode)
    except _Unclaimed as err:
        return outcome("skip", str(err))
    except (TesseraError, AssertionError) as err:
        run, failure = None, f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    if run is not None:
        try:
            _run_all(run, case, names)
            return outcome("pass")
        except (TesseraError, AssertionError) as err:
            failure = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    try:
        native_run = _native_runner("reference" if mode == "fallback" else backend_name,
                                    case.model)
        if native_run is None:
            return outcome("fail", failure)
        _run_all(native_run, case, names)
    except Exception as err:  # the backend itself cannot do it either
        native = (str(err).splitlines() or [""])[0][:120]
        return outcome("fail-native", f"{failure}; natively: {type(err).__name__}: {native}")
    return outcome("fail", failure)


_RANDOM = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                     "RandomUniform", "RandomUniformLike"})


class _Unclaimed(Exception):
    pass


def _tessera_runner(model: Any, backend_name: str, mode: str
                    ) -> Callable[[dict[str, Any]], list[Any]]:
    if mode == "protocol":
        backend = backends.get(backend_name)
        flow = model.dataflow
        for node in flow.nodes:
            support = backend.supports(node, model.opset, flow.value_types, flow.constants)
            if not support:
                raise _Unclaimed(support.reason)
        compiled = backend.compile(model.proto)
        return lambda feeds: [compiled.run(feeds)[o.name] for o in compiled.outputs]
    try:
        # the cases' answers are fp32: no lower precision is searched
        whole = tessera.compile(model, backend_name, fallback=mode == "fallback",
                                accuracy="exact")
    except PartitionError as err:
        raise _Unclaimed(str(err).splitlines()[1].strip()[:200]) from err
    return lambda feeds: list(whole.run(feeds).values())


def run_suite(cases: Sequence[Any], names: Sequence[str] = BACKENDS,
              modes: Sequence[str] = MODES, isolate: bool = False) -> list[Outcome]:
    if not isolate:
        return [run_case(case, name, mode) for name in names for mode in modes
                for case in cases]
    worker = _Worker()
    try:
        return [worker.run_case(case.name, name, mode) for name in names for mode in modes
                for case in cases]
    finally:
        worker.close()


# Compiled backends (iree, tvm) can crash the process on a case (IREE traps an integer
# division by zero with SIGFPE) or hang: there every case runs in a worker process, which is
# restarted after a crash. The crashing case is then tried natively in a fresh worker.
_CASE_TIMEOUT_S = 600.0


class _Worker:
    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()

    def call(self, request: tuple[Any, ...]) -> tuple[bool, Any]:
        import signal

        self._conn.send(request)
        if self._conn.poll(_CASE_TIMEOUT_S):
            try:
                return True, self._conn.recv()
            except EOFError:
                pass
        if self._process.is_alive():
            self._process.kill()
            reason = f"hung for more than {_CASE_TIMEOUT_S:.0f} s"
        else:
            code = self._process.exitcode or 0
            reason = (f"crashed the process ({signal.Signals(-code).name})" if code < 0
                      else f"the process exited with {code}")
        self._process.join()
        self._start()
        return False, reason

    def run_case(self, case: str, backend: str, mode: str) -> Outcome:
        ok, result = self.call(("case", case, backend, mode))
        if ok:
            return Outcome(**result)
        native_ok, native = self.call(("native", case, backend, mode))
        if native_ok and native == "pass":
            return Outcome(case, backend, "fail", f"{result}; natively it passes", mode)
        return Outcome(case, backend, "fail-native", f"{result}; natively: {native}", mode)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the worker may be gone already
            self._conn.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()


def _serve(conn: Any) -> None:
    cases = {c.name: c for c in collect_cases()}
    while True:
        request = conn.recv()
        if request is None:
            return
        kind, name, backend, mode = request
        case = cases[name]
        if kind == "case":
            conn.send(dataclasses.asdict(run_case(case, backend, mode)))
            continue
        try:
            native_run = _native_runner("reference" if mode == "fallback" else backend,
                                        case.model)
            if native_run is None:
                conn.send("no native route")
                continue
            _run_all(native_run, case, load_model(case.model).input_names)
            conn.send("pass")
        except Exception as err:
            conn.send(f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}")


# Cases where the consensus oracle finds no majority (each implementation answers something
# else) and the backend sides with another independent implementation: the numeric guard
# keeps it there by design, since onnx.reference alone is no truth.
_MASKED_QK = ("in the masked qk output ONNX Runtime writes the lowest float where onnx.reference "
              "has -inf, and OpenVINO's attention output differs from both: no majority, and "
              "ONNX Runtime unoptimised shares ONNX Runtime's answer")
UNDECIDED = {
    (f"test_attention_4d_with_past_and_present_qk_matmul_bias_{mask}_mask_causal",
     "onnxruntime"): _MASKED_QK for mask in ("3d", "4d")
}


def fallback_gaps(outcomes: Sequence[Outcome]) -> dict[str, list[str]]:
    """Per backend, cases the reference passes natively that tessera with this backend and
    fallback on does not pass (the acceptance says: none, but the `UNDECIDED` ones)."""
    reference = {o.case for o in outcomes
                 if o.backend == "reference" and o.mode == "protocol" and o.status == "pass"}
    gaps: dict[str, list[str]] = {}
    for o in outcomes:
        if (o.case, o.backend) in UNDECIDED:
            continue
        if o.mode == "fallback" and o.case in reference and o.status != "pass":
            gaps.setdefault(o.backend, []).append(o.case)
    return gaps


def coverage_markdown(runs: Sequence[dict[str, Any]]) -> str:
    outcomes = [Outcome(**o) for run in runs for o in run["outcomes"]]
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        counts[o.backend, o.mode][o.status] += 1
        if o.status != "pass" and o.mode == "protocol":
            reasons[o.backend][o.reason.split(":")[0][:70]] += 1
    lines = [
        "# ONNX node-test coverage",
        "",
        f"The node cases of `onnx.backend.test.case.node.collect_testcases()` (onnx "
        f"{_version('onnx')}; {_TOTAL} cases), generated by `python -m tests.backends.node_suite "
        "--out docs/coverage.md` on a 2-core CPU. Every case runs in three ways:",
        "",
        "- **protocol**: the backend's `supports()` → `compile()` → `run()`;",
        "- **tessera**: `tessera.compile(model, '<backend>', fallback=False)`;",
        "- **fallback**: `tessera.compile(model, '<backend>')`, the reference taking what the "
        "backend does not claim.",
        "",
        "A claimed case that fails is re-run natively through the backend's own API (ONNX "
        "Runtime sessions, OpenVINO `read_model`, `iree-import-onnx` + `iree-compile`, TVM's "
        "Relax frontend; torch has no ONNX import, so its failures are always tessera's).",
        "",
        "- **pass**: claimed, and correct within the case's tolerances;",
        "- **skip**: some node is not claimed (the reason is recorded);",
        "- **fail-native**: claimed, fails in tessera, and fails natively too;",
        "- **fail**: claimed, fails in tessera, passes natively: a tessera bug (must be 0).",
        "",
        "| backend | version | mode | cases | pass | skip | fail-native | fail | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for mode in run["modes"]:
            c = counts[run["backend"], mode]
            lines.append(
                f"| {run['backend']} | {_version(run['backend'])} | {mode} | {run['cases']} | "
                f"{c['pass']} | {c['skip']} | {c['fail-native']} | {c['fail']} | "
                f"{run['seconds'][mode]:.0f} |")
    sampled = [r["backend"] for r in runs if r["cases"] < _TOTAL]
    if sampled:
        lines += ["", f"{', '.join(sampled)}: a deterministic sample (every k-th case by name), "
                      "since each case is a full compiler run (about 1 s each); the full run is "
                      "`python -m tests.backends.node_suite --backends iree tvm --full`."]
    gaps = fallback_gaps(outcomes)
    lines += ["", "**Fallback acceptance** (tessera with fallback passes every case the "
                  "reference passes natively): "
              + ("holds for every backend." if not any(gaps.values()) else
                 "; ".join(f"{b}: {len(g)} gap(s): {', '.join(g[:5])}"
                           for b, g in gaps.items()))]
    lines += ["", "Notes:", "",
              "- Float outputs are compared with atol raised to 8 ulp of the output's largest "
              "finite magnitude where the case asks for less (DFT and STFT cases ask for 1e-7 "
              "on float32 outputs in the hundreds, below float32 resolution).",
              "- ONNX Runtime's Python API cannot exchange bfloat16, float8, int4 or int2 "
              "arrays; tessera carries such partition inputs and outputs in a wider type "
              "through a Cast inside the session, which holds them exactly.",
              "- Where a backend accepts a node but computes something else than ONNX (found by "
              "this suite: OpenVINO's float64-as-float32, signed BitShift, ReduceMax over "
              "infinities, TopK ties; ONNX Runtime's MaxUnpool output_shape, ...), its "
              "`supports()` refuses the node with that reason: see `DEVIATIONS` in "
              "`tessera/backends/openvino.py` and `onnxruntime.py`."]
    for name, counter in reasons.items():
        lines += ["", f"## {name}: most common reasons for skip and fail-native (protocol)", ""]
        lines += [f"- {count} × {reason}" for reason, count in counter.most_common(10)]
    failing = [o for o in outcomes if o.status == "fail"]
    lines += ["", "## Claimed cases that fail in tessera but pass natively", ""]
    lines += [f"- `{o.case}` on {o.backend} ({o.mode}): " + (
        f"undecided by design: {UNDECIDED[o.case, o.backend]}"
        if (o.case, o.backend) in UNDECIDED else o.reason) for o in failing] or ["None."]
    return "\n".join(lines) + "\n"


_TOTAL = 1884
_SLOW = {"iree": 300, "tvm": 300}  # per-case compiles: sampled unless --full


def _version(name: str) -> str:
    from importlib.metadata import version

    dist = {"reference": "onnx", "iree": "iree-base-compiler", "tvm": "apache-tvm"}
    return version(dist.get(name, name))


def _kept_sections(path: Path) -> str:
    """What other tools write into the same page after this table (the conformance matrix,
    the fuzzing, the whole-suite comparison), kept."""
    text = path.read_text() if path.exists() else ""
    found = [text.index(m) for m in ("<!-- conformance:begin -->", "<!-- onnx-suite:")
             if m in text]
    return "\n" + text[min(found):] if found else ""


def main(argv: Sequence[str] | None = None) -> int:
    global _TOTAL
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the coverage table here (markdown); the per-"
                        "backend results go to docs/coverage/<backend>.json beside it")
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS))
    parser.add_argument("--sample", type=int, default=0, help="run only about N cases")
    parser.add_argument("--full", action="store_true", help="no sampling for iree and tvm")
    args = parser.parse_args(argv)
    every = collect_cases()
    _TOTAL = len(every)
    results = Path(args.out).parent / "coverage" if args.out else None
    failed = False
    for backend in args.backends:
        count = args.sample or (0 if args.full else _SLOW.get(backend, 0))
        cases = sample(every, count) if count else every
        outcomes, seconds = [], {}
        for mode in MODES:
            start = time.perf_counter()
            outcomes += run_suite(cases, [backend], [mode], isolate=backend in _SLOW)
            seconds[mode] = time.perf_counter() - start
        failed |= any(o.status == "fail" for o in outcomes)
        run = {"backend": backend, "cases": len(cases), "modes": list(MODES),
               "seconds": seconds, "outcomes": [dataclasses.asdict(o) for o in outcomes]}
        if results:
            results.mkdir(exist_ok=True)
            (results / f"{backend}.json").write_text(json.dumps(run, indent=0))
        print(backend, {m: collections.Counter(o.status for o in outcomes if o.mode == m)
                        for m in MODES}, flush=True)
    if args.out and results:
        runs = [json.loads((results / f"{b}.json").read_text()) for b in ALL
                if (results / f"{b}.json").exists()]
        Path(args.out).write_text(coverage_markdown(runs) + _kept_sections(Path(args.out)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
