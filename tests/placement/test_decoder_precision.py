"""A decoder's precision is judged on its next-token logits with teacher forcing: its roles
are read from the names, the judging feeds hold fp32's own greedy tokens after random
prompts with the prompts' cache as the pasts, the default budget is top-1 agreement, only
the logits are bounded, and its weight-only forms are tried without samples."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import backends, zoo
from tessera.config import CompilationConfig, ShapeProfile
from tessera.ir import load_model
from tessera.ir._decoder import DecoderNames, teacher_forced
from tessera.placement.judge._precision_setup import (
    DECODER_BUDGET,
    DECODER_PROMPT,
    DECODER_PROMPTS,
    DECODER_STEPS,
    PrecisionSetup,
    _lengths,
    payoff_rank,
    precision_setup,
    weight_only,
)
from tessera.target import Target

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")  # the bundled decoders are exported from torch definitions

RANGES = "batch=1;sequence=1:1:64;past_sequence=0:16:63;total_sequence=past_sequence+sequence"


def session_run(name: str):  # type: ignore[no-untyped-def]
    session = ort.InferenceSession(str(zoo.export_decoder(name)),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, dict(feeds)), strict=True))


def test_a_decoder_is_told_by_its_names() -> None:
    model = load_model(zoo.export_decoder("llama-kv-tiny"), require_static=False)
    names = DecoderNames.of(model)
    assert names is not None
    assert (names.tokens, names.mask, names.positions, names.logits) == \
        ("input_ids", "attention_mask", "position_ids", "logits")
    assert names.cache[:2] == (("past_key_values.0.key", "present.0.key"),
                               ("past_key_values.0.value", "present.0.value"))
    assert len(names.cache) == 2 * zoo.decoder_spec("llama-kv-tiny").layers
    assert DecoderNames.of(load_model(zoo.export("mlp"))) is None


@pytest.mark.parametrize("name", ["gpt2-kv-tiny", "llama-kv-tiny"])
def test_teacher_forced_feeds_hold_fp32s_own_greedy_tokens(name: str) -> None:
    model = load_model(zoo.export_decoder(name), require_static=False)
    names = DecoderNames.of(model)
    assert names is not None
    run = session_run(name)
    feeds = teacher_forced(model, names, 3, 8, 12, run)
    assert len(feeds) == 3
    for feed in feeds:
        assert feed["input_ids"].shape == (1, 12)
        assert feed["past_key_values.0.key"].shape[2] == 8  # the prompt's cache
        assert feed["attention_mask"].shape == (1, 20)
        assert feed["position_ids"].tolist() == [list(range(8, 20))]
        # each position's argmax is the next token fed: fp32's greedy choice
        predicted = run(feed)["logits"][0].argmax(-1)
        np.testing.assert_array_equal(predicted[:-1], feed["input_ids"][0, 1:])
    assert not np.array_equal(feeds[0]["input_ids"], feeds[1]["input_ids"])
    prefills = teacher_forced(model, names, 2, 8, 12)  # no fp32 to run: random prefills
    assert prefills[0]["input_ids"].shape == (1, 12)
    assert prefills[0]["past_key_values.0.key"].shape[2] == 0


def test_the_setup_of_a_decoder_without_samples() -> None:
    model = load_model(zoo.export_decoder("llama-kv-tiny"), require_static=False)
    config = CompilationConfig.create("openvino,onnxruntime", shapes=RANGES)
    setup = precision_setup(model, config, None, run=session_run("llama-kv-tiny"))
    assert isinstance(setup, PrecisionSetup)
    assert (setup.decoder, setup.generated, setup.judged) == (True, True, ("logits",))
    assert str(setup.config.options.accuracy) == DECODER_BUDGET
    assert len(setup.samples) == DECODER_PROMPTS
    assert setup.inputs.startswith(f"{DECODER_PROMPTS} generated prompts of token ids")
    for feed in setup.samples:  # judged after the cache length the profile serves most
        assert feed["past_key_values.0.key"].shape[2] == 16
        assert feed["input_ids"].shape == (1, DECODER_STEPS)
    offered = [str(v) for v in map(Target, [
        "openvino -precision=int8 -int8-recipe=weights", "openvino -precision=int4",
        "onnxruntime -precision=int8 -int8-recipe=static",
        "onnxruntime -precision=int8 -int8-recipe=dynamic"]) if setup.offers(v)]
    assert offered == ["openvino -precision=int8 -int8-recipe=weights",
                       "openvino -precision=int4"]


@pytest.mark.parametrize(("profile", "lengths"), [
    (RANGES, (16, DECODER_STEPS)),  # a range: its optimum
    ("batch=1;sequence=1:1:64;past_sequence=4@1,32@3;total_sequence=past_sequence+sequence",
     (32, DECODER_STEPS)),  # listed values: the one weighed most
    ("batch=1;sequence=1:1:6;past_sequence=4;total_sequence=past_sequence+sequence",
     (4, 6)),  # what the profile allows the new tokens
    (None, (DECODER_PROMPT, DECODER_STEPS)),  # no profile: the defaults
])
def test_the_judged_steps_follow_the_cache_length_the_profile_serves(
        profile: str | None, lengths: tuple[int, int]) -> None:
    model = load_model(zoo.export_decoder("gpt2-kv-tiny"), require_static=False)
    names = DecoderNames.of(model)
    assert names is not None
    shapes = ShapeProfile.parse(profile) if profile is not None else None
    assert _lengths(model, names, shapes) == lengths


def test_a_decoder_tries_weight_only_forms_first() -> None:
    forms = [Target(t) for t in (
        "onnxruntime -precision=int8 -int8-recipe=static", "openvino -precision=bf16",
        "openvino -precision=int4", "openvino -precision=int8 -int8-recipe=weights")]
    ranked = sorted(forms, key=lambda v: payoff_rank(v, decoder=True))
    assert [str(v) for v in ranked] == [
        "openvino -precision=int8 -int8-recipe=weights", "openvino -precision=int4",
        "openvino -precision=bf16", "onnxruntime -precision=int8 -int8-recipe=static"]
    assert weight_only(forms[2]) and weight_only(forms[3]) and not weight_only(forms[0])


@pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                    reason="needs onnxruntime")
def test_a_decoder_compiled_without_samples_is_judged_on_its_logits() -> None:
    compiled = tessera.compile(zoo.export_decoder("llama-kv-tiny"), "onnxruntime",
                               shapes=RANGES)
    record = compiled.plan.stats.precision
    assert record is not None and record.status == "searched"
    assert record.budget == DECODER_BUDGET
    assert record.inputs.startswith(f"{DECODER_PROMPTS} generated prompts")
    tried = [v.target for v in record.variants]
    assert tried and all(weight_only(Target(t)) for t in tried)
    accuracy = compiled.plan.stats.accuracy
    assert accuracy is not None
    assert {v.output for v in accuracy.values} == {"logits"}  # the cache is not bounded
    assert accuracy.value("top1", "logits") >= 0.99
