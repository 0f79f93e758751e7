"""The conformance matrix, bounded for CI: the ops whose meaning changed most between
versions, at each of their versions, on every available backend against the consensus. No
backend may claim a case the consensus is against (`python -m bench.conformance` runs every
multi-version op and writes docs/coverage.md)."""

from __future__ import annotations

from bench.conformance import cases, judge_case, multi_version_ops
from tessera import backends

OPS = ["Softmax", "LogSoftmax", "Hardmax", "BatchNormalization", "ReduceSum", "ReduceMean",
       "Split", "Squeeze", "Unsqueeze", "Clip", "Pad", "Resize", "Dropout", "OneHot", "TopK"]
NAMES = [n for n in ("onnxruntime", "openvino", "torch", "reference")
         if backends.get(n).is_available().ok]


def test_every_version_from_opset_7_is_in_the_matrix() -> None:
    versions = multi_version_ops()
    assert versions["Softmax"] == [7, 11, 13]  # Softmax-1 is the one in effect at opset 7
    assert versions["BatchNormalization"] == [7, 9, 14, 15]
    assert all(len(v) >= 1 for v in versions.values())


def test_no_backend_claims_a_case_the_consensus_is_against() -> None:
    found, _ = cases(1, OPS)
    assert {(c.op, c.version) for c in found} >= {("Softmax", 7), ("Softmax", 11),
                                                   ("BatchNormalization", 9)}
    outcomes = [o for case in found for o in judge_case(case, NAMES)]
    wrong = [o for o in outcomes if o.status == "fail"]
    assert wrong == []
    assert sum(o.status == "pass" for o in outcomes) >= len(found)  # most are claimed
