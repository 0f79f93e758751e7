"""`generate`: a compiled decoder with a key/value cache run as a prefill and then one token
at a time gives the tokens of the same graph run plainly by onnxruntime, on ONNX Runtime's
I/O binding and on the generic loop; sampling follows its seed; the presents go back as the
pasts without copies (as ONNX Runtime's own values where bound); an interrupt keeps the
tokens so far; bad prompts, arguments and models are typed errors naming what is wrong and
the limit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

import tessera
from tessera import backends, zoo
from tessera.config import CompilationConfig
from tessera.errors import InputError, ModelError
from tessera.ir import load_model
from tessera.runtime import CompiledModel, DecoderLayout, GenerateResult, generate
from tessera.runtime._compiled import assemble
from tessera.runtime._generate import _sample

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")  # the bundled decoders are exported from torch definitions

pytestmark = pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                                reason="needs onnxruntime")

TINY = ["gpt2-kv-tiny", "llama-kv-tiny"]
# One size per dimension: a decode step's sizes (total_sequence = past_sequence + sequence).
# A plain size bounds nothing, so every length runs.
PROFILE = "batch=1;sequence=1;past_sequence=16;total_sequence=17"
# Ranges, the empty past of the prefill included, with the total tied to the others.
RANGES = "batch=1;sequence=1:1:64;past_sequence=0:16:63;total_sequence=past_sequence+sequence"


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompiledModel]:
    return {name: tessera.compile(zoo.export_decoder(name), "onnxruntime", shapes=PROFILE)
            for name in TINY}


def prompt(name: str, length: int = 5, batch: int = 1, seed: int = 0) -> np.ndarray:
    ids: np.ndarray = zoo.decoder_inputs(name, length, batch=batch, seed=seed)["input_ids"]
    return ids


def plain_greedy(name: str, ids: np.ndarray, new: int) -> np.ndarray:
    """The oracle: the exported graph run by onnxruntime directly, each step's presents fed
    back as the next step's pasts, the argmax of the last logits chosen."""
    session = ort.InferenceSession(str(zoo.export_decoder(name)),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batch, length = ids.shape
    feeds = zoo.decoder_inputs(name, length, batch=batch)
    feeds["input_ids"] = ids
    tokens = []
    for _ in range(new):
        out = dict(zip(names, session.run(None, feeds), strict=True))
        token = out["logits"][:, -1].argmax(-1)
        tokens.append(token)
        total = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": token.reshape(batch, 1).astype(np.int64),
                 "attention_mask": np.ones((batch, total), np.int64),
                 "position_ids": np.full((batch, 1), total - 1, np.int64)}
        feeds.update({"past_key_values." + k.removeprefix("present."): v
                      for k, v in out.items() if k.startswith("present.")})
    return np.concatenate([ids, np.stack(tokens, axis=1)], axis=1)


def fed_back(model: CompiledModel, monkeypatch: pytest.MonkeyPatch) -> CompiledModel:
    """`model` run by the generic loop (each step's presents fed back through `run`): its
    partition offers no decoder of its own."""
    for part in model.parts:
        monkeypatch.setattr(part, "stateful_decoder", lambda *args: None)
    return model


class Recorder:
    """The compiled model's `run`, wrapped: what each call was fed and gave back; it raises
    KeyboardInterrupt at call `interrupt_at` (1 is the prefill)."""

    def __init__(self, run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
                 interrupt_at: int | None = None) -> None:
        self.inner = run
        self.interrupt_at = interrupt_at
        self.fed: list[Mapping[str, np.ndarray]] = []
        self.gave: list[dict[str, np.ndarray]] = []

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.fed.append(inputs)
        if len(self.fed) == self.interrupt_at:
            raise KeyboardInterrupt
        out = self.inner(inputs)
        self.gave.append(out)
        return out


# -- the tokens ------------------------------------------------------------------------------
@pytest.mark.parametrize("cache", ["onnxruntime I/O binding", "fed back"])
@pytest.mark.parametrize("name", TINY)
def test_greedy_equals_the_graph_run_plainly(compiled: dict[str, CompiledModel], name: str,
                                             cache: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    ids = prompt(name)
    model = compiled[name] if cache != "fed back" else fed_back(compiled[name], monkeypatch)
    result = model.generate(ids, 16)
    assert isinstance(result, GenerateResult)
    assert (result.new_tokens, result.stopped, result.cache) == (16, "length", cache)
    assert result.tokens.dtype == np.int64 and result.tokens.shape == (1, 21)
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, ids, 16))
    np.testing.assert_array_equal(result.generated, result.tokens[:, 5:])
    assert result.prefill_seconds > 0 and result.decode_seconds > 0


def test_greedy_over_32_tokens_a_batch_and_a_1d_prompt(
        compiled: dict[str, CompiledModel]) -> None:
    name = "llama-kv-tiny"
    ids = prompt(name, 4, batch=2, seed=4)
    result = generate(compiled[name], ids, 32)
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, ids, 32))
    alone = compiled[name].generate(list(ids[1]), 32)  # one row, 1-D, a list
    np.testing.assert_array_equal(alone.tokens[0], result.tokens[1])


def test_sampling_follows_its_seed(compiled: dict[str, CompiledModel]) -> None:
    model = compiled["gpt2-kv-tiny"]
    ids = prompt("gpt2-kv-tiny")

    def sampled(seed: int, **options: Any) -> np.ndarray:
        tokens: np.ndarray = model.generate(ids, 16, do_sample=True, seed=seed,
                                            **options).tokens
        return tokens

    np.testing.assert_array_equal(sampled(1), sampled(1))
    np.testing.assert_array_equal(sampled(1, top_k=40, top_p=0.9, temperature=0.7),
                                  sampled(1, top_k=40, top_p=0.9, temperature=0.7))
    assert not np.array_equal(sampled(1), sampled(2))
    assert not np.array_equal(sampled(1), model.generate(ids, 16).tokens)


@pytest.mark.parametrize("options", [{"top_k": 1}, {"top_p": 1e-9}, {"temperature": 1e-6}])
def test_sampling_from_one_candidate_is_greedy(compiled: dict[str, CompiledModel],
                                               options: dict[str, Any]) -> None:
    model = compiled["llama-kv-tiny"]
    ids = prompt("llama-kv-tiny", seed=5)
    greedy = model.generate(ids, 16).tokens
    for seed in (0, 1):
        got = model.generate(ids, 16, do_sample=True, seed=seed, **options).tokens
        np.testing.assert_array_equal(got, greedy)


def test_top_k_then_top_p_keep_the_likeliest_tokens() -> None:
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.tile(np.log(probs), (4000, 1))
    rng = np.random.default_rng(0)
    drawn = _sample(logits, rng, 1.0, None, None)
    assert set(drawn) == {0, 1, 2, 3}
    assert set(_sample(logits, rng, 1.0, 3, None)) == {0, 1, 2}
    # top-p 0.75: 0.5 is short of it, 0.5 + 0.3 reaches it, so two are kept
    kept = _sample(logits, rng, 1.0, None, 0.75)
    assert set(kept) == {0, 1}
    assert abs((kept == 0).mean() - 0.5 / 0.8) < 0.03
    assert set(_sample(logits, rng, 1.0, 1, 0.99)) == {0}


def test_an_end_token_stops_the_rows_that_gave_it(compiled: dict[str, CompiledModel]) -> None:
    model = compiled["gpt2-kv-tiny"]
    ids = prompt("gpt2-kv-tiny")
    greedy = model.generate(ids, 16).tokens[0, 5:]
    eos = int(greedy[3])
    first = int(np.argmax(greedy == eos))
    result = model.generate(ids, 16, eos_token_id=eos)
    assert (result.stopped, result.new_tokens) == ("eos", first + 1)
    np.testing.assert_array_equal(result.generated[0], greedy[:first + 1])


# -- the cache between steps -----------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_presents_become_the_next_pasts_without_a_copy(compiled: dict[str, CompiledModel],
                                                       name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = fed_back(compiled[name], monkeypatch)
    recorder = Recorder(model.run)
    monkeypatch.setattr(model, "run", recorder)
    result = model.generate(prompt(name), 6)
    assert result.new_tokens == 6 and len(recorder.fed) == 6
    layout = DecoderLayout.of(model)
    assert len(layout.cache) == 2 * zoo.decoder_spec(name).layers
    assert recorder.fed[0]["past_key_values.0.key"].shape[2] == 0
    for step in range(1, 6):
        fed, gave = recorder.fed[step], recorder.gave[step - 1]
        for pair in layout.cache:
            assert fed[pair.past] is gave[pair.present], (step, pair.past)
        assert fed["attention_mask"].shape == (1, 5 + step)
        assert fed["position_ids"].tolist() == [[4 + step]]
        assert fed["input_ids"].tolist() == [[result.tokens[0, 4 + step]]]


class RecordedBinding:
    """An ONNX Runtime I/O binding, wrapped: the address of each value bound as an input
    (`ortvalue`: kept by ONNX Runtime; `numpy`: copied in) and of each output."""

    def __init__(self, inner: Any, log: list[dict[str, Any]]) -> None:
        self.inner, self.bound = inner, {}
        log.append(self.bound)

    def bind_cpu_input(self, name: str, value: np.ndarray) -> None:
        self.bound[name] = ("numpy", value.__array_interface__["data"][0])
        self.inner.bind_cpu_input(name, value)

    def bind_ortvalue_input(self, name: str, value: Any) -> None:
        self.bound[name] = ("ortvalue", value.data_ptr())
        self.inner.bind_ortvalue_input(name, value)

    def get_outputs(self) -> Any:
        outputs = self.inner.get_outputs()
        self.bound["outputs"] = [value.data_ptr() for value in outputs]
        return outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("name", TINY)
def test_io_binding_keeps_the_cache_as_onnxruntime_values(compiled: dict[str, CompiledModel],
                                                          name: str,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """After the prefill, each past is bound as the very buffer ONNX Runtime gave as the
    present one step before: no step copies the cache in or out."""
    model = compiled[name]
    (part,) = model.parts
    layout = DecoderLayout.of(model)
    decoder = part.stateful_decoder({p.past: p.present for p in layout.cache}, "input_ids",
                                    "logits")
    assert decoder is not None and decoder.cache == "onnxruntime I/O binding"
    session = decoder.session  # type: ignore[attr-defined]
    log: list[dict[str, Any]] = []
    monkeypatch.setattr(session, "io_binding",
                        lambda make=session.io_binding: RecordedBinding(make(), log))
    result = model.generate(prompt(name), 6)
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, prompt(name), 6))
    assert len(log) == 6
    assert all(log[0][pair.past][0] == "numpy" for pair in layout.cache)  # the empty past
    for step in range(1, 6):
        presents = log[step - 1]["outputs"][1:]  # the logits first, then the pairs' order
        for pair, address in zip(layout.cache, presents, strict=True):
            assert log[step][pair.past] == ("ortvalue", address), (step, pair.past)
        assert log[step]["input_ids"][0] == "numpy"


# -- interrupts ------------------------------------------------------------------------------
def test_an_interrupt_returns_the_tokens_so_far(compiled: dict[str, CompiledModel],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    model = fed_back(compiled["gpt2-kv-tiny"], monkeypatch)
    ids = prompt("gpt2-kv-tiny")
    full = model.generate(ids, 8).tokens
    # the prefill gives the first token, the first decode step the second; the second
    # decode step (the third run) is interrupted
    monkeypatch.setattr(model, "run", Recorder(model.run, interrupt_at=3))
    result = model.generate(ids, 8)
    assert (result.stopped, result.new_tokens) == ("interrupted", 2)
    np.testing.assert_array_equal(result.tokens, full[:, :7])
    monkeypatch.setattr(model, "run", Recorder(model.run, interrupt_at=1))
    during_prefill = model.generate(ids, 8)
    assert (during_prefill.stopped, during_prefill.new_tokens) == ("interrupted", 0)
    np.testing.assert_array_equal(during_prefill.tokens, ids)


# -- errors ----------------------------------------------------------------------------------
def test_a_model_without_a_cache_is_a_model_error() -> None:
    mlp = tessera.compile(zoo.export("mlp"), "onnxruntime")
    with pytest.raises(ModelError, match=r"no key/value cache.*inputs: x;.*past_key_values"):
        mlp.generate(np.array([1, 2, 3]), 4)


@pytest.mark.parametrize(("ids", "new", "message"), [
    (np.zeros((1, 0), np.int64), 4, r"input 'input_ids': the prompt is empty"),
    ([], 4, r"input 'input_ids': the prompt is empty"),
    ([1, 2, 3], 0, r"max_new_tokens must be an integer >= 1, got 0"),
    ([1, 512, 3], 4, r"input 'input_ids': token id 512 is outside the vocabulary \[0, 512\)"),
    ([1, -1], 4, r"input 'input_ids': token id -1 is outside the vocabulary \[0, 512\)"),
    ([1.0, 2.0], 4, r"input 'input_ids': token ids are integers, got an array of float64"),
    (np.ones((1, 2, 3), np.int64), 4, r"input 'input_ids': a prompt is \[sequence\] or"),
])
def test_bad_prompts_and_lengths_name_the_input_and_the_limit(
        compiled: dict[str, CompiledModel], ids: Any, new: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        compiled["gpt2-kv-tiny"].generate(ids, new)


@pytest.mark.parametrize(("options", "message"), [
    ({"temperature": 0.0}, r"temperature must be a number > 0, got 0.0"),
    ({"top_k": 0}, r"top_k must be an integer >= 1"),
    ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\]"),
    ({"eos_token_id": 512}, r"eos_token_id must be a token id in \[0, 512\)"),
])
def test_bad_sampling_options_are_input_errors(compiled: dict[str, CompiledModel],
                                               options: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        compiled["gpt2-kv-tiny"].generate([1, 2], 4, do_sample=True, **options)


def ranged(model: CompiledModel, shapes: str) -> CompiledModel:
    """`model` with the shape profile `shapes`, whose ranges `run` enforces, built from the
    compiled parts (no second compile)."""
    config = CompilationConfig.create(model.config, shapes=shapes)
    return assemble(model.model, config, model.plan, model.parts)


def test_a_prompt_longer_than_the_profile_allows_is_refused_before_running(
        compiled: dict[str, CompiledModel], monkeypatch: pytest.MonkeyPatch) -> None:
    model = ranged(compiled["gpt2-kv-tiny"],
                   "batch=1;sequence=1:1:8;past_sequence=16;total_sequence=1:17:24")
    recorder = Recorder(model.run)
    monkeypatch.setattr(model, "run", recorder)
    with pytest.raises(InputError, match=r"a prompt of 9 token\(s\) with max_new_tokens=2 .* "
                                         r"the prefill .*input 'input_ids'.*dimension "
                                         r"'sequence' is 9, outside the profile's range 1..8"):
        model.generate(prompt("gpt2-kv-tiny", 9), 2)
    # 5 + 20 tokens: the last decode step sees 24 of them, the most the profile allows
    with pytest.raises(InputError, match=r"max_new_tokens=21 .*decode step 20 .*input "
                                         r"'attention_mask'.*dimension 'total_sequence' is 25, "
                                         r"outside the profile's range 1..24"):
        model.generate(prompt("gpt2-kv-tiny"), 21)
    assert recorder.fed == []
    result = model.generate(prompt("gpt2-kv-tiny"), 20)
    np.testing.assert_array_equal(result.tokens,
                                  compiled["gpt2-kv-tiny"].generate(prompt("gpt2-kv-tiny"),
                                                                    20).tokens)


def test_a_profile_of_ranges_with_the_total_as_a_sum_compiles_and_bounds_the_prompt(
        compiled: dict[str, CompiledModel]) -> None:
    model = tessera.compile(zoo.export_decoder("gpt2-kv-tiny"), "onnxruntime", shapes=RANGES)
    # 60 tokens fit the prefill (sequence <= 64), but the last of 9 steps sees 69 of them
    with pytest.raises(InputError) as raised:
        model.generate(prompt("gpt2-kv-tiny", 60), max_new_tokens=10)
    message = str(raised.value)
    for words in ("a prompt of 60 token(s) with max_new_tokens=10", "decode step 9",
                  "dimension 'past_sequence' is 68, outside the profile's range 0..63",
                  "at most 64 tokens in all", "max_new_tokens=5 at most"):
        assert words in message
    with pytest.raises(InputError, match=r"the prefill .*dimension 'sequence' is 65, outside "
                                         r"the profile's range 1\.\.64.*a prompt of at most 64"):
        model.generate(prompt("gpt2-kv-tiny", 65), max_new_tokens=1)
    # the prefill's empty past and each one-token step fit; the tokens are the same
    result = model.generate(prompt("gpt2-kv-tiny"), 16)
    np.testing.assert_array_equal(
        result.tokens, compiled["gpt2-kv-tiny"].generate(prompt("gpt2-kv-tiny"), 16).tokens)
    # a mask that breaks the sum is refused by run, naming the sum
    feeds = zoo.decoder_inputs("gpt2-kv-tiny", 5)
    feeds["attention_mask"] = np.ones((1, 6), np.int64)
    with pytest.raises(InputError, match=r"input 'attention_mask': dimension 'total_sequence' "
                                         r"is 6, but the shape profile makes it "
                                         r"past_sequence\+sequence = 0\+5 = 5"):
        model.run(feeds)


def test_a_decoder_without_a_profile_is_told_the_form_with_the_sum() -> None:
    with pytest.raises(ModelError) as raised:
        tessera.compile(zoo.export_decoder("gpt2-kv-tiny"), "onnxruntime")
    message = str(raised.value)
    for words in ("does not allow", "without a shape profile",
                  "total_sequence=past_sequence+sequence"):
        assert words in message


# -- the layout ------------------------------------------------------------------------------
def _decoder(present_key: str = "present.0.key", key_dtype: int | None = None,
             key_rank_up: bool = False, with_value: bool = True) -> Any:
    """A stand-in decoder: token ids to logits, each past to its present."""
    import onnx
    from onnx import TensorProto, helper

    cache = ["batch", 2, "past_sequence", 4]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                            ["batch", "sequence"]),
              helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, cache),
              helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT,
                                            cache)]
    nodes = [helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["f", "axes"], ["u"]),
             helper.make_node("MatMul", ["u", "w"], ["logits"])]
    if key_dtype is not None:
        nodes.append(helper.make_node("Cast", ["past_key_values.0.key"], [present_key],
                                      to=key_dtype))
    elif key_rank_up:
        nodes.append(helper.make_node("Unsqueeze", ["past_key_values.0.key", "last"],
                                      [present_key]))
    else:
        nodes.append(helper.make_node("Identity", ["past_key_values.0.key"], [present_key]))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch", "sequence", 8]),
               helper.make_tensor_value_info(present_key, key_dtype or TensorProto.FLOAT,
                                             [*cache, 1] if key_rank_up else cache)]
    if with_value:
        nodes.append(helper.make_node("Identity", ["past_key_values.0.value"],
                                      ["present.0.value"]))
        outputs.append(helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT,
                                                     cache))
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, [
        helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
        helper.make_tensor("last", TensorProto.INT64, [1], [4]),
        helper.make_tensor("w", TensorProto.FLOAT, [1, 8], [0.5] * 8)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return load_model(onnx.ModelProto.FromString(proto.SerializeToString()),
                      require_static=False)


def test_the_layout_of_a_bundled_decoder(compiled: dict[str, CompiledModel]) -> None:
    layout = DecoderLayout.of(compiled["llama-kv-tiny"])
    assert (layout.tokens.name, layout.logits, layout.vocab) == ("input_ids", "logits", 512)
    assert layout.mask is not None and layout.mask.name == "attention_mask"
    assert layout.positions is not None and layout.positions.name == "position_ids"
    assert [(p.past, p.present, p.axis) for p in layout.cache[:2]] == [
        ("past_key_values.0.key", "present.0.key", 2),
        ("past_key_values.0.value", "present.0.value", 2)]
    assert layout.cache[0].shape == ("batch", 2, "past_sequence", 16)
    stand_in = DecoderLayout.of(_decoder())
    assert stand_in.mask is None and stand_in.vocab == 8 and len(stand_in.cache) == 2


@pytest.mark.parametrize(("model", "message"), [
    (lambda: _decoder(with_value=False),
     r"input 'past_key_values.0.value' has no output 'present.0.value'.*export the decoder "
     r"with its key/value cache"),
    (lambda: _decoder(present_key="present.1.key"),
     r"input 'past_key_values.0.key' has no output 'present.0.key'"),
    (lambda: _decoder(key_dtype=10),
     r"input 'past_key_values.0.key' is float32 but output 'present.0.key' is float16.*"
     r"one element type"),
    (lambda: _decoder(key_rank_up=True),
     r"input 'past_key_values.0.key' has shape \['batch', 2, 'past_sequence', 4\] but "
     r"output 'present.0.key' has shape .*one rank"),
])
def test_cache_pairs_that_do_not_match_are_model_errors(model: Callable[[], Any],
                                                        message: str) -> None:
    with pytest.raises(ModelError, match=message):
        DecoderLayout.of(model())
