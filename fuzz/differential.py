"""Differential fuzzing: small random ONNX graphs (2-8 nodes over the common ops, opsets 7-21,
random shapes and attributes, each op in the form its opset defines: attributes that became
inputs, default axes that changed) run on every available backend that claims them, each
judged against the consensus oracle. A claimed answer the consensus is against is a finding:
it becomes a deviation entry of that backend (so `supports()` refuses it) or a fix with a
regression test.

    python -m fuzz.differential --graphs 5000                    # the long run
    python -m fuzz.differential --graphs 200 --backends onnxruntime openvino torch reference

CI runs a bounded sample (tests/reliability/test_differential.py)."""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSETS = (7, 9, 11, 12, 13, 15, 17, 18, 19, 21)
UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Floor", "Ceil", "LeakyRelu", "Elu",
         "Softplus", "HardSigmoid", "Erf", "Sign", "Selu", "Identity")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
NORMS = ("Softmax", "LogSoftmax", "Hardmax")
REDUCES = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")
SINCE = {"Erf": 9, "Sign": 9}  # ops younger than opset 7


@dataclass
class Builder:
    """Grows one graph: the values made so far with their shapes, nodes, initializers."""

    rng: random.Random
    opset: int
    values: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    weights: list[onnx.TensorProto] = field(default_factory=list)

    def fresh(self, stem: str) -> str:
        return f"{stem}{len(self.nodes)}_{len(self.weights)}"

    def constant(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.weights.append(helper.make_tensor(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape,
            array.ravel().tolist()))
        return name

    def pick(self) -> tuple[str, tuple[int, ...]]:
        return self.values[-1] if self.rng.random() < 0.6 else self.rng.choice(self.values)

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs: Any) -> None:
        out = self.fresh("v")
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"n{len(self.nodes)}",
                                           **attrs))
        self.values.append((out, shape))

    # -- one op, in its opset's form -------------------------------------------------------
    def step(self) -> None:
        x, shape = self.pick()
        rank = len(shape)
        r = self.rng
        kind = r.choice(["unary", "unary", "binary", "binary", "norm", "reduce", "transpose",
                         "flatten", "clip", "unsqueeze", "concat", "matmul", "batchnorm"]
                        if rank else ["unary", "binary", "clip"])
        low_axis = -rank if self.opset >= 11 else 0  # negative axes count from opset 11
        if kind == "unary":
            op = r.choice([o for o in UNARY if SINCE.get(o, 7) <= self.opset])
            attrs: dict[str, Any] = {}
            if op in ("LeakyRelu", "Elu") and r.random() < 0.7:
                attrs["alpha"] = round(r.uniform(0.05, 1.5), 3)
            self.add(op, [x], shape, **attrs)
        elif kind == "binary":
            op = r.choice(BINARY)
            other_shape = tuple(d if r.random() < 0.7 else 1 for d in shape)[r.randint(0, rank):]
            if op in ("Max", "Min") and self.opset < 8:  # no broadcasting before Max-8
                other_shape = shape
            same = [(n, s) for n, s in self.values if s == shape and n != x]
            if same and r.random() < 0.4:
                other = r.choice(same)[0]
            else:
                other = self.constant(np.asarray(np.random.default_rng(r.randint(0, 2**31))
                                                 .standard_normal(other_shape),
                                                 np.float32))
            self.add(op, [x, other] if r.random() < 0.5 else [other, x], shape)
        elif kind == "norm":
            op = r.choice(NORMS)
            attrs = {} if r.random() < 0.4 else {"axis": r.randint(low_axis, rank - 1)}
            if self.opset < 13 and rank < 2:  # the default axis 1 needs rank 2 there
                attrs["axis"] = 0
            self.add(op, [x], shape, **attrs)
        elif kind == "reduce":
            op = r.choice(REDUCES)
            keep = r.choice([0, 1]) if rank > 1 else 1
            axes = sorted(r.sample(range(rank), r.randint(1, rank if keep else rank - 1)))
            out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
                tuple(d for i, d in enumerate(shape) if i not in axes)
            # ReduceSum takes axes as an input from 13, the others from 18
            as_input = self.opset >= (13 if op == "ReduceSum" else 18)
            if as_input:
                self.add(op, [x, self.constant(np.asarray(axes, np.int64))], out, keepdims=keep)
            else:
                self.add(op, [x], out, axes=axes, keepdims=keep)
        elif kind == "transpose" and rank > 1:
            perm = list(range(rank))
            r.shuffle(perm)
            self.add("Transpose", [x], tuple(shape[p] for p in perm), perm=perm)
        elif kind == "flatten":
            axis = r.randint(0, rank)
            outer = int(np.prod(shape[:axis], dtype=np.int64))
            self.add("Flatten", [x], (outer, int(np.prod(shape[axis:], dtype=np.int64))),
                     axis=axis)
        elif kind == "clip":
            low, high = sorted((round(r.uniform(-1.5, 0.5), 3), round(r.uniform(-0.5, 1.5), 3)))
            if self.opset < 11:
                self.add("Clip", [x], shape, min=low, max=high)
            else:
                self.add("Clip", [x, self.constant(np.asarray(low, np.float32)),
                                  self.constant(np.asarray(high, np.float32))], shape)
        elif kind == "unsqueeze" and rank < 4:
            axis = r.randint(0, rank)
            out = (*shape[:axis], 1, *shape[axis:])
            if self.opset >= 13:
                self.add("Unsqueeze", [x, self.constant(np.asarray([axis], np.int64))], out)
            else:
                self.add("Unsqueeze", [x], out, axes=[axis])
        elif kind == "concat":
            axis = r.randint(0, rank - 1)
            out = tuple(d * 2 if i == axis else d for i, d in enumerate(shape))
            self.add("Concat", [x, x], out,
                     axis=axis - rank if low_axis and r.random() < 0.5 else axis)
        elif kind == "matmul" and rank >= 1:
            k, n = shape[-1], r.randint(1, 5)
            w = np.random.default_rng(r.randint(0, 2**31)).standard_normal((k, n))
            out = (*shape[:-1], n) if rank > 1 else (n,)
            if rank == 2 and r.random() < 0.5:
                bias = self.constant(np.zeros(n, np.float32) + 0.5)
                self.add("Gemm", [x, self.constant(w.astype(np.float32)), bias], out,
                         alpha=round(r.uniform(0.5, 2.0), 3))
            else:
                self.add("MatMul", [x, self.constant(w.astype(np.float32))], out)
        elif kind == "batchnorm" and rank >= 2:
            c = shape[1]
            g = np.random.default_rng(r.randint(0, 2**31))
            params = [self.constant(g.standard_normal(c).astype(np.float32)),
                      self.constant(g.standard_normal(c).astype(np.float32)),
                      self.constant(g.standard_normal(c).astype(np.float32)),
                      self.constant((g.random(c) + 0.5).astype(np.float32))]
            attrs = {"epsilon": 1e-5}
            if self.opset < 14 and r.random() < 0.5:
                attrs["momentum"] = 0.9  # an inference attribute all the same
            self.add("BatchNormalization", [x, *params], shape, **attrs)
        else:
            self.add("Relu", [x], shape)


def random_graph(seed: int, opset: int | None = None) -> onnx.ModelProto:
    """One random graph of 2-8 nodes; the same seed gives the same graph."""
    rng = random.Random(seed)
    opset = opset or rng.choice(OPSETS)
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 4)))
    builder = Builder(rng, opset, [("x", shape)])
    for _ in range(rng.randint(2, 8)):
        builder.step()
    out, out_shape = builder.values[-1]
    graph = helper.make_graph(
        builder.nodes, f"fuzz{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape))],
        builder.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    onnx.checker.check_model(model, full_check=True)
    return model


@dataclass(frozen=True)
class Finding:
    seed: int
    opset: int
    backend: str
    status: str  # 'disagreed' (claimed, and the consensus is against it) or 'undecided'
    ops: tuple[str, ...]
    detail: str


def judge_graph(seed: int, names: Sequence[str]) -> tuple[list[Finding], dict[str, int]]:
    """Every backend in `names` that claims the graph, judged against the consensus."""
    from tessera import backends
    from tessera.errors import TesseraError
    from tessera.oracle import Oracle, judge

    model = random_graph(seed)
    opset = model.opset_import[0].version
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    ops = tuple(n.op_type for n in model.graph.node)
    found: list[Finding] = []
    counts: collections.Counter[str] = collections.Counter()
    for name in names:
        backend = backends.get(name)
        try:
            compiled = backend.compile(model)  # check=True: only what supports() claims
        except TesseraError:
            counts["refused"] += 1
            continue
        try:
            got = compiled.run(feeds)
        except TesseraError as err:
            found.append(Finding(seed, opset, name, "failed", ops, str(err)[:300]))
            continue
        verdict = judge(name, [got], Oracle(exclude=(name,)).truth(model, [feeds]))
        counts[verdict.status] += 1
        if verdict.status != "agreed":
            found.append(Finding(seed, opset, name, verdict.status, ops, str(verdict)[:400]))
    return found, dict(counts)


def main(argv: Sequence[str] | None = None) -> int:
    from tessera import backends

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--graphs", type=int, default=5000)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--backends", nargs="+",
                        default=[n for n in ("onnxruntime", "openvino", "torch", "reference")
                                 if backends.get(n).is_available().ok])
    parser.add_argument("--out", default="fuzz/results/differential.json")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    findings: list[Finding] = []
    totals: collections.Counter[str] = collections.Counter()
    for seed in range(args.start, args.start + args.graphs):
        found, counts = judge_graph(seed, args.backends)
        findings += found
        totals.update(counts)
        for f in found:
            print(f"seed {f.seed} opset {f.opset} {f.backend} {f.status}: {f.detail[:200]}",
                  flush=True)
    by_op = collections.Counter((f.backend, f.status, op) for f in findings
                                for op in dict.fromkeys(f.ops))
    result = {"graphs": args.graphs, "start": args.start, "backends": args.backends,
              "seconds": round(time.perf_counter() - began, 1), "verdicts": dict(totals),
              "findings": [f.__dict__ | {"ops": list(f.ops)} for f in findings],
              "by_op": [[b, s, op, n] for (b, s, op), n in by_op.most_common()]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("graphs", "seconds", "verdicts")}))
    return 0 if not any(f.status == "disagreed" for f in findings) else 1


if __name__ == "__main__":
    sys.exit(main())
