"""The versioned-semantics conformance matrix: every ONNX op with more than one
`since_version` (from `onnx.defs`), at each of its versions from opset 7, in the attribute
forms its node test cases use (default axes, axis attributes, attributes that later became
inputs, ...), run on every backend and judged against the consensus oracle.

Each single-node case of `onnx.backend.test.case.node` is converted to the opset where the
op's version begins (`onnx.version_converter`, which rewrites attributes and inputs into that
version's form); a case the converter cannot express at that version is left out and
counted. A backend is judged only where its `supports()` claims the node; a claimed answer
the consensus is against is a failure, and every failure becomes a deviation entry of that
backend, so the matrix holds 0 of them.

    python -m bench.conformance           # docs/coverage.md, bench/results/conformance.json
    python -m bench.conformance --per-version 1 --ops Softmax BatchNormalization"""

from __future__ import annotations

import collections
import json
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._markdown import table_head, table_row
from bench._report import arguments, commit

ROOT = Path(__file__).resolve().parents[1]
COVERAGE = ROOT / "docs" / "coverage.md"
BEGIN, END = "<!-- conformance:begin -->", "<!-- conformance:end -->"
BACKENDS = ("onnxruntime", "openvino", "torch", "reference")


@dataclass(frozen=True)
class Case:
    op: str
    version: int
    name: str  # the node test case it was converted from
    model: Any  # onnx.ModelProto at opset `version`
    feeds: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    op: str
    version: int
    case: str
    backend: str
    status: str  # pass, skip (not claimed), fail (claimed, the consensus against), undecided
    detail: str = ""


def multi_version_ops() -> dict[str, list[int]]:
    """Op -> the opsets where each of its versions is first in effect from opset 7 on (a
    version older than 7 counts at 7), for ops of the default domain with more than one
    version."""
    from onnx import defs

    versions: dict[str, set[int]] = collections.defaultdict(set)
    for schema in defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx") and not schema.deprecated:
            versions[schema.name].add(schema.since_version)
    return {op: sorted({max(v, 7) for v in found if v >= 7 or (max(found) > 7 and
                        v == max(x for x in found if x <= 7))})
            for op, found in sorted(versions.items()) if len(found) > 1}


def at_version(model: Any, opset: int) -> Any:
    """`model` at default-domain `opset`: converted into that version's form by
    `onnx.version_converter`, else (where no adapter exists) the same node declared at that
    opset, if its attributes and inputs are valid there. Raises where neither is."""
    import onnx
    from onnx import version_converter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            converted = version_converter.convert_version(model, opset)
            onnx.checker.check_model(converted, full_check=True)
            return converted
        except Exception:  # no adapter: the node as it is, declared at that version
            relabelled = onnx.ModelProto()
            relabelled.CopyFrom(model)
            for entry in relabelled.opset_import:
                if entry.domain in ("", "ai.onnx"):
                    entry.version = opset
            relabelled.ir_version = min(relabelled.ir_version, 7 if opset < 15 else 8)
            onnx.checker.check_model(relabelled, full_check=True)
            return relabelled


def cases(per_version: int, ops: Sequence[str] | None = None
          ) -> tuple[list[Case], collections.Counter[str]]:
    """The matrix's cases, and what was left out (no test case, no conversion)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = collect_testcases()
    single: dict[str, list[Any]] = collections.defaultdict(list)
    left: collections.Counter[str] = collections.Counter()
    for case in sorted(collected, key=lambda c: c.name):
        if len(case.model.graph.node) == 1 and case.data_sets:
            op = case.model.graph.node[0].op_type
            if op in RANDOM:
                left["random values (no two runs agree)"] += 1
            elif not _tensors_only(case.model):
                left["sequence, optional or map values"] += 1
            else:
                single[op].append(case)
    found: list[Case] = []
    for op, versions in multi_version_ops().items():
        if ops and op not in ops:
            continue
        if op not in single:
            left["no single-node test case"] += len(versions)
            continue
        for version in versions:
            made = 0
            for case in single[op]:
                if made == per_version:
                    break
                try:
                    model = at_version(case.model, version)
                except Exception:  # not expressible at that version
                    continue
                feeds = _feeds(model, case.data_sets[0][0])
                if feeds is None:  # the converted form takes other inputs
                    continue
                found.append(Case(op, version, case.name, model, feeds))
                made += 1
            if not made:
                left["no conversion to that version"] += 1
    return found, left


RANDOM = ("Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform",
          "RandomUniformLike", "Multinomial")


def _tensors_only(model: Any) -> bool:
    return all(v.type.HasField("tensor_type") for v in (*model.graph.input,
                                                          *model.graph.output))


def _feeds(model: Any, inputs: Sequence[Any]) -> dict[str, Any] | None:
    """The case's inputs by the converted model's input names, where they fit its types."""
    import numpy as np
    from onnx import helper, numpy_helper

    weights = {t.name for t in model.graph.initializer}
    specs = [i for i in model.graph.input if i.name not in weights]
    if len(inputs) != len(specs):
        return None
    feeds = {}
    for spec, value in zip(specs, inputs, strict=True):
        array = np.asarray(numpy_helper.to_array(value) if hasattr(value, "dims") else value)
        tensor = spec.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if array.dtype != dtype or (tensor.HasField("shape") and (
                len(dims) != array.ndim or any(d is not None and d != s
                                               for d, s in zip(dims, array.shape, strict=True)))):
            return None
        feeds[spec.name] = array
    return feeds


def judge_case(case: Case, backend_names: Sequence[str]) -> Iterator[Outcome]:
    from tessera import backends
    from tessera._private.text import first_line
    from tessera.errors import TesseraError
    from tessera.oracle import Oracle, judge

    for name in backend_names:
        def outcome(status: str, detail: str = "", backend: str = name) -> Outcome:
            return Outcome(case.op, case.version, case.name, backend, status, detail)

        try:
            compiled = backends.get(name).compile(case.model)  # what supports() claims
        except TesseraError as err:
            yield outcome("skip", first_line(err))
            continue
        try:
            got = compiled.run(case.feeds)
        except TesseraError as err:
            yield outcome("fail", f"claimed but failed: {first_line(err)}")
            continue
        try:
            truth = Oracle(exclude=(name,)).truth(case.model, [case.feeds])
            verdict = judge(name, [got], truth)
        except Exception as err:  # recorded, so one case never ends the matrix
            yield outcome("undecided", f"could not be judged: {type(err).__name__}: {err}")
            continue
        if verdict.agreed:
            yield outcome("pass")
        elif verdict.disagreed:
            yield outcome("fail", str(verdict)[:300])
        else:
            yield outcome("undecided", str(verdict)[:300])


def markdown(result: dict[str, Any]) -> str:
    outcomes = [Outcome(**o) for o in result["outcomes"]]
    names = result["backends"]
    cells: dict[tuple[str, int], dict[str, collections.Counter[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    for o in outcomes:
        cells[o.op, o.version][o.backend][o.status] += 1
    totals = {b: collections.Counter(o.status for o in outcomes if o.backend == b)
              for b in names}
    lines = [BEGIN, "## Versioned semantics: the conformance matrix", "",
             f"Generated by `{result['command']}` at commit `{result['commit']}` "
             f"({result['seconds']} s). Every op with more than one `since_version` in "
             "`onnx.defs`, at each version from opset 7, converted from its single-node test "
             "cases by `onnx.version_converter` into that version's form, run on each "
             "backend where its `supports()` claims it, and judged against the consensus "
             "oracle ([trust.md](trust.md)). A cell counts the cases: ✓ agreed, ✗ claimed but "
             "the consensus is against it, ? no majority, - not claimed.", "",
             f"{len({(o.op, o.version) for o in outcomes})} (op, version) pairs over "
             f"{len({o.op for o in outcomes})} ops, {len({(o.case, o.version) for o in outcomes})}"
             f" cases; left out: "
             + ", ".join(f"{n} ({why})" for why, n in sorted(result["left_out"].items())), "",
             *table_head("backend", "agreed", "claimed but wrong", "undecided", "not claimed",
                         align="lrrrr")]
    lines += [table_row(b, totals[b]["pass"], totals[b]["fail"], totals[b]["undecided"],
                        totals[b]["skip"]) for b in names]
    lines += ["", *table_head("op", "version", *names, align="lr")]
    for (op, version), per in sorted(cells.items()):
        row = []
        for b in names:
            c = per.get(b, collections.Counter())
            row.append(" ".join(f"{mark}{c[s]}" for s, mark in
                                (("pass", "✓"), ("fail", "✗"), ("undecided", "?"),
                                 ("skip", "-")) if c[s]) or " ")
        lines.append(table_row(op, version, *row))
    wrong = [o for o in outcomes if o.status in ("fail", "undecided")]
    if wrong:
        lines += ["", "Cases not agreed:", ""]
        lines += [f"- {o.backend} on {o.op}-{o.version} ({o.case}): {o.status}: "
                  f"{o.detail[:200]}" for o in wrong]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_coverage(section: str, path: Path = COVERAGE) -> None:
    text = path.read_text() if path.exists() else ""
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", lambda _: section,
                      text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    from tessera import backends

    parser = arguments(__doc__)
    parser.add_argument("--per-version", type=int, default=2,
                        help="test cases per (op, version)")
    parser.add_argument("--ops", nargs="+")
    parser.add_argument("--backends", nargs="+",
                        default=[b for b in BACKENDS if backends.get(b).is_available().ok])
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "conformance.json"))
    parser.add_argument("--no-docs", action="store_true", help="leave docs/coverage.md alone")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    found, left = cases(args.per_version, args.ops)
    outcomes = [o for case in found for o in judge_case(case, args.backends)]
    command = "python -m bench.conformance" + (
        f" --per-version {args.per_version}" if args.per_version != 2 else "") + (
        f" --ops {' '.join(args.ops)}" if args.ops else "")
    result = {"command": command, "commit": commit(), "backends": list(args.backends),
              "seconds": round(time.perf_counter() - began, 1), "left_out": dict(left),
              "outcomes": [asdict(o) for o in outcomes]}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if not args.no_docs:
        write_coverage(markdown(result))
    bad = [o for o in outcomes if o.status == "fail"]
    for o in bad:
        print(f"{o.backend} {o.op}-{o.version} {o.case}: {o.detail[:240]}")
    print(f"{len(found)} cases, {len(outcomes)} outcomes, {len(bad)} claimed but wrong, "
          f"{sum(o.status == 'undecided' for o in outcomes)} undecided")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
