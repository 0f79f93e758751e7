"""How many samples calibrate int8 forms: a flow option (in the cache key), taken from the
calibration half only, so the halves stay disjoint whatever it is."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.config import CompilationConfig
from tessera.errors import ConfigError
from tessera.ir import Samples, load_model
from tessera.runtime._calibration import Activations

from ..ir.models import mlp

MODEL = load_model(mlp())


def _samples(count: int) -> Samples:
    rng = np.random.default_rng(count)
    return Samples.load([{"x": rng.standard_normal((2, 8)).astype(np.float32)}
                         for _ in range(count)], MODEL)


@given(st.integers(2, 12), st.one_of(st.none(), st.integers(1, 8)))
def test_the_calibration_half_is_cut_and_stays_apart_from_validation(
        count: int, calibrating: int | None) -> None:
    samples = _samples(count)
    calibration, validation = samples.split(calibrating)
    half = (count + 1) // 2
    assert len(calibration) == (half if calibrating is None else min(calibrating, half))
    assert calibration.labels == samples.labels[0::2][:len(calibration)]
    assert validation.labels == samples.labels[1::2]
    assert not set(calibration.labels) & set(validation.labels)


def test_the_option_parses_keys_and_refuses_nonsense() -> None:
    chosen = CompilationConfig.create("onnxruntime", calibration_samples="3")
    assert chosen.options.calibration_samples == 3
    assert CompilationConfig.create("onnxruntime", calibration_samples="none"
                                    ).options.calibration_samples is None
    assert chosen.cache_key() != CompilationConfig.create("onnxruntime").cache_key()
    with pytest.raises(ConfigError, match="calibration"):
        CompilationConfig.create("onnxruntime", calibration_samples=0)


def test_int8_forms_are_calibrated_on_the_samples_asked_for() -> None:
    samples = _samples(9)  # five calibrate, four validate
    everything, two = Activations(MODEL, samples), Activations(MODEL, samples, 2)
    assert len(everything.samples) == 5 and len(two.samples) == 2
    assert len(two.of(["x"])) == 2
    # a form calibrated on fewer samples is another form in the compile cache
    assert everything.for_partition(("x",)).digest != two.for_partition(("x",)).digest
