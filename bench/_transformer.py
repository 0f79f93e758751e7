"""A generated transformer stack for the memory bench: `layers` blocks of LayerNorm, a fused
QKV MatMul, multi-head attention over a short sequence, an output MatMul and a residual Add,
with random weights saved as ONNX external data (one file beside the model). Width 2048 and 24
layers hold 16.8M weights a layer, 1.5 GiB in all; the sequence is short so that a cold
compile stays a matter of minutes."""

from __future__ import annotations

from pathlib import Path


def transformer_stack(directory: Path, layers: int = 24, width: int = 2048, heads: int = 16,
                      sequence: int = 32, seed: int = 0, name: str = "transformer") -> Path:
    """Write `name.onnx` and its weights `name.weights` into `directory`, one tensor at a
    time (the bench itself never holds the weights); the model's path."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    directory.mkdir(parents=True, exist_ok=True)
    path, data_name = directory / f"{name}.onnx", f"{name}.weights"
    rng = np.random.default_rng(seed)
    tensors: list[onnx.TensorProto] = []
    offset = 0
    head = width // heads

    with (directory / data_name).open("wb") as data:

        def weight(label: str, shape: tuple[int, ...], scale: float, bias: float = 0.0
                   ) -> str:
            nonlocal offset
            values = (rng.standard_normal(shape, dtype=np.float32) * scale + bias).astype(
                np.float32)
            raw = values.tobytes()
            data.write(raw)
            tensor = TensorProto(name=label, data_type=TensorProto.FLOAT, dims=list(shape))
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)),
                               ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += len(raw)
            tensors.append(tensor)
            return label

        def const(label: str, values: list[int]) -> str:
            tensors.append(helper.make_tensor(label, TensorProto.INT64, [len(values)], values))
            return label

        split_heads = const("shape.heads", [sequence, heads, head])
        merge_heads = const("shape.merged", [sequence, width])
        scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0 / float(head) ** 0.5])
        tensors.append(scale)
        nodes = []
        current = "x"
        for k in range(layers):
            p = f"l{k}."

            def node(op: str, inputs: list[str], out: str, p: str = p, **attrs: object) -> str:
                nodes.append(helper.make_node(op, inputs, [p + out], name=p + out, **attrs))
                return p + out

            normed = node("LayerNormalization", [current, weight(p + "ln.scale", (width,), 0.02,
                                                                 1.0),
                                                 weight(p + "ln.bias", (width,), 0.02)],
                          "ln", axis=-1)
            qkv = node("Add", [node("MatMul", [normed, weight(p + "qkv.w", (width, 3 * width),
                                                             0.02)], "qkv.mm"),
                               weight(p + "qkv.b", (3 * width,), 0.02)], "qkv")
            nodes.append(helper.make_node("Split", [qkv], [p + "q", p + "k", p + "v"],
                                          name=p + "split", axis=-1, num_outputs=3))
            q, k_, v = (node("Transpose", [node("Reshape", [p + s, split_heads], s + ".heads")],
                             s + ".t", perm=[1, 0, 2]) for s in ("q", "k", "v"))
            scores = node("Mul", [node("MatMul", [q, node("Transpose", [k_], "kT",
                                                          perm=[0, 2, 1])], "qk"), "scale"],
                          "scores")
            attended = node("MatMul", [node("Softmax", [scores], "probs", axis=-1), v], "att")
            merged = node("Reshape", [node("Transpose", [attended], "att.t", perm=[1, 0, 2]),
                                      merge_heads], "merged")
            out = node("Add", [node("MatMul", [merged, weight(p + "out.w", (width, width),
                                                              0.02)], "out.mm"),
                               weight(p + "out.b", (width,), 0.02)], "out")
            current = node("Add", [current, out], "residual")
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, f"transformer_{layers}x{width}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [sequence, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [sequence, width])],
        initializer=tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(path))  # by path: it checks the external data as well
    return path


def weights_bytes(path: Path) -> int:
    """The bytes of a model's initializers, inline or external (its file's own bytes are
    not counted: they are the graph)."""
    import numpy as np
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    total = 0
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            if "length" in info:
                total += int(info["length"])
                continue
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        total += int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
    return total


__all__ = ["transformer_stack", "weights_bytes"]
