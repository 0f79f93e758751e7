"""`tessera generate` on a saved tiny decoder: golden output (the timing line's numbers
masked), the same tokens as the Python API, and bad input that exits 2 with one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tessera
from tessera import backends, zoo

from .test_cli import check_golden, run

pytest.importorskip("torch")  # the bundled decoders are exported from torch definitions
pytestmark = pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                                reason="needs onnxruntime")

PROFILE = "batch=1;sequence=1;past_sequence=16;total_sequence=17"
PROMPT = "435,326,261,138,157"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("generate") / "gpt2.tess"
    tessera.compile(zoo.export_decoder("gpt2-kv-tiny"), "onnxruntime",
                    shapes=PROFILE).save(path)
    return path


def masked(text: str) -> str:
    return re.sub(r"\d+\.\d+ ms", "# ms", text)


def test_greedy_generation_is_golden(artifact: Path) -> None:
    code, out, err = run("generate", str(artifact), "--prompt-ids", PROMPT,
                         "--max-new-tokens", "12")
    assert code == 0, err
    check_golden("generate_gpt2_greedy.txt", masked(out))
    ids, timing = out.splitlines()
    want = tessera.load(artifact).generate([int(t) for t in PROMPT.split(",")], 12)
    assert ids == ",".join(str(t) for t in want.generated[0])
    assert re.fullmatch(r"12 new token\(s\), stopped by length: prefill of 5 token\(s\) "
                        r"[\d.]+ ms, 11 decode step\(s\) [\d.]+ ms \([\d.]+ ms per token\)",
                        timing)


def test_sampling_follows_the_seed(artifact: Path) -> None:
    args = ["generate", str(artifact), "--prompt-ids", PROMPT, "--sample", "--seed", "3",
            "--top-k", "40", "--top-p", "0.9", "--temperature", "0.8"]
    (code, first, _), (_, again, _) = run(*args), run(*args)
    assert code == 0 and first.splitlines()[0] == again.splitlines()[0]
    want = tessera.load(artifact).generate([int(t) for t in PROMPT.split(",")], 16,
                                           do_sample=True, seed=3, top_k=40, top_p=0.9,
                                           temperature=0.8)
    assert first.splitlines()[0] == ",".join(str(t) for t in want.generated[0])


@pytest.mark.parametrize(("args", "message"), [
    (["--prompt-ids", "1,600"],
     "error: input 'input_ids': token id 600 is outside the vocabulary [0, 512)"),
    (["--prompt-ids", "1,x"], "error: --prompt-ids expects comma-separated token ids"),
    (["--prompt-ids", ""], "error: input 'input_ids': the prompt is empty"),
    (["--prompt-ids", "1", "--max-new-tokens", "0"],
     "error: max_new_tokens must be an integer >= 1, got 0"),
])
def test_bad_input_exits_2_with_one_line(artifact: Path, args: list[str], message: str
                                         ) -> None:
    code, out, err = run("generate", str(artifact), *args)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_a_model_without_a_cache_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "mlp.tess"
    tessera.compile(zoo.export("mlp"), "onnxruntime").save(path)
    code, _, err = run("generate", str(path), "--prompt-ids", "1,2")
    assert code == 2 and err.startswith("error: the model has no key/value cache")
    assert err.count("\n") == 1
