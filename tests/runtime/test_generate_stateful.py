"""`generate` on a plan of one OpenVINO partition keeps the key/value cache inside OpenVINO
as state: the tokens are those of the exported graph run plainly by onnxruntime, in f32;
after the prefill only the new token's ids, mask and positions go in and only the logits
come out; the state is emptied before each call; a batch of prompts works; a saved and
loaded artifact does the same."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends, zoo
from tessera.backends import KeepsDecoderCache, StatefulDecoder
from tessera.backends._ov_attention import BEAM
from tessera.backends._ov_stateful import cached_attention
from tessera.errors import InputError
from tessera.runtime import CompiledModel, DecoderLayout

from .test_generate import RANGES, TINY, plain_greedy, prompt, ranged

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")  # the bundled decoders are exported from torch definitions

pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="needs openvino")

NEW_TOKENS = ("input_ids", "attention_mask", "position_ids")


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompiledModel]:
    return {name: tessera.compile(zoo.export_decoder(name), "openvino", shapes=RANGES,
                                  fallback=False)
            for name in TINY}


def decoder_of(model: CompiledModel) -> StatefulDecoder:
    """The stateful decoder `generate` runs for `model` (built once per partition)."""
    (part,) = model.parts
    assert isinstance(part, KeepsDecoderCache)
    layout = DecoderLayout.of(model)
    decoder = part.stateful_decoder({p.past: p.present for p in layout.cache}, "input_ids",
                                    "logits")
    assert decoder is not None
    return decoder


class Steps:
    """The stateful decoder's `step`, wrapped: what each call was fed and gave back; it
    raises KeyboardInterrupt at call `interrupt_at` (1 is the prefill)."""

    def __init__(self, step: Callable[[Mapping[str, np.ndarray]], np.ndarray],
                 interrupt_at: int | None = None) -> None:
        self.inner, self.interrupt_at = step, interrupt_at
        self.fed: list[dict[str, np.ndarray]] = []
        self.gave: list[object] = []

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        self.fed.append(dict(feeds))
        if len(self.fed) == self.interrupt_at:
            raise KeyboardInterrupt
        out = self.inner(feeds)
        self.gave.append(out)
        return out


@pytest.mark.parametrize("name", TINY)
def test_greedy_over_32_tokens_equals_the_graph_run_plainly(
        compiled: dict[str, CompiledModel], name: str) -> None:
    ids = prompt(name)
    result = compiled[name].generate(ids, 32)
    assert result.cache == "openvino state"
    assert (result.new_tokens, result.stopped) == (32, "length")
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, ids, 32))


@pytest.mark.parametrize("name", TINY)
def test_after_the_prefill_no_cache_passes_through_python(
        compiled: dict[str, CompiledModel], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = compiled[name]
    decoder = decoder_of(model)
    steps = Steps(decoder.step)
    monkeypatch.setattr(decoder, "step", steps)
    run_calls: list[object] = []
    monkeypatch.setattr(model, "run", lambda feeds: run_calls.append(feeds))
    result = model.generate(prompt(name), 8)
    assert result.cache == "openvino state" and run_calls == []  # the generic loop never ran
    assert len(steps.fed) == 8  # the prefill, then one step per token after the first
    for step, fed in enumerate(steps.fed):
        assert sorted(fed) == sorted(NEW_TOKENS), step
        assert not any(n.startswith(("past", "present")) for n in fed)
    for step, gave in enumerate(steps.gave):  # the logits alone, never a present
        assert isinstance(gave, np.ndarray) and gave.shape == (1, 5 if step == 0 else 1, 512)
    assert steps.fed[0]["position_ids"].tolist() == [[0, 1, 2, 3, 4]]
    for step in range(1, 8):
        fed = steps.fed[step]
        assert fed["attention_mask"].shape == (1, 5 + step)
        assert fed["position_ids"].tolist() == [[4 + step]]
        assert fed["input_ids"].tolist() == [[result.tokens[0, 4 + step]]]
    # OpenVINO's compiled form takes and gives no cache at all: it is state, which grew to
    # the prompt and every token fed after it, inside each layer's attention kernel (the
    # beam rows it reads the state by are fed by the decoder itself)
    ov_model = decoder.compiled  # type: ignore[attr-defined]
    assert {p.get_any_name() for p in ov_model.inputs} == {*NEW_TOKENS, BEAM}
    assert cached_attention(ov_model) == zoo.decoder_spec(name).layers
    assert [p.get_any_name() for p in ov_model.outputs] == ["logits"]
    state = decoder.state  # type: ignore[attr-defined]
    assert len(state) == 2 * zoo.decoder_spec(name).layers
    assert {shape[0] for shape in state.values()} == {1}
    assert {shape[2] for shape in state.values()} == {5 + 7}


def test_the_state_is_emptied_before_each_call(compiled: dict[str, CompiledModel]) -> None:
    model = compiled["llama-kv-tiny"]
    ids = prompt("llama-kv-tiny", seed=2)
    first, second = model.generate(ids, 16), model.generate(ids, 16)
    np.testing.assert_array_equal(first.tokens, second.tokens)
    # without the reset the cache goes on from where the last call left it (the prompt
    # and 15 tokens fed back)
    decoder = decoder_of(model)
    layout = DecoderLayout.of(model)
    carried_on = decoder.step(layout.new_tokens(ids, 5 + 15 + 5))
    assert {s[2] for s in decoder.state.values()} == {5 + 15 + 5}  # type: ignore[attr-defined]
    decoder.reset()
    fresh = decoder.step(layout.new_tokens(ids, 5))
    assert {s[2] for s in decoder.state.values()} == {5}  # type: ignore[attr-defined]
    assert not np.allclose(carried_on, fresh)
    assert int(fresh[0, -1].argmax()) == first.tokens[0, 5]


def test_an_interrupt_returns_the_tokens_so_far_and_the_next_call_starts_afresh(
        compiled: dict[str, CompiledModel], monkeypatch: pytest.MonkeyPatch) -> None:
    model = compiled["gpt2-kv-tiny"]
    ids = prompt("gpt2-kv-tiny")
    full = model.generate(ids, 8).tokens
    decoder = decoder_of(model)
    with monkeypatch.context() as patched:
        patched.setattr(decoder, "step", Steps(decoder.step, interrupt_at=3))
        result = model.generate(ids, 8)
    assert (result.stopped, result.new_tokens, result.cache) == ("interrupted", 2,
                                                                "openvino state")
    np.testing.assert_array_equal(result.tokens, full[:, :7])
    np.testing.assert_array_equal(model.generate(ids, 8).tokens, full)


def test_a_prompt_of_numpys_second_int64_type(compiled: dict[str, CompiledModel]) -> None:
    """np.longlong is int64 under another name, which OpenVINO's Python does not take."""
    model = compiled["gpt2-kv-tiny"]
    ids = prompt("gpt2-kv-tiny", seed=6)
    np.testing.assert_array_equal(model.generate(ids.astype(np.longlong), 8).tokens,
                                  model.generate(ids, 8).tokens)


def test_a_batch_of_prompts_of_one_length(compiled: dict[str, CompiledModel]) -> None:
    name = "llama-kv-tiny"
    model = ranged(compiled[name], RANGES.replace("batch=1", "batch=1:1:2"))
    ids = prompt(name, 4, batch=2, seed=4)
    result = model.generate(ids, 32)
    assert result.cache == "openvino state"
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, ids, 32))
    assert {s[0] for s in decoder_of(model).state.values()} == {2}  # type: ignore[attr-defined]
    alone = model.generate(ids[1], 32)  # the state follows the batch of each call
    np.testing.assert_array_equal(alone.tokens[0], result.tokens[1])


def test_the_stateful_form_computes_as_the_target_says(
        compiled: dict[str, CompiledModel]) -> None:
    model = compiled["gpt2-kv-tiny"]
    (part,) = model.parts
    decoder = decoder_of(model)
    ov_model = decoder.compiled  # type: ignore[attr-defined]
    # f32 unless the target says otherwise (OpenVINO's CPU default is bf16 where the CPU has
    # it), the cache too (the CPU plugin's default cache is u8), and the partition's threads
    assert str(ov_model.get_property("INFERENCE_PRECISION_HINT")) == \
        str(part.compiled.get_property("INFERENCE_PRECISION_HINT"))  # type: ignore[attr-defined]
    assert ov_model.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
    assert ov_model.get_property("KV_CACHE_PRECISION").get_type_name() == "f32"
    assert ov_model.get_property("INFERENCE_NUM_THREADS") == \
        part.compiled.get_property("INFERENCE_NUM_THREADS")  # type: ignore[attr-defined]
    assert decoder_of(model) is decoder  # compiled once


def test_the_generic_loop_feeds_the_cache_back_across_partitions() -> None:
    if not backends.get("onnxruntime").is_available().ok:
        pytest.skip("needs onnxruntime")
    path = zoo.export_decoder("gpt2-kv-tiny")
    model = tessera.compile(path, "openvino,onnxruntime", shapes=RANGES, accuracy="exact",
                            partitioner="greedy",
                            pins={"/MatMul": "openvino",
                                  "/h.0/c_fc/MatMul": "onnxruntime"})
    assert len(model.parts) > 1
    ids = prompt("gpt2-kv-tiny")
    result = model.generate(ids, 8)
    assert result.cache == "fed back"
    np.testing.assert_array_equal(result.tokens, plain_greedy("gpt2-kv-tiny", ids, 8))
    alone = tessera.compile(path, "onnxruntime", shapes=RANGES)
    assert isinstance(alone.parts[0], KeepsDecoderCache)
    assert alone.generate(ids, 4).cache == "onnxruntime I/O binding"


def test_a_loaded_artifact_keeps_the_cache_in_openvino(
        compiled: dict[str, CompiledModel], tmp_path: Path) -> None:
    model = compiled["gpt2-kv-tiny"]
    ids = prompt("gpt2-kv-tiny", seed=1)
    saved = model.save(tmp_path / "gpt2.tess")
    loaded = tessera.load(saved)
    assert loaded.sources == ["cache"]
    # no exported compiled model is saved for it (loading would read it whole, and the
    # stateful form is compiled from the submodel): the cache entry only says so
    import zipfile

    with zipfile.ZipFile(saved) as archive:
        (entry,) = [i for i in archive.infolist() if i.filename.startswith("caches/")]
        assert entry.file_size < 100
    result = loaded.generate(ids, 16)
    assert result.cache == "openvino state"
    np.testing.assert_array_equal(result.tokens, model.generate(ids, 16).tokens)
    # generating never compiled the plain form beside the stateful one (the weights held
    # once); `run` compiles it on first use, and it computes what the saved model does
    (part,) = loaded.parts
    assert part._compiled is None  # type: ignore[attr-defined]
    feeds = zoo.decoder_inputs("gpt2-kv-tiny", 5, seed=2)
    want = model.run(feeds)
    got = loaded.run(feeds)
    assert part._compiled is not None  # type: ignore[attr-defined]
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", TINY)
def test_the_cache_is_handed_over_once_from_a_prefill_on_another_backend(
        compiled: dict[str, CompiledModel], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not backends.get("onnxruntime").is_available().ok:
        pytest.skip("needs onnxruntime")
    ids = prompt(name, seed=3)
    on_ort = tessera.compile(zoo.export_decoder(name), "onnxruntime", shapes=RANGES)
    decoder = decoder_of(compiled[name])
    loads: list[dict[str, tuple[int, ...]]] = []
    load = decoder.load
    monkeypatch.setattr(decoder, "load", lambda cache: (
        loads.append({k: v.shape for k, v in cache.items()}), load(cache))[1])
    steps = Steps(decoder.step)
    monkeypatch.setattr(decoder, "step", steps)
    # the prompt on onnxruntime, the steps in openvino's state
    result = compiled[name].generate(ids, 32, prefill=on_ort)
    assert result.cache == "openvino state"
    np.testing.assert_array_equal(result.tokens, plain_greedy(name, ids, 32))
    assert len(loads) == 1 and loads[0]["past_key_values.0.key"][2] == 5  # once: the prompt's
    assert len(steps.fed) == 31 and all(set(f) == set(NEW_TOKENS) for f in steps.fed)
    assert set(decoder.state.values()) == {(*loads[0]["past_key_values.0.key"][:2], 36, 16)}
    # the reverse: the prompt in openvino, the steps on onnxruntime's bound values
    back = on_ort.generate(ids, 32, prefill=compiled[name])
    assert back.cache == "onnxruntime I/O binding"
    np.testing.assert_array_equal(back.tokens, result.tokens)


def test_a_prefill_on_another_decoder_is_refused(compiled: dict[str, CompiledModel]) -> None:
    with pytest.raises(InputError, match=r"prefill: .* other cache inputs"):
        compiled["gpt2-kv-tiny"].generate(prompt("gpt2-kv-tiny"), 4,
                                          prefill=compiled["llama-kv-tiny"])
