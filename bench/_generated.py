"""Models generated for the scaling bench: a deep stack of small residual conv blocks, so the
node count grows while each node stays cheap (the shape of DenseNets and long CNNs)."""

from __future__ import annotations

from pathlib import Path


def conv_stack(blocks: int, channels: int = 16, size: int = 32, seed: int = 0) -> bytes:
    """`blocks` residual blocks of Conv 3x3, Relu, Conv 1x1 and Add: 4 nodes each, on a
    1 x `channels` x `size` x `size` input, random weights. The serialized model."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    current = "x"
    for b in range(blocks):
        w3 = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.05
        w1 = rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.05
        weights += [numpy_helper.from_array(w3, f"b{b}.w3"),
                    numpy_helper.from_array(w1, f"b{b}.w1")]
        nodes += [
            helper.make_node("Conv", [current, f"b{b}.w3"], [f"b{b}.c3"], pads=[1, 1, 1, 1],
                             name=f"b{b}.conv3"),
            helper.make_node("Relu", [f"b{b}.c3"], [f"b{b}.r"], name=f"b{b}.relu"),
            helper.make_node("Conv", [f"b{b}.r", f"b{b}.w1"], [f"b{b}.c1"], name=f"b{b}.conv1"),
            helper.make_node("Add", [current, f"b{b}.c1"],
                             ["y" if b == blocks - 1 else f"b{b}.y"], name=f"b{b}.add"),
        ]
        current = f"b{b}.y"
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, f"conv_stack_{blocks}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def light_model(name: str) -> Path:
    """One of the small-weight copies of published CNNs the onnx package ships for its
    backend tests (`light_inception_v2`, `light_resnet50`, ...)."""
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not in this onnx package")
    return path


__all__ = ["conv_stack", "light_model"]
