"""The whole ONNX backend test suite (`onnx.backend.test.BackendTest`: node, real, simple,
pytorch-converted and pytorch-operator cases; the real ones are the `light` models shipped
with onnx, the published networks with generated weights) run through
tessera (`tessera.onnx_backend`, `openvino,onnxruntime,cpu`, greedy) and through ONNX Runtime's
own `onnxruntime.backend`, in one run, case by case. The bar: tessera fails no case that ONNX
Runtime alone passes (random ops aside), and every failure of tessera is a tessera error.

    python -m bench.onnx_suite                  # bench/results/onnx-suite.{md,json}, and the
                                                # differences table in docs/coverage.md
    python -m bench.onnx_suite --include 'test_sequence_map_.*' 'test_resize_.*'"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
import traceback
import unittest
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._markdown import table_head, table_row
from bench._report import arguments, commit, write
from bench.precision import cold_caches, environment

TARGETS = "openvino,onnxruntime,cpu"
RESULTS = Path(__file__).parent / "results"
COVERAGE = Path(__file__).parent.parent / "docs" / "coverage.md"
CATEGORIES = ("Node", "Real", "Simple", "PyTorchConverted", "PyTorchOperator")

# Ops whose outputs are random draws: no run reproduces the recorded values.
RANDOM_OPS = ("bernoulli", "multinomial", "random_normal", "random_uniform")
# Why the suite rejects answers that ONNX Runtime alone gives no better (regex over names).
SHARED_REASONS = (
    (r"test_bernoulli.*", "random draws, which no run reproduces"),
    (r"test_(dft|stft).*", "atol 1e-7 asked on float32 outputs in the hundreds, below "
                           "float32's resolution"),
    (r"test_attention_4d_with_past_and_present_qk_matmul_bias_\dd_mask_causal",
     "no majority among implementations on the masked scores (ONNX Runtime writes the lowest "
     "float where onnx.reference has -inf)"),
    (r"test_loop16_seq_none", "the suite's own comparison cannot compare its sequence output"),
    (r"test_(adagrad|adam|momentum|nesterov_momentum|gradient_of_).*",
     "training ops (ai.onnx.preview.training), which no inference backend runs"),
    (r"test_flexattention.*", "FlexAttention, which ONNX Runtime has no kernel for and "
                              "OpenVINO and the reference do not implement"),
)


@dataclass(frozen=True)
class CaseResult:
    case: str
    category: str
    status: str  # pass | fail (wrong answer, or the suite cannot compare) | error | skip
    error: str = ""  # the exception's type, qualified by module outside tessera
    message: str = ""
    seconds: float = 0.0

    @property
    def typed(self) -> bool:
        """A failure that is a tessera error, naming what went wrong."""
        return self.error.startswith("tessera.")


class _Recorder(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[CaseResult] = []

    def startTest(self, test: Any) -> None:
        super().startTest(test)
        self._began = time.perf_counter()

    def _record(self, test: Any, status: str, error: BaseException | None = None,
                message: str = "") -> None:
        category = type(test).__name__.removeprefix("OnnxBackend").removesuffix("ModelTest")
        name = test._testMethodName.removesuffix("_cpu")
        kind = ""
        if error is not None:
            cls = type(error)
            kind = (f"tessera.{cls.__name__}" if cls.__module__.startswith("tessera")
                    else cls.__name__ if cls.__module__ == "builtins"
                    else f"{cls.__module__}.{cls.__name__}")
            message = (str(error).strip().splitlines() or [""])[0][:200]
            if status == "error" and _raised_by_the_suite(error):
                status, kind = "fail", f"the suite's comparison: {kind}"
        seconds = round(time.perf_counter() - getattr(self, "_began", time.perf_counter()), 3)
        self.results.append(CaseResult(name, category, status, kind, message, seconds))

    def addSuccess(self, test: Any) -> None:
        self._record(test, "pass")

    def addFailure(self, test: Any, err: Any) -> None:
        self._record(test, "fail", err[1])

    def addError(self, test: Any, err: Any) -> None:
        self._record(test, "error", err[1])

    def addSkip(self, test: Any, reason: str) -> None:
        self._record(test, "skip", message=reason)


def _raised_by_the_suite(error: BaseException) -> bool:
    """An error the suite's own comparison raised (it cannot compare a sequence with an
    empty optional, say), not the backend."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "onnx/backend/test/runner" in frames[-1].filename.replace("\\", "/")


def _runner(backend: Any) -> Any:
    from onnx.backend.test import BackendTest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BackendTest(backend, __name__)


def _tests(backend: Any, include: Sequence[str]) -> Iterator[unittest.TestCase]:
    runner = _runner(backend)
    patterns = [re.compile(p) for p in include]
    loader = unittest.TestLoader()
    for cls in runner.test_cases.values():
        for test in loader.loadTestsFromTestCase(cls):
            name = test._testMethodName  # type: ignore[attr-defined]
            if not name.endswith("_cpu"):
                continue
            if patterns and not any(p.fullmatch(name.removesuffix("_cpu")) for p in patterns):
                continue
            yield test


def run(backend: Any, include: Sequence[str] = ()) -> list[CaseResult]:
    recorder = _Recorder()
    for test in _tests(backend, include):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                test.run(recorder)
            except BaseException as err:
                recorder._record(test, "error", err)
    return sorted(recorder.results, key=lambda r: (CATEGORIES.index(r.category), r.case))


def tessera_backend() -> Any:
    from tessera.onnx_backend import TesseraBackend

    return TesseraBackend.configured(TARGETS, partitioner="greedy")


def ort_backend() -> Any:
    import onnxruntime.backend

    return onnxruntime.backend


def is_random(case: str) -> bool:
    return any(op in case for op in RANDOM_OPS)


@dataclass(frozen=True)
class Comparison:
    tessera: list[CaseResult]
    onnxruntime: list[CaseResult]

    def _by_case(self, results: list[CaseResult]) -> dict[str, CaseResult]:
        return {r.case: r for r in results}

    def worse(self) -> list[tuple[CaseResult, CaseResult]]:
        """Cases ONNX Runtime alone passes and tessera does not (random ops aside)."""
        ort = self._by_case(self.onnxruntime)
        return [(t, ort[t.case]) for t in self.tessera
                if t.status != "pass" and t.case in ort and ort[t.case].status == "pass"
                and not is_random(t.case)]

    def better(self) -> list[tuple[CaseResult, CaseResult]]:
        ort = self._by_case(self.onnxruntime)
        return [(t, ort[t.case]) for t in self.tessera
                if t.status == "pass" and t.case in ort and ort[t.case].status != "pass"]

    def shared_failures(self) -> dict[str, list[str]]:
        """tessera's failures that ONNX Runtime alone fails too, by why (`SHARED_REASONS`;
        'other' for any no reason names)."""
        ort = self._by_case(self.onnxruntime)
        found: dict[str, list[str]] = {}
        for t in self.tessera:
            if t.status == "pass" or t.case not in ort or ort[t.case].status == "pass":
                continue
            reason = next((why for pattern, why in SHARED_REASONS
                           if re.fullmatch(pattern, t.case)), "other")
            found.setdefault(reason, []).append(t.case)
        return found

    def untyped(self) -> list[CaseResult]:
        """tessera's failures that are not tessera errors (a wrong answer is an assertion)."""
        return [t for t in self.tessera
                if t.status == "error" and not t.typed]


def _counts(results: Sequence[CaseResult]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = {c: collections.Counter()
                                                   for c in CATEGORIES}
    for r in results:
        counts[r.category][r.status] += 1
    return counts


def markdown(comparison: Comparison, meta: dict[str, Any]) -> str:
    t_counts, o_counts = _counts(comparison.tessera), _counts(comparison.onnxruntime)
    lines = [
        "## The whole ONNX backend suite: tessera against ONNX Runtime alone",
        "",
        f"`onnx.backend.test.BackendTest` (onnx {meta['onnx']}), run through "
        f"`tessera.onnx_backend` (`{TARGETS}`, greedy) and through "
        f"`onnxruntime.backend` (onnxruntime {meta['onnxruntime']}, openvino "
        f"{meta['openvino']}) in one run: `python -m bench.onnx_suite` at {meta['commit']} on "
        f"{meta['cpu']}. Its real models are the nine published networks of onnx's `light` "
        "folder, weights generated.",
        "",
        *table_head("category", "cases", "tessera pass", "ONNX Runtime pass", "tessera fail",
                    "ONNX Runtime fail", "skipped", align="lrrrrrr"),
    ]
    for category in CATEGORIES:
        t, o = t_counts[category], o_counts[category]
        total = sum(t.values())
        if not total:
            continue
        lines.append(table_row(category, total, t["pass"], o["pass"], t["fail"] + t["error"],
                               o["fail"] + o["error"], t["skip"]))
    worse, better, untyped = comparison.worse(), comparison.better(), comparison.untyped()
    random_ = [t for t in comparison.tessera if is_random(t.case) and t.status != "pass"]
    lines += ["", f"- **ONNX Runtime alone passes, tessera does not: {len(worse)}.**"]
    lines += [f"  - `{t.case}`: {t.status}, {t.error or 'wrong answer'}: {t.message}"
              for t, _ in worse]
    lines += [f"- Random ops, which no run can match (outside the bar): "
              f"{', '.join(f'`{t.case}`' for t in random_) or 'none'}."]
    lines += [f"- tessera passes, ONNX Runtime alone does not: {len(better)} (OpenVINO and the "
              "reference take what ONNX Runtime has no kernel for, or gets wrong)."]
    lines += [f"- tessera's failures that are not tessera errors: {len(untyped)}."]
    lines += [f"  - `{t.case}`: {t.error}: {t.message}" for t in untyped]
    errors = collections.Counter(t.error or "wrong answer" for t in comparison.tessera
                                 if t.status in ("fail", "error"))
    lines += ["- tessera's failures by kind: "
              + (", ".join(f"{n} × {e}" for e, n in errors.most_common()) or "none") + "."]
    shared = comparison.shared_failures()
    lines += ["", f"Every other failure of tessera ({sum(len(v) for v in shared.values())}) "
                  "ONNX Runtime alone fails too:", ""]
    lines += [f"- {reason}: {', '.join(f'`{c}`' for c in cases)}."
              for reason, cases in shared.items()]
    return "\n".join(lines) + "\n"


BEGIN = "<!-- onnx-suite: written by `python -m bench.onnx_suite` -->"
END = "<!-- /onnx-suite -->"


def from_json(results: dict[str, Any]) -> Comparison:
    return Comparison([CaseResult(**r) for r in results["tessera"]],
                      [CaseResult(**r) for r in results["onnxruntime"]])


def write_section(path: Path, section: str) -> None:
    """Puts the section between its markers in docs/coverage.md, which node_suite also writes."""
    text = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{section}{END}\n"
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def _meta() -> dict[str, Any]:
    import platform
    from importlib.metadata import version

    cpu = platform.processor() or "this CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"commit": commit(), "cpu": f"an {cpu}, {os.cpu_count()} cores",
            **{p: version(p) for p in ("onnx", "onnxruntime", "openvino")}}


def compare(include: Sequence[str] = ()) -> tuple[Comparison, dict[str, float]]:
    """ONNX Runtime alone, then tessera, on the cases `include` names (every case without),
    with empty caches; and the seconds each took."""
    seconds = {}
    # the real models' inputs and outputs are written under ONNX_HOME: a directory of the run
    with tempfile.TemporaryDirectory() as cache, cold_caches(Path(cache)), \
            environment(ONNX_HOME=str(Path(cache) / "onnx")):
        began = time.perf_counter()
        ort = run(ort_backend(), include)
        seconds["onnxruntime"] = time.perf_counter() - began
        began = time.perf_counter()
        ours = run(tessera_backend(), include)
        seconds["tessera"] = time.perf_counter() - began
    return Comparison(ours, ort), seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--include", nargs="*", default=[],
                        help="regular expressions over case names (without _cpu)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--json", help="also write every case's result here")
    args = parser.parse_args(argv)
    comparison, seconds = compare(args.include)
    ours, ort = comparison.tessera, comparison.onnxruntime
    meta = {**_meta(), "seconds": seconds}
    section = markdown(comparison, meta)
    print(section)
    results = {"meta": meta, "tessera": [dataclasses.asdict(r) for r in ours],
               "onnxruntime": [dataclasses.asdict(r) for r in ort]}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=0))
    if not args.no_write and not args.include:
        write(RESULTS / "onnx-suite", results, "# " + section.removeprefix("## "), indent=0)
        write_section(COVERAGE, section)
    return 1 if comparison.worse() or comparison.untyped() else 0


if __name__ == "__main__":
    sys.exit(main())
