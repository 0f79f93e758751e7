"""register_tag checks the definition when it is registered: it must parse as a Target, and
its name must not hide a target kind. A refused tag leaves nothing behind."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tessera import Target
from tessera.errors import TargetError
from tessera.target import KINDS, TAGS, register_tag


@pytest.fixture(autouse=True)
def forget_test_tags() -> Iterator[None]:
    yield
    for name in TAGS.names():
        if name.startswith("test/"):
            TAGS.unregister(name)


def test_a_valid_tag_registers_and_expands() -> None:
    register_tag("test/box", {"kind": "cpu", "mcpu": "skylake", "num-cores": 8})
    assert str(Target("test/box -num-cores=4")) == "cpu -mcpu=skylake -num-cores=4"


def test_an_unknown_kind_is_refused_at_registration() -> None:
    with pytest.raises(TargetError, match=r"tag 'test/x' is not a valid target: unknown target "
                                          r"kind 'cpux'; did you mean 'cpu'\?"):
        register_tag("test/x", {"kind": "cpux"})
    assert "test/x" not in TAGS.names()
    with pytest.raises(TargetError, match=r"tag 'test/x' is not a valid target: unknown target "
                                          r"kind 'nosuch' \(known: cpu, cuda"):
        register_tag("test/x", {"kind": "nosuch"})


@pytest.mark.parametrize(("name", "definition", "message"), [
    ("test/a", {"kind": "cpu", "mcpuu": "x"}, "unknown option '-mcpuu'"),
    ("test/a", {"kind": "cuda", "arch": "sm80"}, "not a CUDA compute capability"),
    ("test/a", {"mcpu": "skylake"}, "tag 'test/a' must be a target dict that names a 'kind'"),
    ("test/a", "cpu", "tag 'test/a' must be a target dict that names a 'kind'"),
    ("cpu", {"kind": "cpu"}, "tag 'cpu' would be hidden by the target kind of that name"),
    ("llvm", {"kind": "cpu"}, "tag 'llvm' would be hidden by the target kind"),
    ("nvidia/a100", {"kind": "cuda"}, "target tag 'nvidia/a100' is already registered"),
])
def test_bad_tags_are_refused(name: str, definition: object, message: str) -> None:
    before = TAGS.names()
    with pytest.raises(TargetError, match=re.escape(message)):
        register_tag(name, definition)  # type: ignore[arg-type]
    assert TAGS.names() == before


@given(st.text("abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=12))
def test_an_unknown_kind_is_refused_naming_the_tag_and_the_kind(kind: str) -> None:
    assume(KINDS.find(kind) is None)
    with pytest.raises(TargetError) as caught:
        register_tag("test/any", {"kind": kind})
    assert str(caught.value).startswith(
        f"tag 'test/any' is not a valid target: unknown target kind {kind!r}")
    assert "test/any" not in TAGS.names()


@given(st.sampled_from([k for k in KINDS.names() if len(k) >= 5]), st.integers(0, 20))
def test_a_misspelt_kind_gets_a_suggestion(kind: str, drop: int) -> None:
    typo = kind[:drop % len(kind)] + kind[drop % len(kind) + 1:]
    assume(KINDS.find(typo) is None)
    with pytest.raises(TargetError, match=f"did you mean .*'{kind}'"):
        register_tag("test/typo", {"kind": typo})
