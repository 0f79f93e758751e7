"""The one place validation samples get their trusted answers: the consensus on the
validation half of the samples, in order, with who gave them."""

from __future__ import annotations

import numpy as np

from tessera import backends, load_model
from tessera.ir import Samples
from tessera.oracle import Oracle, Voter, answers, reference_answers

from ..ir.models import mlp


def _samples(count: int) -> Samples:
    rng = np.random.default_rng(0)
    model = load_model(mlp())
    return Samples.load([{"x": rng.standard_normal((2, 8)).astype(np.float32)}
                         for _ in range(count)], model)


def test_the_answers_are_the_consensus_on_the_validation_half_in_order() -> None:
    model, samples = load_model(mlp()), _samples(4)
    reference = reference_answers(model, samples)
    _, validation = samples.split()
    assert len(reference.feeds) == 2
    for feed, expected in zip(reference.feeds, validation, strict=True):
        np.testing.assert_array_equal(feed["x"], expected["x"])
    given = answers(model.proto, reference.feeds)
    for got, want in zip(reference.outputs, given.outputs, strict=True):
        np.testing.assert_array_equal(got["y"], want["y"])
    assert reference.truth.decided and reference.judges.startswith("the consensus of ")
    want = backends.get("reference").compile(mlp()).run(dict(reference.feeds[0]))["y"]
    np.testing.assert_allclose(reference.outputs[0]["y"], want, rtol=1e-5, atol=1e-6)


def test_one_sample_is_judged_on_itself_and_a_lone_voter_says_so() -> None:
    model, samples = load_model(mlp()), _samples(1)
    alone = Oracle(voters=(Voter("onnx.reference", "reference"),))
    reference = reference_answers(model, samples, alone)
    assert len(reference.feeds) == 1 and not reference.truth.decided
    assert reference.judges.startswith("onnx.reference alone (no majority")
