"""The CLI: golden output for target and config commands; bad input exits 2 in one line."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tessera.cli import cli
from tessera.target import KINDS, TAGS

GOLDEN = Path(__file__).parent.parent / "golden"
EXECUTORS = str(GOLDEN.parent.parent / "docs" / "examples" / "executors.json")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "110"}, prog_name="tessera")
    return result.exit_code, result.stdout, result.stderr


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("TESSERA_UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    assert text == expected, f"output differs from {path}; rerun with TESSERA_UPDATE_GOLDEN=1"


@pytest.mark.parametrize(("golden", "args"), [
    ("target_show_a100.txt", ["target", "show", "nvidia/a100 -max-threads-per-block=512"]),
    ("target_show_ort.txt", ["target", "show", "ort -opt-level=basic -num-threads 2"]),
    ("config_show.txt", ["config", "show", "-t", "openvino,onnxruntime,cpu -mcpu=skylake",
                         "--target-onnxruntime-num-threads=2", "-O", "fallback=off"]),
    ("config_show_json.txt", ["config", "show", "-t", "ov-cpu", "--host", "cpu -mcpu=skylake",
                              "--json"]),
    ("config_show_executors.txt", ["config", "show", "-t", EXECUTORS]),
    ("config_show_executors_json.txt", ["config", "show", "-t", EXECUTORS, "--json"]),
    ("config_show_one_executor.txt", ["config", "show", "-t", EXECUTORS,
                                      "--executor", "low-power"]),
])
def test_golden_output(golden: str, args: list[str]) -> None:
    code, out, err = run(*args)
    assert code == 0, err
    check_golden(golden, out)


def test_named_executors_show_and_parse_back() -> None:
    from tessera import CompilationConfig

    code, out, _ = run("config", "show", "-t", EXECUTORS, "--json")
    assert code == 0
    config = CompilationConfig.create(EXECUTORS)
    assert CompilationConfig.from_json(out) == config
    code, out, _ = run("config", "show", "-t", EXECUTORS, "--executor",
                       "dsp", "--json")
    assert code == 0 and CompilationConfig.from_json(out) == config.executor_config("dsp")


def test_config_show_json_parses_back() -> None:
    from tessera import CompilationConfig

    code, out, _ = run("config", "show", "-t", "openvino,cpu", "--json")
    assert code == 0
    assert CompilationConfig.from_json(out) == CompilationConfig.create("openvino,cpu")


def test_targets_lists_kinds_availability_attributes_and_tags() -> None:
    code, out, _ = run("targets")
    assert code == 0
    for name in KINDS.names():
        assert name in out
    for tag in TAGS.names():
        assert tag in out
    assert "-max-threads-per-block" in out and "sm_80" in out
    assert "seed" not in out.lower()
    code, out, _ = run("targets", "--json")
    data = json.loads(out)
    by_name = {k["name"]: k for k in data["kinds"]}
    assert by_name["onnxruntime"]["available"] is True
    assert by_name["cuda"]["device_types"] == ["cuda"]
    assert by_name["openvino"]["attrs"]["precision"]["choices"] == ["f32", "bf16", "f16", "int8",
                                                                     "int4"]
    assert by_name["cpu"]["aliases"] == ["llvm"]
    assert data["tags"]["aws/c5.2xlarge"].startswith("cpu -mcpu=skylake-avx512")


@pytest.mark.parametrize(("args", "fragment"), [
    (["target", "show", "cuda -arch=sm80"], "not a CUDA compute capability"),
    (["target", "show", ""], "empty target string"),
    (["target", "show", "openvino -device=cuda"], "cannot serve device 'cuda'"),
    (["config", "show", "-t", "cpu,cpu"], "listed twice"),
    (["config", "show", "-t", "cpu", "-O", "fallbak=on"], "did you mean 'fallback'"),
    (["config", "show", "-t", "cpu", "--target-openvino-num-threads=2"], "no such target"),
    (["config", "show", "-t", "cpu", "--target-nope-x=2"], "names no known target kind"),
    (["config", "show", "-t", "cpu", "--executor", "vmm"], "unknown executor 'vmm'"),
    (["config", "show", "-t", "cpu", "--bogus"], "unexpected argument '--bogus'"),
    (["config", "show", "-t", EXECUTORS, "--executor", "dps"],
     "no executor named 'dps'; did you mean 'dsp'?"),
    (["config", "show", "-t", EXECUTORS, "--host", "cpu"],
     "each executor names its host with 'target_host'"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], fragment: str) -> None:
    code, _out, err = run(*args)
    assert code == 2
    assert err.startswith("error: ") and fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_verbose_shows_the_trace() -> None:
    code, _, err = run("--verbose", "target", "show", "cuda -arch=sm80")
    assert code == 2 and "Traceback" in err and "TargetError" in err


def _mlp(tmp_path: Path) -> str:
    import shutil

    from tessera import zoo

    path = tmp_path / "mlp.onnx"
    shutil.copy(zoo.export("mlp", 1), path)
    return str(path)


def test_explain_greedy_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    code, out, err = run("explain", _mlp(tmp_path), "-t", "torch,onnxruntime",
                         "-O", "partitioner=greedy", "--pin", "/Softmax=onnxruntime")
    assert code == 0, err
    check_golden("explain_mlp_greedy.txt", out)


def test_explain_json_is_a_plan_and_records_round_trip(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.placement import Plan

    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    code, out, err = run("explain", _mlp(tmp_path), "-t", "onnxruntime,torch", "--json")
    assert code == 0, err
    plan = Plan.from_json(out)
    measuring = plan.stats.measuring
    assert plan.partitioner == "collage" and measuring is not None
    assert measuring.measurements > 0
    assert sum(len(p.nodes) for p in plan.partitions) == 14
    code, out, err = run("records", "export", str(tmp_path / "r.jsonl"))
    assert code == 0, err
    count = len((tmp_path / "r.jsonl").read_text().splitlines())
    assert out.startswith(f"exported {count} record(s)") and count >= measuring.measurements
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "other.sqlite"))
    code, out, err = run("records", "import", str(tmp_path / "r.jsonl"))
    assert code == 0 and out.startswith(f"imported {count} new or newer record(s)")
    code, out, err = run("records", "import", str(tmp_path / "r.jsonl"))
    assert out.startswith("imported 0 new or newer record(s)")


def test_compile_and_explain_pick_a_named_executor(tmp_path: Path) -> None:
    config = EXECUTORS
    code, _, err = run("compile", _mlp(tmp_path), "-t", config, "-o", str(tmp_path / "m.tess"))
    assert code == 2 and "this config has 2 executors (dsp, low-power); pick one" in err
    assert "--executor dsp" in err
    code, out, err = run("compile", _mlp(tmp_path), "-t", config, "--executor", "low-power",
                         "-o", str(tmp_path / "m.tess"))
    assert code == 0, err
    from tessera import CompilationConfig, load

    artifact = load(tmp_path / "m.tess")
    assert [str(p.target) for p in artifact.plan.partitions] == ["onnxruntime"]
    assert artifact.config == CompilationConfig.create(config).executor_config("low-power")
    code, out, err = run("explain", _mlp(tmp_path), "-t", config, "--executor", "low-power",
                         "--json")
    assert code == 0, err
    assert {p["target"] for p in json.loads(out)["partitions"]} == {"onnxruntime"}


def test_explain_bad_pin_is_one_line(tmp_path: Path) -> None:
    code, _, err = run("explain", _mlp(tmp_path), "-t", "onnxruntime", "--pin", "nope")
    assert code == 2 and err.count("\n") == 1 and "--pin expects NAME=VALUE" in err


def test_explain_shows_each_partitions_device_target_and_what_it_cannot_honour(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    code, out, err = run("explain", _mlp(tmp_path), "-t",
                         "torch,onnxruntime,cpu -mcpu=skylake -mattr=+avx2 -num-cores=1",
                         "-O", "partitioner=greedy", "--pin", "/Softmax=onnxruntime")
    assert code == 0, err
    check_golden("explain_mlp_devices.txt", out)
    assert out.count("    device: cpu -mcpu=skylake -mattr=+avx2 -num-cores=1\n") == 2
    assert ("    device note: -mcpu=skylake -mattr=+avx2: not honoured by onnxruntime: its "
            "kernels are prebuilt and choose their instructions on the CPU they run on\n") in out


def test_the_placement_table_shows_costs_only_when_the_plan_has_them() -> None:
    from dataclasses import replace

    from rich.console import Console

    import tessera
    from tessera.cli._common import placement_table
    from tessera.ir import load_model
    from tessera.placement import Plan

    from ..ir.models import mlp

    model = load_model(mlp())
    plan = tessera.partition(model, "onnxruntime", partitioner="greedy")
    assert all(p.cost_ms is None for p in plan.partitions)

    def shown(plan: Plan) -> str:
        console = Console(width=120, record=True)
        console.print(placement_table(plan, model, "plan"))
        return console.export_text()

    assert "cost ms" not in shown(plan) and "onnxruntime" in shown(plan)
    costed = replace(plan, partitions=tuple(replace(p, cost_ms=0.125) for p in plan.partitions))
    assert "cost ms" in shown(costed) and "0.125" in shown(costed)
