"""The placement picture: one box per partition coloured by target, long chains collapsed,
node details embedded; and, where Chromium is installed, rendered by a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.cli._html import colours, render_html
from tessera.ir import load_model

from ..ir.models import mlp


def chain_model(length: int = 8) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"],
                              name=f"n{i}") for i in range(length)]
    nodes.append(helper.make_node("Add", [f"v{length}", f"v{length // 2}"], ["y"],
                                  name="join"))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mixed_plan() -> tuple[tessera.placement.Plan, tessera.ir.Model]:
    model = load_model(mlp())
    plan = tessera.partition(model, "onnxruntime,reference", partitioner="greedy",
                             pins={"relu": "reference", "softmax": "reference"})
    return plan, model


def test_one_coloured_box_per_partition_and_a_legend() -> None:
    plan, model = mixed_plan()
    page = render_html(plan, model, "mlp")
    boxes = re.findall(r'<rect class="partition" data-partition="(\d+)" '
                       r'data-target="([^"]+)".*?stroke:(#\w+)', page)
    assert [int(i) for i, _, _ in boxes] == list(range(len(plan.partitions)))
    colour = colours(plan)
    assert [(t, c) for _, t, c in boxes] == [(str(p.target), colour[str(p.target)])
                                             for p in plan.partitions]
    assert len(set(colour.values())) == len(colour) == 2
    assert "onnxruntime: 4 nodes in 2 partition(s)" in page
    assert '"decision": "pinned to reference' in page  # the reason travels with the node


def test_long_chains_collapse_into_one_box() -> None:
    model = load_model(chain_model(8))
    plan = tessera.partition(model, "onnxruntime", partitioner="greedy")
    page = render_html(plan, model, "chain")
    # n0..n3 end where the chain branches, n4..n7 follow, and the join has two producers
    assert page.count('<g class="node"') == 3
    assert page.count("4 nodes: Neg…Relu") == 2


def test_scripts_cannot_be_injected_through_names() -> None:
    proto = mlp()
    proto.graph.node[2].name = "</script><script>alert(1)</script>"
    model = load_model(proto)
    plan = tessera.partition(model, "onnxruntime", partitioner="greedy")
    page = render_html(plan, model, "mlp")
    assert "<script>alert(1)" not in page


BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here (Debian: apt-get install "
                                            "chromium); the picture is checked without it")
def test_the_picture_renders_in_a_real_browser(tmp_path: Path) -> None:
    plan, model = mixed_plan()
    page = tmp_path / "placement.html"
    page.write_text(render_html(plan, model, "mlp"))
    flags = [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu",
             "--window-size=1200,900"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert 'data-ready="1"' in dom  # the page's script ran
    painted = re.findall(r'<rect class="partition"[^>]*data-painted="(rgb\([^"]+\))"', dom)
    assert len(painted) == len(plan.partitions)
    by_target = {str(p.target): c for p, c in zip(plan.partitions, painted, strict=True)}
    assert len(set(by_target.values())) == len(by_target)  # each target its own colour
    shot = tmp_path / "placement.png"
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
