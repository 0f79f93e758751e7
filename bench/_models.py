"""The driver the per-model tables share: arguments, one bench per model, the command and
commit that produced the table, and its JSON and markdown written side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._report import arguments, header, publish

Row = dict[str, Any]
Run = Callable[[dict[str, Any]], dict[str, Any]]
NATIVES = ("ONNX Runtime defaults", "OpenVINO defaults")


def native_defaults(path: str) -> tuple[dict[str, Run], str]:
    """Each backend with its own defaults on the model file, as runners of a feed dict: a
    plain `InferenceSession`, and `Core().compile_model(path, "CPU")`; and what OpenVINO
    computes in there ('bf16' on a CPU with AVX-512 BF16 or AMX)."""
    import onnx
    import onnxruntime as ort
    import openvino as ov

    outputs = [o.name for o in onnx.load(path, load_external_data=False).graph.output]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU")
    request = compiled.create_infer_request()
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")

    def ov_run(feed: dict[str, Any]) -> dict[str, Any]:
        result = request.infer(dict(feed), share_inputs=True)
        return dict(zip(outputs, result.to_tuple(), strict=False))

    def ort_run(feed: dict[str, Any]) -> dict[str, Any]:
        return dict(zip(outputs, session.run(None, feed), strict=True))

    return dict(zip(NATIVES, (ort_run, ov_run), strict=True)), precision_name(
        str(getattr(hint, "get_type_name", lambda: hint)()))


def precision_name(text: str) -> str:
    """'bf16' from OpenVINO's element type, however it was written down."""
    return {"<Type: 'bfloat16'>": "bf16", "<Type: 'float32'>": "f32",
            "<Type: 'float16'>": "f16", "bf16": "bf16", "f32": "f32"}.get(text, text)


def lowest_cosine(report: Any) -> float:
    """The lowest cosine of an accuracy report, over its outputs."""
    return float(min((m.value for m in report.values if m.metric == "cosine"), default=1.0))


def run_models(module: str, doc: str | None, models: Sequence[str], out: Path,
               bench: Callable[[str, int, float], Row], markdown: Callable[[Row], str],
               line: Callable[[Row], str], argv: Sequence[str] | None = None) -> int:
    """`python -m bench.<module>`: `bench(model, rounds, seconds)` per model, each row
    printed with `line`, then `out`.json and `out`.md (`markdown` of the whole result)."""
    args = arguments(doc, models=models, rounds=3, seconds=1.0, out=out).parse_args(argv)
    rows = []
    for name in args.models:
        row = bench(name, args.rounds, args.seconds)
        print(line(row), flush=True)
        rows.append(row)
    result = header(module, argv, rounds=args.rounds, seconds=args.seconds, models=rows)
    publish(args.out, result, markdown(result))
    return 0


__all__ = ["NATIVES", "Run", "lowest_cosine", "native_defaults", "precision_name",
           "run_models"]
