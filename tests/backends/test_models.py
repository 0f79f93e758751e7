"""The bundled models (torch definitions, random weights, exported at test time and cached) on
every available backend, through tessera, within rtol 1e-3 / atol 1e-4 of the reference."""

import numpy as np
import pytest

import tessera
from tessera import backends

zoo = pytest.importorskip("tessera.zoo")
pytest.importorskip("torch")

MODELS = ["mlp", "resnet-tiny", "mobilenetv2-tiny", "bert-tiny", "gpt2-block-tiny"]
BACKENDS = [n for n in backends.names() if n != "reference"
            and backends.get(n).is_available().ok]


@pytest.fixture(scope="module")
def references() -> dict[str, tuple[dict[str, np.ndarray], np.ndarray]]:
    found = {}
    for name in MODELS:
        inputs = zoo.example_inputs(name)
        model = tessera.load_model(zoo.export(name))
        found[name] = inputs, backends.get("reference").compile(model.proto).run(inputs)["output"]
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MODELS)
def test_bundled_model_matches_the_reference(name: str, backend: str, references: dict) -> None:  # type: ignore[type-arg]
    inputs, expected = references[name]
    compiled = tessera.compile(zoo.export(name), backend, fallback=False, accuracy="exact")
    assert [str(p.target) for p in compiled.plan.partitions] == [backend]  # the whole model
    got = compiled.run(inputs)["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


def test_exports_are_cached_and_small() -> None:
    first = zoo.export("mlp")
    assert zoo.export("mlp") == first and first.stat().st_size < 1_000_000
    assert set(MODELS) <= set(zoo.names())
