"""The bundled decoders with a key/value cache: the exported graph, run by onnxruntime as a
prefill and then one token at a time, gives the logits of torch's forward over the whole
sequence at once; its inputs and outputs are the merged layout of Hugging Face exports."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera.errors import RegistryError

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from tessera import zoo  # noqa: E402
from tessera.zoo import _decoders  # noqa: E402

TINY = ["gpt2-kv-tiny", "llama-kv-tiny"]
ATOL = 1e-4


@pytest.fixture(scope="module", params=TINY)
def name(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def session(name: str) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(zoo.export_decoder(name)), options,
                                providers=["CPUExecutionProvider"])


def full_forward(name: str, ids: np.ndarray, mask: np.ndarray | None = None,
                 positions: np.ndarray | None = None) -> np.ndarray:
    """The oracle: torch's forward of the same module over the whole sequence, no past."""
    spec = zoo.decoder_spec(name)
    module = _decoders.build(spec)
    batch, length = ids.shape
    mask = np.ones_like(ids) if mask is None else mask
    positions = np.tile(np.arange(length), (batch, 1)) if positions is None else positions
    empty = torch.zeros(batch, spec.kv_heads, 0, spec.head_dim)
    with torch.no_grad():
        out = module(torch.from_numpy(ids), torch.from_numpy(mask),
                     torch.from_numpy(positions), *[empty] * (2 * spec.layers))
    logits: np.ndarray = out[0].numpy()
    return logits


def step(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def next_feeds(feeds: dict[str, np.ndarray], out: dict[str, np.ndarray],
               token: np.ndarray) -> dict[str, np.ndarray]:
    """The feed of a decode step: one new token per row, the presents as the past."""
    batch = token.shape[0]
    fed = {"input_ids": token.reshape(batch, 1).astype(np.int64),
           "attention_mask": np.concatenate(
               [feeds["attention_mask"], np.ones((batch, 1), np.int64)], axis=1),
           "position_ids": feeds["position_ids"][:, -1:] + 1}
    for key, value in out.items():
        if key.startswith("present."):
            fed["past_key_values." + key.removeprefix("present.")] = value
    return fed


def test_prefill_then_decode_steps_match_the_full_forward(name: str, session: Any) -> None:
    feeds = zoo.decoder_inputs(name, 5)
    assert feeds["past_key_values.0.key"].shape[2] == 0
    tokens = np.random.default_rng(1).integers(0, zoo.decoder_spec(name).vocab, (1, 4))
    full = full_forward(name, np.concatenate([feeds["input_ids"], tokens], axis=1))
    out = step(session, feeds)
    np.testing.assert_allclose(out["logits"], full[:, :5], atol=ATOL, rtol=1e-4)
    for i in range(4):
        feeds = next_feeds(feeds, out, tokens[:, i])
        out = step(session, feeds)
        assert out["logits"].shape == (1, 1, zoo.decoder_spec(name).vocab)
        assert out["present.0.key"].shape[2] == 6 + i
        np.testing.assert_allclose(out["logits"], full[:, 5 + i:6 + i], atol=ATOL, rtol=1e-4)


def _layout(values: Any) -> list[tuple[str, int, list[str | int]]]:
    return [(v.name, v.type.tensor_type.elem_type,
             [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in values]


def test_the_graph_has_the_merged_layout(name: str) -> None:
    spec = zoo.decoder_spec(name)
    graph = onnx.load(str(zoo.export_decoder(name))).graph
    int64, float32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    kv, hd = spec.kv_heads, spec.head_dim
    inputs: list[tuple[str, int, list[str | int]]] = [
        ("input_ids", int64, ["batch", "sequence"]),
        ("attention_mask", int64, ["batch", "total_sequence"]),
        ("position_ids", int64, ["batch", "sequence"])]
    outputs: list[tuple[str, int, list[str | int]]] = [
        ("logits", float32, ["batch", "sequence", spec.vocab])]
    for i in range(spec.layers):
        for kind in ("key", "value"):
            inputs.append((f"past_key_values.{i}.{kind}", float32,
                           ["batch", kv, "past_sequence", hd]))
            outputs.append((f"present.{i}.{kind}", float32, ["batch", kv, "total_sequence", hd]))
    assert _layout(graph.input) == inputs
    assert _layout(graph.output) == outputs


def test_exports_are_cached(name: str) -> None:
    first = zoo.export_decoder(name)
    assert zoo.export_decoder(name) == first and name in first.name


def test_an_unknown_decoder_suggests_close_names() -> None:
    with pytest.raises(RegistryError, match="did you mean 'llama-kv-tiny'"):
        zoo.decoder_spec("llama-kv-tyni")
    assert set(TINY) | {"gpt2-small-kv", "llama-kv-0.5b"} == set(zoo.decoder_names())


def test_llama_caches_fewer_key_value_heads_than_query_heads() -> None:
    spec = zoo.decoder_spec("llama-kv-tiny")
    assert (spec.heads, spec.kv_heads) == (4, 2)
    session = ort.InferenceSession(str(zoo.export_decoder("llama-kv-tiny")),
                                   providers=["CPUExecutionProvider"])
    out = step(session, zoo.decoder_inputs("llama-kv-tiny", 3, batch=2))
    for i in range(spec.layers):
        for kind in ("key", "value"):
            assert out[f"present.{i}.{kind}"].shape == (2, 2, 3, spec.head_dim)


def test_llama_heads_score_each_tokens_successor_highest() -> None:
    """A Llama's head row for a token is the embedding of the token it follows, a fixed
    permutation drawn from the seed: the decoder's greedy choice after any token is
    that token's successor, in any context, so its logits have a margin to keep."""
    spec = zoo.decoder_spec("llama-kv-tiny")
    module = _decoders.build(spec)
    head, embed = module.lm_head.weight.detach(), module.embed_tokens.weight.detach()
    rows = [int(torch.nonzero((head == embed[t]).all(1))[0, 0]) for t in range(spec.vocab)]
    assert sorted(rows) == list(range(spec.vocab))  # a permutation
    successor = np.array(rows)
    ids = np.random.default_rng(3).integers(0, spec.vocab, (4, 12))
    logits = full_forward("llama-kv-tiny", ids)
    np.testing.assert_array_equal(logits.argmax(-1), successor[ids])
    ordered = np.sort(logits, axis=-1)
    assert float(np.median(ordered[..., -1] - ordered[..., -2])) > 1.0


def test_a_left_padded_row_gives_the_logits_of_its_prompt_alone(name: str,
                                                                session: Any) -> None:
    long = zoo.decoder_inputs(name, 6, seed=2)["input_ids"][0]
    short = zoo.decoder_inputs(name, 4, seed=3)["input_ids"][0]
    pad = 2
    feeds = zoo.decoder_inputs(name, 6, batch=2)
    feeds["input_ids"] = np.stack([long, np.concatenate([np.zeros(pad, np.int64), short])])
    feeds["attention_mask"] = np.array([[1] * 6, [0] * pad + [1] * 4], np.int64)
    feeds["position_ids"] = np.array([list(range(6)), [0] * pad + list(range(4))], np.int64)
    out = step(session, feeds)
    assert np.isfinite(out["logits"]).all()
    alone = step(session, zoo.decoder_inputs(name, 4, seed=3))
    np.testing.assert_allclose(out["logits"][1, -1], alone["logits"][0, -1], atol=ATOL,
                               rtol=1e-4)
    np.testing.assert_allclose(out["logits"][0, -1], full_forward(name, long[None])[0, -1],
                               atol=ATOL, rtol=1e-4)
    # one decode step more: the padding stays masked in the past
    token = np.array([7, 7])
    out = step(session, next_feeds(feeds, out, token))
    alone = step(session, next_feeds(zoo.decoder_inputs(name, 4, seed=3), alone, token[:1]))
    np.testing.assert_allclose(out["logits"][1, -1], alone["logits"][0, -1], atol=ATOL,
                               rtol=1e-4)
