"""Tabular models as they are converted in production, on the spot: a scikit-learn pipeline
through skl2onnx and a LightGBM classifier through onnxmltools. Each compiles on
`openvino,onnxruntime,cpu`, runs, and agrees exactly with ONNX Runtime running the converted
file alone, string labels and probability maps included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import tessera

pytest.importorskip("skl2onnx")
pytest.importorskip("onnxmltools")
pytest.importorskip("lightgbm")

TARGETS = "openvino,onnxruntime,cpu"


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    numbers = rng.standard_normal((200, 3)).astype(np.float32)
    colours = rng.choice(["red", "green", "blue"], size=(200, 1))
    labels = np.where(numbers[:, 0] + (colours[:, 0] == "red") > 0.5, "yes", "no")
    return numbers, colours, labels


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _agrees(compiled: tessera.CompiledModel, model: onnx.ModelProto,
            feeds: dict[str, Any]) -> None:
    want = _onnxruntime(model, feeds)
    got = compiled.run(feeds)
    names = [o.name for o in model.graph.output]
    assert list(got) == names
    for name, expected in zip(names, want, strict=True):
        if isinstance(expected, list):  # ZipMap: one dict per row, label -> probability
            assert got[name] == expected
        else:
            assert got[name].tolist() == expected.tolist()


def test_a_scikit_learn_pipeline_with_a_label_encoder_agrees_exactly(tmp_path: Path) -> None:
    import pandas as pd
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numbers, colours, labels = _data()
    frame = pd.DataFrame({"a": numbers[:, 0], "b": numbers[:, 1], "c": numbers[:, 2],
                          "colour": colours[:, 0]})
    prepare = ColumnTransformer([("scale", StandardScaler(), ["a", "b", "c"]),
                                 ("encode", OneHotEncoder(), ["colour"])])
    pipeline = Pipeline([("prepare", prepare), ("trees", RandomForestClassifier(
        n_estimators=10, max_depth=4, random_state=0))]).fit(frame, labels)
    model = to_onnx(pipeline, initial_types=[
        ("a", FloatTensorType([None, 1])), ("b", FloatTensorType([None, 1])),
        ("c", FloatTensorType([None, 1])), ("colour", StringTensorType([None, 1]))])
    ops = {n.op_type for n in model.graph.node}
    assert {"OneHotEncoder", "Scaler", "TreeEnsembleClassifier", "ZipMap"} <= ops
    compiled = tessera.compile(model, TARGETS)
    assert any(n.startswith("region:") for p in compiled.plan.partitions for n in p.nodes)
    feeds = {"a": numbers[:20, 0:1], "b": numbers[:20, 1:2], "c": numbers[:20, 2:3],
             "colour": colours[:20]}  # a numpy string array, as ONNX Runtime takes it
    _agrees(compiled, model, feeds)
    compiled.save(tmp_path / "pipeline.tess")
    _agrees(tessera.load(tmp_path / "pipeline.tess"), model, feeds)


def test_a_lightgbm_classifier_agrees_exactly() -> None:
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    numbers, _, labels = _data()
    classifier = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1)
    classifier.fit(numbers, labels)
    model = onnxmltools.convert_lightgbm(classifier, initial_types=[
        ("x", FloatTensorType([None, 3]))], target_opset=15, zipmap=True)
    compiled = tessera.compile(model, TARGETS)
    _agrees(compiled, model, {"x": numbers[:20]})
