"""The one-line form of an error, for reasons that end up in tables and plans."""

from __future__ import annotations


def first_line(err: BaseException | str, limit: int = 200) -> str:
    """The first non-empty line of `err` (its type name when it has no message)."""
    text = str(err).strip()
    if not text and isinstance(err, BaseException):
        return type(err).__name__
    return (text.splitlines() or [""])[0][:limit]


__all__ = ["first_line"]
