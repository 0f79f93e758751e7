"""No silent device change: placing for a device that no backend available here serves is a
DeviceUnavailableError naming the device, the nodes that needed it and what would serve it;
the reference fallback runs CPU nodes only. Creating, showing and saving such a config stays
possible. The backends serving cuda below are TEST-ONLY fakes (`FakeGpuBackend`): this
machine's answer for a real CUDA backend is the device's own (no driver, no CUDA build)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest
from click.testing import CliRunner

import tessera
from tessera import backends
from tessera.backends import Backend, Support
from tessera.cli import cli
from tessera.config import CompilationConfig
from tessera.errors import BackendUnavailableError, DeviceUnavailableError, PartitionError
from tessera.target import Availability, Target

from ..ir.models import mlp
from ..registering import registered

CUDA_HERE = Target("cuda").kind.is_available().ok
WOULD_SERVE = ("onnxruntime-gpu (its CUDAExecutionProvider: 'onnxruntime -device=cuda'), a "
               "CUDA build of torch ('torch -device=cuda') or TensorRT ('tensorrt')")


def test_a_cuda_config_is_refused_not_run_on_the_cpu() -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        tessera.compile(mlp(), "cuda -arch=sm_80")
    message = str(caught.value)
    assert message.startswith(
        "no backend serves device 'cuda' here: the config lists 'cuda' (cuda -arch=sm_80), "
        "but no backend for it. List one in the targets, e.g. "
        "'onnxruntime -device=cuda,cuda -arch=sm_80'. What serves cuda: " + WOULD_SERVE)
    assert message.endswith("A config for another machine can still be created, shown and "
                            "saved; placing it needs that machine.")
    assert isinstance(caught.value, BackendUnavailableError)
    with pytest.raises(DeviceUnavailableError, match="no backend serves device 'cuda'"):
        tessera.partition(mlp(), "cuda -arch=sm_80")


def test_the_config_itself_is_created_shown_and_saved(tmp_path: Path) -> None:
    config = CompilationConfig.create("cuda -arch=sm_80")
    assert config.devices == ("cuda",) and config.priority == ()
    path = tmp_path / "cuda.json"
    path.write_text(config.to_json())
    assert CompilationConfig.create(str(path)) == config
    result = CliRunner().invoke(cli, ["config", "show", "-t", "cuda -arch=sm_80"])
    assert result.exit_code == 0 and "cuda -arch=sm_80" in result.stdout


def test_a_cpu_and_cuda_config_is_refused_and_names_the_nodes_pinned_to_cuda() -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        tessera.partition(mlp(), "onnxruntime,cpu,cuda -arch=sm_80",
                          pins={"relu": "cuda", "re:mm.": "cuda"})
    assert str(caught.value).startswith(
        "no backend serves device 'cuda' here: the config lists 'cuda' (cuda -arch=sm_80), "
        "but no backend for it; node(s) pinned to it: mm1, relu, mm2. List one in the "
        "targets")
    with pytest.raises(DeviceUnavailableError, match="the config lists 'cuda', but no backend"):
        tessera.partition(mlp(), "onnxruntime,cpu,cuda")  # no pins: the device alone


@pytest.mark.skipif(CUDA_HERE, reason="this machine has a CUDA driver")
@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_a_cuda_backend_on_a_machine_without_cuda_says_why(backend: str) -> None:
    if not backends.get(backend).is_available().ok:
        pytest.skip(f"needs {backend}")
    with pytest.raises(DeviceUnavailableError) as caught:
        tessera.partition(mlp(), f"{backend} -device=cuda,openvino,cpu")
    assert str(caught.value).startswith(
        f"device 'cuda' is not available to '{backend} -device=cuda' on this machine: no "
        f"NVIDIA driver found on this machine. What serves cuda: {WOULD_SERVE}.")


def test_a_pin_to_a_cuda_backend_is_refused_too() -> None:
    if CUDA_HERE:
        pytest.skip("this machine has a CUDA driver")
    with pytest.raises(DeviceUnavailableError, match="not available to 'onnxruntime "
                                                     "-device=cuda'"):
        tessera.partition(mlp(), "onnxruntime", pins={"relu": "onnxruntime -device=cuda"})


class FakeGpuBackend(Backend):
    """TEST-ONLY backend on cuda: runs MatMul and Add, and says whether this machine serves
    its device as it is told (`here`, `why`)."""

    def __init__(self, here: bool = True, why: str = "") -> None:
        self.here, self.why = here, why

    def supports(self, node: onnx.NodeProto, opset: int, types: Any = None,
                 constants: Any = None, *, target: Target | None = None) -> Support:
        return Support(node.op_type in ("MatMul", "Add"), "the fake runs MatMul and Add")

    def device_available(self, target: Target) -> Availability:
        return Availability(self.here, self.why)


@pytest.fixture
def fake_gpu() -> Iterator[Backend]:
    with registered("test-fake-gpu", FakeGpuBackend(), serves=("cuda",)) as backend:
        yield backend


def test_the_reference_never_takes_a_cuda_only_configs_nodes(fake_gpu: Backend) -> None:
    with pytest.raises(PartitionError) as caught:
        tessera.partition(mlp(), "test-fake-gpu,cuda")
    message = str(caught.value)
    assert message.startswith(
        "2 node(s) have no backend (the reference fallback runs CPU nodes only, and the "
        "config has no cpu device: add 'cpu' to the targets to let it run them):\n"
        "  relu (Relu): test-fake-gpu: the fake runs MatMul and Add\n")
    assert "softmax (Softmax)" in message and "reference" not in message.split(":\n")[1]
    # with a cpu device, the reference runs what the GPU backend cannot
    plan = tessera.partition(mlp(), "test-fake-gpu,cpu,cuda")
    assert [(str(p.target), p.target.device_type, p.nodes) for p in plan.partitions] == [
        ("test-fake-gpu", "cuda", ("mm1", "add1")), ("reference", "cpu", ("relu",)),
        ("test-fake-gpu", "cuda", ("mm2", "add2")), ("reference", "cpu", ("softmax",))]


def test_a_backend_that_cannot_serve_its_device_here_gives_its_reason(fake_gpu: Backend
                                                                      ) -> None:
    assert isinstance(fake_gpu, FakeGpuBackend)
    fake_gpu.here, fake_gpu.why = False, "the fake's CUDA build is missing"
    with pytest.raises(DeviceUnavailableError, match=re.escape(
            "device 'cuda' is not available to 'test-fake-gpu' on this machine: the fake's "
            "CUDA build is missing. What serves cuda: onnxruntime-gpu")):
        tessera.partition(mlp(), "test-fake-gpu,onnxruntime,cpu")


def test_explain_prints_the_error_and_fails(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    result = CliRunner().invoke(cli, ["explain", str(model), "-t", "cuda -arch=sm_80"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no backend serves device 'cuda' here: the config "
                                    "lists 'cuda' (cuda -arch=sm_80), but no backend for it.")
