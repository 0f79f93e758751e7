"""Precision benchmark: each int8 recipe against fp32, per backend, on whole models.

For each model, every configuration (onnxruntime fp32, onnxruntime int8 dynamic, onnxruntime
int8 static, openvino f32, openvino int8) compiles the whole model as one partition and runs
the same inputs; the static recipes calibrate on a few random samples. Configurations are timed
in rounds of blocks (bench/_rounds.py) and each int8 speed-up is the paired ratio over its own
backend's float configuration, taken in the same run. The cosine similarity of each int8
output with the float one is reported beside its speed.
Writes bench/results/precision.{md,json}.

    python -m bench.precision [--models resnet50 bert-base] [--rounds 3] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench._rounds import in_rounds, machine, paired
from tessera import backends, zoo
from tessera.target import Target

_CONFIGS = (("onnxruntime", "onnxruntime"),
            ("onnxruntime", "onnxruntime -precision=int8 -int8-recipe=dynamic"),
            ("onnxruntime", "onnxruntime -precision=int8 -int8-recipe=static"),
            ("openvino", "openvino"),
            ("openvino", "openvino -precision=int8"))
_CALIBRATION_SAMPLES = 8


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def bench_model(name: str, rounds: int, seconds: float) -> dict[str, Any]:
    model = onnx.load_model(str(zoo.export(name)))
    feeds = zoo.example_inputs(name)
    calibration = [zoo.example_inputs(name, seed=1 + i) for i in range(_CALIBRATION_SAMPLES)]
    compiled, outputs = {}, {}
    for backend_name, text in _CONFIGS:
        backend = backends.get(backend_name)
        if not backend.is_available().ok:
            continue
        target = Target(text)
        runner = backend.compile(model, target, check=False,
                                 calibration=calibration if backend.calibrated(target) else None)
        compiled[text] = runner
        outputs[text] = next(iter(runner.run(feeds).values()))
    measured = in_rounds({text: (lambda r=runner: r.run(feeds)) for text, runner in
                          compiled.items()}, rounds=rounds, seconds=seconds)
    rows = []
    for text in compiled:
        base = "openvino" if text.startswith("openvino") else "onnxruntime"
        rows.append({"target": text, "ms": measured[text].to_dict(),
                     "speedup_vs_float": round(paired(measured[base], measured[text]), 3),
                     "cosine_vs_float": round(_cosine(outputs[text], outputs[base]), 5)})
    return {"model": name, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert-base"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    results = [bench_model(name, args.rounds, args.seconds) for name in args.models]
    lines = ["# Precision: int8 recipes against fp32", "", f"Machine: {machine()}", "",
             "| model | target | median ms | speed-up vs float | cosine vs float |",
             "|---|---|---|---|---|"]
    for result in results:
        for row in result["rows"]:
            lines.append(f"| {result['model']} | `{row['target']}` | {row['ms']['median_ms']:.2f} "
                         f"| {row['speedup_vs_float']:.2f}x | {row['cosine_vs_float']:.4f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision.md").write_text("\n".join(lines) + "\n")
    (args.out / "precision.json").write_text(json.dumps(
        {"machine": machine(), "rounds": args.rounds, "seconds": args.seconds,
         "results": results}, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
