"""`tessera compile`, `run` and `bench` end to end on a bundled model: golden output (numbers
that depend on timing are masked), artifacts that run and match the reference, and bad
input that exits 2 with one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from tessera import backends, zoo

from .test_cli import check_golden, run

pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="needs openvino beside onnxruntime")


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def masked(text: str) -> str:
    text = re.sub(r"\d+\.\d+( ?(ms|s|MB))", r"#\1", text)
    text = re.sub(r"(?<=\s)-?\d+\.\d+(?=\s*[│|])", "#", text)
    text = re.sub(r"-b(\d+)-[0-9a-f]{12}\.onnx", r"-b\1-<fingerprint>.onnx", text)
    return re.sub(r"/[^\s]*/", "…/", text)


def compile_mlp(tmp_path: Path) -> Path:
    out = tmp_path / "mlp.tess"
    code, stdout, stderr = run("compile", str(zoo.export("mlp", 1)), "-t", "onnxruntime,openvino",
                               "--partitioner", "greedy", "--pin", "/Erf.*=openvino",
                               "--accuracy", "exact", "-o", str(out))
    assert code == 0, stderr
    check_golden("compile_mlp_greedy.txt", masked(stdout).replace(str(tmp_path), "TMP"))
    return out


def test_compile_then_run_with_inputs_and_check(tmp_path: Path) -> None:
    artifact = compile_mlp(tmp_path)
    feeds = zoo.example_inputs("mlp")
    (name, value), = feeds.items()
    np.save(tmp_path / "x.npy", value)
    code, stdout, stderr = run("run", str(artifact), "--input", f"{name}={tmp_path}/x.npy",
                               "-o", str(tmp_path / "out.npz"), "--check", "--bench", "5")
    assert code == 0, stderr
    assert ("check: all 1 output(s) match the consensus of onnxruntime (no graph "
            "optimisations) and onnx.reference") in stdout
    assert re.search(r"latency over 5 runs: median [\d.]+ ms, p90 [\d.]+ ms, min", stdout)
    (tmp_path / "bad.npy").write_bytes(b"junk")
    code, _, stderr = run("run", str(artifact), "--input", f"{name}={tmp_path}/bad.npy")
    assert code == 2 and "cannot read a .npy array" in stderr
    want = backends.get("reference").compile(onnx.load(zoo.export("mlp", 1))).run(feeds)
    with np.load(tmp_path / "out.npz") as got:
        for key, expected in want.items():
            np.testing.assert_allclose(got[key], expected, rtol=1e-3, atol=1e-4)


def test_run_without_inputs_uses_random_ones(tmp_path: Path) -> None:
    artifact = compile_mlp(tmp_path)
    code, stdout, stderr = run("run", str(artifact), "--check")
    assert code == 0, stderr
    assert "outputs" in stdout and "match the consensus of" in stdout


@pytest.mark.parametrize(("args", "message"), [
    (["run", "{tmp}/missing.tess"], "error: no artifact at"),
    (["run", "{tmp}/bad.tess"], "error: {tmp}/bad.tess is not a tessera artifact"),
    (["compile", "{tmp}/bad.tess", "-t", "onnxruntime"], "error:"),
    (["compile", "MLP", "-t", "onnxruntime", "--pin", "nothing.*=onnxruntime"],
     "error: pin 're:nothing.*'"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str
                                         ) -> None:
    (tmp_path / "bad.tess").write_bytes(b"junk")
    filled = [a.replace("{tmp}", str(tmp_path)).replace("MLP", str(zoo.export("mlp", 1)))
              for a in args]
    code, _, stderr = run(*filled)
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1
    assert message.replace("{tmp}", str(tmp_path)) in stderr


def test_bench_compares_native_single_greedy_and_collage(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    code, stdout, stderr = run("bench", str(zoo.export("mlp", 1)), "-t", "onnxruntime,openvino",
                               "--seconds", "0.05", "--json", str(out))
    assert code == 0, stderr
    rows = json.loads(out.read_text())
    assert [r["row"] for r in rows] == [
        "native onnxruntime", "native openvino", "tessera onnxruntime", "tessera openvino",
        "tessera greedy", "tessera collage"]
    assert min(r["vs_best_native"] for r in rows if r["row"].startswith("native ")) == 1.0
    assert all(r["median_ms"] > 0 and r["p90_ms"] >= r["median_ms"] >= r["min_ms"]
               for r in rows)
    assert "best native" in stdout and "faster" in stdout  # the ratio says its direction
    # a native row below fp32 (OpenVINO's default on a bf16 CPU) says so, and how to match it
    lower = backends.get("openvino").native_precision()
    native_ov = next(r for r in rows if r["row"] == "native openvino")
    assert native_ov.get("precision") == lower
    assert ("note: native openvino computes in" in stdout) == (lower is not None)
    if lower is not None:
        assert f"in {lower}" in native_ov["plan"] and "--accuracy" in stdout


def test_openvino_says_what_it_computes_in_natively() -> None:
    import openvino as ov

    from tessera.cli._build import precision_notes

    core = ov.Core()
    default = core.get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    assert backends.get("openvino").native_precision() == (None if default == "f32" else default)
    assert backends.get("onnxruntime").native_precision() is None
    assert precision_notes([{"row": "native onnxruntime"}]) == []
    note = precision_notes([{"row": "native openvino", "precision": "bf16"}])
    assert len(note) == 1 and note[0].startswith("note: native openvino computes in bf16 ")


def test_bench_with_samples_compares_defaults_by_hand_and_tessera_within_the_budget(
        tmp_path: Path) -> None:
    from tessera.zoo.__main__ import write_samples

    write_samples("mlp", 1, tmp_path / "samples", count=4)
    out = tmp_path / "rows.json"
    code, stdout, stderr = run("bench", str(zoo.export("mlp", 1)), "-t", "onnxruntime,openvino",
                               "--samples", str(tmp_path / "samples"), "--accuracy",
                               "cosine>=0.99", "--seconds", "0.05", "--json", str(out))
    assert code == 0, stderr
    rows = {r["row"]: r for r in json.loads(out.read_text())}
    assert list(rows)[:2] == ["native onnxruntime", "native openvino"]
    assert rows["native onnxruntime"]["speedup"] == 1.0
    assert rows["tessera"]["meets"] is True and rows["tessera"]["accuracy"]["samples"] == 2
    # every row, the native ones and those by hand too, is judged on the same samples
    assert all(r["accuracy"]["samples"] == 2 for r in rows.values()), rows
    assert "higher is faster" in stdout.replace("\n", " ") or "(higher is" in stdout
    assert "within the accuracy budget cosine>=0.99" in stdout
    # what the precision search tried is said, as `tessera compile` says it
    assert "precision: searched " in stdout and "kept " in stdout


def test_bench_accuracy_needs_samples() -> None:
    code, _, stderr = run("bench", str(zoo.export("mlp", 1)), "-t", "onnxruntime",
                          "--accuracy", "cosine>=0.99")
    assert code != 0 and "--accuracy needs --samples" in stderr
