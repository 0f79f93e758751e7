"""Out-of-tree backends through the `tessera.backends` entry-point group: the example of
docs/backends.md, written out as an installed distribution (a module plus a `*.dist-info`
with `entry_points.txt`) and found, placed and run; and plugins that fail to load."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import backends
from tessera.backends import GROUP, PluginWarning
from tessera.backends._threads import ThreadPolicy
from tessera.errors import BackendUnavailableError, CompileError
from tessera.placement.measure._protocol import MeasureSettings
from tessera.placement.measure._worker import MeasureWorker
from tessera.target import KINDS, Target

from ..ir.models import mlp

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def doc_files() -> dict[str, str]:
    """The code blocks of docs/backends.md whose first line names a file, by that name."""
    blocks = re.findall(r"```\w+\n# (\S+)\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return dict(blocks)


def install(root: Path, module: str, source: str, entry_points: dict[str, str],
            dist: str = "tessera-example", version: str = "0.1.0") -> None:
    """`module` and a distribution declaring `entry_points` in `GROUP`, as pip leaves them."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = [f"[{GROUP}]", *(f"{name} = {value}" for name, value in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def forget(*names: str) -> None:
    for name in names:
        backends.BACKENDS.unregister(name)
        KINDS.unregister(name)


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The docs' example plugin installed into `tmp_path`, which is put on sys.path."""
    files = doc_files()
    project = tomllib.loads(files["pyproject.toml"])["project"]
    install(tmp_path, "tessera_example", files["tessera_example.py"],
            project["entry-points"][GROUP], project["name"], project["version"])
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    forget("example")
    sys.modules.pop("tessera_example", None)


def _elementwise() -> onnx.ModelProto:
    """x -> Add(w) -> Relu -> Mul(x) -> Tanh: every node one the example claims."""
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "x"], ["m"], name="mul"),
             helper.make_node("Tanh", ["m"], ["y"], name="tanh")]
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "w")
    graph = helper.make_graph(nodes, "elementwise",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


def test_the_docs_example_is_found_through_its_entry_point(example: Path) -> None:
    assert "tessera_example" not in sys.modules  # nothing loaded before the lookup
    backend = backends.get("example")
    assert "tessera_example" in sys.modules
    assert backend.name == "example" and type(backend).__name__ == "ExampleBackend"
    assert "example" in backends.names() and "example" in KINDS
    assert backends.for_all()[-1] == "example"  # rank 90: after tessera's own
    assert ThreadPolicy("shared", 4).apply(Target("example")) == Target("example")


def test_greedy_placement_uses_the_plugin_and_matches_the_reference(example: Path) -> None:
    compiled = tessera.compile(mlp(), "example,onnxruntime", partitioner="greedy")
    placed = {node: str(part.target) for part in compiled.plan.partitions for node in part.nodes}
    assert placed == {"mm1": "onnxruntime", "add1": "example", "relu": "example",
                      "mm2": "onnxruntime", "add2": "example", "softmax": "onnxruntime"}
    assert "no rule for MatMul" in compiled.plan.reasons["mm1"]["example"]
    assert "runs Relu with numpy" in compiled.plan.reasons["relu"]["example"]
    want = backends.get("reference").compile(mlp()).run(_feeds())["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], want, rtol=1e-5, atol=1e-6)


def test_the_plugin_compiles_what_it_claims_and_refuses_the_rest(example: Path) -> None:
    backend = backends.get("example")
    model = _elementwise()
    want = backends.get("reference").compile(model).run(_feeds())["y"]
    np.testing.assert_allclose(backend.compile(model).run(_feeds())["y"], want, rtol=1e-6)
    native = backend.native_runner(model.SerializeToString())  # the default hook
    (got,) = native(_feeds())  # the outputs in the model's order
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not backend.native_import  # its library has no ONNX entry: tessera's own backend
    with pytest.raises(CompileError, match=r"mm1 \(MatMul\): the numpy example has no rule"):
        backend.compile(mlp())


def test_the_measuring_worker_loads_entry_point_plugins(example: Path) -> None:
    worker = MeasureWorker()  # a fresh process, spawned with this sys.path
    try:
        cost = worker.measure(_elementwise().SerializeToString(), "example",
                              MeasureSettings(warmup=1, min_runs=3, max_runs=3, budget_s=0.0))
    finally:
        worker.close()
    assert cost.ok and cost.samples == 3, cost


def test_a_fresh_process_finds_the_plugin_by_its_kind_alone(example: Path) -> None:
    code = ("import sys, tessera\n"
            "assert 'tessera_example' not in sys.modules\n"  # not at import
            "target = tessera.Target('example')\n"  # a kind lookup that misses loads it
            "print(target, tessera.backends.get('example').colour)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": f"{example}:{root}"})
    assert out.stdout.split() == ["example", "#bcbd22"]


BROKEN = "import tessera_missing_dependency  # not installed\n"


def test_a_plugin_that_fails_to_import_is_a_warning_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, "tessera_broken", BROKEN, {"broken": "tessera_broken:BACKEND"},
            "tessera-broken")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.warns(PluginWarning) as caught:
            names = backends.names()
        assert "broken" not in names and "onnxruntime" in names  # the others go on
        [message] = [str(w.message) for w in caught if w.category is PluginWarning]
        assert "'broken = tessera_broken:BACKEND'" in message
        assert "tessera-broken 0.1.0" in message and "ModuleNotFoundError" in message
        with pytest.raises(BackendUnavailableError, match="backend plugin 'broken'"):
            backends.get("broken")
        assert backends.plugin_failures()["broken"].value == "tessera_broken:BACKEND"
    finally:
        sys.modules.pop("tessera_broken", None)


def test_a_plugin_pointing_at_no_backend_is_refused_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, "tessera_odd", "BACKEND = 42\n", {"odd": "tessera_odd:BACKEND"},
            "tessera-odd")
    install(tmp_path, "tessera_quiet", "", {"quiet": "tessera_quiet"}, "tessera-quiet")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.warns(PluginWarning) as caught:
            backends.names()
        messages = sorted(str(w.message) for w in caught if w.category is PluginWarning)
        assert "points at int 42, not at a tessera Backend" in messages[0]
        assert "registered no backend named 'quiet'" in messages[1]
    finally:
        sys.modules.pop("tessera_odd", None)
        sys.modules.pop("tessera_quiet", None)


def test_import_tessera_reads_no_entry_point(tmp_path: Path) -> None:
    install(tmp_path, "tessera_broken", BROKEN, {"broken": "tessera_broken:BACKEND"},
            "tessera-broken")
    root = Path(__file__).resolve().parents[2]
    code = ("import sys, warnings\nwarnings.simplefilter('error')\nimport tessera\n"
            "print('tessera_broken' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{root}"})
    assert out.stdout.strip() == "False"
