"""The lexical layer of target strings: tokens, quoting and escaped lists.

Grammar (shell-like):  KIND_OR_TAG { -key=value | -key value | -flag }
- Whitespace separates tokens. '...' is literal; "..." allows \\" and \\\\; outside quotes a
  backslash escapes the next character.
- List values separate items with ',' (targets with ';'); a backslash escapes a separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tessera.errors import TargetError

_SAFE = re.compile(r"[A-Za-z0-9_+./:@%^,=-]+")
# a comma a config string could split at: before a name, another comma, or the end
_COMMA_WORD = re.compile(r",(?=[A-Za-z0-9,]|$)")


@dataclass(frozen=True)
class Token:
    text: str
    is_option: bool  # starts with an unquoted dash
    start: int  # offset in the source, for messages


def tokenize(source: str) -> list[Token]:
    """Split a target string into tokens, resolving quotes and escapes."""
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        if source[i].isspace():
            i += 1
            continue
        start, buf, quoted_start = i, [], False
        while i < n and not source[i].isspace():
            ch = source[i]
            if ch in "'\"":
                if i == start:
                    quoted_start = True
                close = _find_close(source, i)
                body = source[i + 1 : close]
                buf.append(body if ch == "'" else re.sub(r'\\(["\\])', r"\1", body))
                i = close + 1
            elif ch == "\\":
                if i + 1 >= n:
                    raise TargetError(f"trailing backslash at the end of {source!r}")
                buf.append(source[i + 1])
                i += 2
            else:
                buf.append(ch)
                i += 1
        text = "".join(buf)
        tokens.append(Token(text, text.startswith("-") and not quoted_start, start))
    return tokens


def _find_close(source: str, open_at: int) -> int:
    quote = source[open_at]
    i = open_at + 1
    while i < len(source):
        if quote == '"' and source[i] == "\\" and i + 1 < len(source):
            i += 2
            continue
        if source[i] == quote:
            return i
        i += 1
    raise TargetError(
        f"mismatched quote in {source!r}: the {quote} at position {open_at} is never closed"
    )


def quote(value: str) -> str:
    """The shortest token that `tokenize` reads back as exactly `value`. A comma followed by a
    letter, a digit, another comma or nothing is quoted, so a config string
    ("cpu -mcpu=...,openvino") splits back right."""
    if _SAFE.fullmatch(value) and not _COMMA_WORD.search(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def join_items(items: list[str], sep: str) -> str:
    return sep.join(item.replace("\\", "\\\\").replace(sep, "\\" + sep) for item in items)


def split_items(text: str, sep: str) -> list[str]:
    """Inverse of `join_items`; an empty text is an empty list."""
    if text == "":
        return []
    items, buf, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in (sep, "\\"):
            buf.append(text[i + 1])
            i += 2
        elif ch == sep:
            items.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(ch)
            i += 1
    items.append("".join(buf))
    return items


def split_top_level(source: str, sep: str, starts_item: re.Pattern[str] | None = None) -> list[str]:
    """Split at `sep` outside quotes and escapes; if `starts_item` is given, only where the
    text after the separator matches it (so `-mattr=+a,+b` keeps its commas)."""
    parts, start, i, n = [], 0, 0, len(source)
    while i < n:
        ch = source[i]
        if ch in "'\"":
            i = _find_close(source, i) + 1
            continue
        if ch == "\\":
            i += 2
            continue
        if ch == sep and (starts_item is None or starts_item.match(source, i + 1)):
            parts.append(source[start:i])
            start = i + 1
        i += 1
    parts.append(source[start:])
    return parts
