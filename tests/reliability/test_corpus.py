"""Every file of the broken-ONNX corpus gives a ModelError naming the problem, quickly, and
never reads outside the model's directory."""

from __future__ import annotations

import builtins
import time
from pathlib import Path
from typing import Any

import pytest

from tessera import load_model
from tessera.errors import ModelError

from .corpus import NAMES, build


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("corpus") / "models"
    return out, {e["file"]: e["expect"] for e in build(out)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", NAMES)
def test_broken_models_give_a_clear_model_error(name: str, corpus: tuple[Path, dict[str, str]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out, expected = corpus
    opened: list[str] = []
    real_open = builtins.open

    def watching_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watching_open)
    began = time.perf_counter()
    with pytest.raises(ModelError) as raised:
        load_model(out / name)
    assert time.perf_counter() - began < 30
    message = str(raised.value)
    assert expected[name].lower() in message.lower(), message
    assert "\n" not in message.strip() or len(message) < 600
    outside = [f for f in opened if "outside" in f]
    assert not outside, f"read outside the model's directory: {outside}"
