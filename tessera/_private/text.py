"""The one-line form of an error, for reasons that end up in tables and plans."""

from __future__ import annotations

import re

# lines that say only where a native library raised, not why: OpenVINO's
# 'Exception from src/inference/src/cpp/core.cpp:117:', ONNX Runtime's
# '[ONNXRuntimeError] : 1 : FAIL :' prefix alone, a C++ file and line
_WHERE_ONLY = re.compile(
    r"^(Exception from \S+:\d+:?|\S+\.(cpp|cc|hpp|h):\d+:?|\[ONNXRuntimeError\] : \d+ : \w+ :?"
    r"|Check '.*' failed at \S+:\d+:?)$")


def informative_lines(text: str) -> list[str]:
    """The lines of an error message that say why, location-only lines dropped."""
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line and not _WHERE_ONLY.match(line)]


def first_line(err: BaseException | str, limit: int = 200) -> str:
    """The first informative line of `err`: the first non-empty line that is more than a
    native library's source location (its type name when it has no message)."""
    text = str(err).strip()
    if not text and isinstance(err, BaseException):
        return type(err).__name__
    lines = informative_lines(text) or text.splitlines() or [""]
    return lines[0][:limit]


def typed_line(err: BaseException, limit: int = 200) -> str:
    """'ErrorType: first line': for failures from outside tessera, whose type says most."""
    return f"{type(err).__name__}: {first_line(err, limit)}"


__all__ = ["first_line", "informative_lines", "typed_line"]
