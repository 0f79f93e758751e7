"""An OpenVINO partition of a whole decoder as a stateful decoder: the past/present pairs
become OpenVINO state, which starts as the empty past of the batch of the call's token ids;
a prefill gives the logits the partition gives with an empty past; the feeds are the new
tokens' inputs alone; a partition without every pair has no stateful form."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tessera import backends, zoo
from tessera.backends import KeepsDecoderCache
from tessera.errors import InputError

pytest.importorskip("torch")  # the bundled decoders are exported from torch definitions

pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="needs openvino")

NAME = "llama-kv-tiny"


@pytest.fixture(scope="module")
def part() -> KeepsDecoderCache:
    compiled = backends.get("openvino").compile(onnx.load(str(zoo.export_decoder(NAME))),
                                                "openvino", check=False)
    assert isinstance(compiled, KeepsDecoderCache)
    return compiled


def pairs() -> dict[str, str]:
    spec = zoo.decoder_spec(NAME)
    return {f"past_key_values.{i}.{kind}": f"present.{i}.{kind}"
            for i in range(spec.layers) for kind in ("key", "value")}


@pytest.mark.parametrize("batch", [1, 2])
def test_the_state_starts_empty_with_the_batch_of_the_token_ids(part: KeepsDecoderCache,
                                                                 batch: int) -> None:
    decoder = part.stateful_decoder(pairs(), "input_ids", "logits")
    assert decoder is not None and decoder.cache == "openvino state"
    feeds = zoo.decoder_inputs(NAME, 5, batch=batch, seed=batch)  # pasts of length 0
    decoder.reset()
    logits = decoder.step({k: v for k, v in feeds.items() if not k.startswith("past")})
    plain = part.run(feeds)  # type: ignore[attr-defined]
    np.testing.assert_allclose(logits, plain["logits"], rtol=1e-5, atol=1e-5)
    heads = zoo.decoder_spec(NAME).kv_heads
    shapes = set(decoder.state.values())  # type: ignore[attr-defined]
    assert shapes == {(batch, heads, 5, zoo.decoder_spec(NAME).head_dim)}


def test_only_the_new_tokens_inputs_are_fed(part: KeepsDecoderCache) -> None:
    decoder = part.stateful_decoder(pairs(), "input_ids", "logits")
    assert decoder is not None
    feeds = zoo.decoder_inputs(NAME, 3)
    with pytest.raises(InputError, match=r"takes the inputs \['attention_mask', 'input_ids', "
                                         r"'position_ids'\], got .*past_key_values.0.key"):
        decoder.step(feeds)


@pytest.mark.parametrize(("cache", "tokens", "logits"), [
    ({}, "input_ids", "logits"),
    ({"past_key_values.0.key": "present.9.key"}, "input_ids", "logits"),
    ({"past_key_values.9.key": "present.0.key"}, "input_ids", "logits"),
    (None, "tokens", "logits"),
    (None, "input_ids", "scores"),
])
def test_a_partition_without_the_pairs_has_no_stateful_form(
        part: KeepsDecoderCache, cache: dict[str, str] | None, tokens: str, logits: str) -> None:
    assert part.stateful_decoder(pairs() if cache is None else cache, tokens, logits) is None
