"""The CLI on a model with symbolic dimensions: --shape-profile on compile, explain and bench;
`run --input-shape` for random inputs of any allowed shape; each mistake one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tessera import backends

from ..ir.models import cache, table, two_inputs
from .test_cli import run

pytestmark = pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                                reason="needs onnxruntime")


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "pair.onnx"
    onnx.save(two_inputs(), path)
    return path


@pytest.fixture
def artifact(model: Path, tmp_path: Path) -> Path:
    out = tmp_path / "pair.tess"
    code, stdout, stderr = run("compile", str(model), "-t", "onnxruntime", "--partitioner",
                               "greedy", "--shape-profile", "batch=1:2:8", "-o", str(out))
    assert code == 0, stderr
    assert f"saved {out}" in stdout
    return out


def test_run_makes_random_inputs_of_the_shapes_given(artifact: Path) -> None:
    for batch in (1, 5, 8):
        code, stdout, stderr = run("run", str(artifact), "--input-shape", f"a={batch},8",
                                   "--input-shape", f"b={batch},8", "--check")
        assert code == 0, stderr
        assert f"[{batch}, 8]" in stdout
        assert ("check: all 1 output(s) match the consensus of onnxruntime (no graph "
                "optimisations) and onnx.reference") in stdout


@pytest.mark.parametrize(("shapes", "words"), [
    ((), ["the model has symbolic dimensions (batch)",
          "--input-shape a=2,8 --input-shape b=2,8", "--input or --inputs"]),
    (("a=9,8", "b=9,8"), ["dimension 'batch' is 9, outside the profile's range 1..8",
                          "--shape-profile batch=1:2:9"]),
    (("a=2,8", "b=3,8"), ["'a' and 'b' disagree on dimension 'batch'"]),
    (("a=2,9", "b=2,9"), ["input 'a' has shape [2, 9]", "dimension 1 is 9, expected 8"]),
    (("z=1",), ["--input-shape names 'z', not an input of the model (inputs: a, b)"]),
])
def test_a_bad_or_missing_input_shape_is_one_line(artifact: Path, shapes: tuple[str, ...],
                                                  words: list[str]) -> None:
    flags = [f for s in shapes for f in ("--input-shape", s)]
    code, _, stderr = run("run", str(artifact), *flags)
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1
    for word in words:
        assert word in stderr


def test_explain_takes_the_profile_and_checks_it(model: Path, artifact: Path) -> None:
    code, stdout, stderr = run("explain", str(model), "-t", "onnxruntime", "-O",
                               "partitioner=greedy", "--shape-profile", "batch=1,4")
    assert code == 0, stderr
    assert "[0] onnxruntime: 2 node(s)" in stdout
    code, stdout, stderr = run("explain", str(artifact))
    assert code == 0, stderr
    assert "[0] onnxruntime: 2 node(s)" in stdout
    for args, words in [
        (["--shape-profile", "batchh=1,4"], "dimension 'batchh', which no model input has"),
        (["--shape-profile", "batch"], "--shape-profile expects NAME=VALUES"),
        (["--shape-profile", "batch=4:2:1"], "the range needs min <= opt <= max"),
    ]:
        code, _, stderr = run("explain", str(model), "-t", "onnxruntime", *args)
        assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
        assert words in stderr
    code, _, stderr = run("explain", str(artifact), "--shape-profile", "batch=1")
    assert code == 2 and "keeps the profile it was compiled with" in stderr


def test_compile_refuses_a_profile_the_model_contradicts(tmp_path: Path) -> None:
    path = tmp_path / "table.onnx"
    onnx.save(table(), path)
    code, _, stderr = run("compile", str(path), "-t", "onnxruntime", "--shape-profile",
                          "batch=1,4", "-o", str(tmp_path / "t.tess"))
    assert code == 2 and "does not allow batch=4" in stderr
    code, _, stderr = run("compile", str(path), "-t", "onnxruntime", "--input-shape", "x=2,8",
                          "--shape-profile", "batch=2", "-o", str(tmp_path / "t.tess"))
    assert code == 2 and "the model has no symbolic dimensions" in stderr
    code, _, stderr = run("compile", str(path), "-t", "onnxruntime", "--input-shape", "x=2,8",
                          "-o", str(tmp_path / "t.tess"))
    assert code == 0, stderr
    code, stdout, stderr = run("run", str(tmp_path / "t.tess"), "--check")
    assert code == 0 and "[2, 8]" in stdout, stderr


def test_a_sum_and_an_empty_past_from_the_command_line(tmp_path: Path) -> None:
    path, out = tmp_path / "cache.onnx", tmp_path / "cache.tess"
    onnx.save(cache(), path)
    code, _, stderr = run("compile", str(path), "-t", "onnxruntime", "--shape-profile",
                          "sequence=1:1:8", "--shape-profile", "past=0:4:7", "--shape-profile",
                          "total=past+sequence", "-o", str(out))
    assert code == 0, stderr
    code, stdout, stderr = run("run", str(out), "--input-shape", "past=1,0,4", "--input-shape",
                               "new=1,3,4", "--input-shape", "mask=1,3", "--check")
    assert code == 0, stderr
    assert "[1, 3, 4]" in stdout
    code, _, stderr = run("run", str(out), "--input-shape", "past=1,2,4", "--input-shape",
                          "new=1,3,4", "--input-shape", "mask=1,3")
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "dimension 'total' is 3, but the shape profile makes it past+sequence = 2+3 = 5" \
        in stderr
    code, _, stderr = run("compile", str(path), "-t", "onnxruntime", "--shape-profile",
                          "total=past+sequence", "-o", str(out))
    assert code == 2 and "the sum past+sequence names dimension 'past'" in stderr, stderr


def test_explain_draws_a_model_with_symbolic_dimensions(model: Path, tmp_path: Path) -> None:
    page = tmp_path / "pair.html"
    code, _, stderr = run("explain", str(model), "-t", "onnxruntime", "--html", str(page))
    assert code == 0, stderr
    assert "batch" in page.read_text()


def test_bench_times_the_profile_point(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    code, stdout, stderr = run("bench", str(model), "-t", "onnxruntime", "--seconds", "0.05",
                               "--shape-profile", "batch=4", "--json", str(out))
    assert code == 0, stderr
    assert "pair.onnx at batch=4" in stdout
    assert [r["row"] for r in json.loads(out.read_text())] == [
        "native onnxruntime", "tessera onnxruntime"]


def _batch_sequence(path: Path) -> Path:
    """x [batch, sequence, 8] -> MatMul -> Relu -> Softmax."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8),
                                     "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)]
    dims = ["batch", "sequence", 8]
    graph = helper.make_graph(nodes, "bs", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, dims)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, dims)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("profile", [(), ("--shape-profile", "sequence=4,16")])
def test_compile_with_and_without_a_profile_runs_every_shape(tmp_path: Path,
                                                             profile: tuple[str, ...]) -> None:
    if not backends.get("openvino").is_available().ok:
        pytest.skip("openvino is not installed here")
    model = _batch_sequence(tmp_path / "bs.onnx")
    out = tmp_path / "bs.tess"
    code, _, stderr = run("compile", str(model), "-t", "onnxruntime,openvino",
                          *profile, "-o", str(out))
    assert code == 0, stderr
    code, stdout, stderr = run("explain", str(model), "-t", "onnxruntime,openvino", *profile)
    assert code == 0, stderr
    if profile:
        assert "shapes: measured at the profile's point(s) batch=1,sequence=4" in stdout
    else:
        assert "default point batch=1,sequence=128" in stdout and "--shape-profile" in stdout
    for shape in ("1,7,8", "3,40,8"):
        code, stdout, stderr = run("run", str(out), "--input-shape", f"x={shape}", "--check")
        assert code == 0, stderr
        assert "match the consensus of" in stdout
