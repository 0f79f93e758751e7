"""The one-line form of an error, for reasons that end up in tables and plans."""

from __future__ import annotations


def first_line(err: BaseException | str, limit: int = 200) -> str:
    """The first non-empty line of `err` (its type name when it has no message)."""
    text = str(err).strip()
    if not text and isinstance(err, BaseException):
        return type(err).__name__
    return (text.splitlines() or [""])[0][:limit]


def typed_line(err: BaseException, limit: int = 200) -> str:
    """'ErrorType: first line': for failures from outside tessera, whose type says most."""
    return f"{type(err).__name__}: {first_line(err, limit)}"


__all__ = ["first_line", "typed_line"]
