"""Parsing of scalar option values shared by target attributes and config options."""

from __future__ import annotations

import math
import re

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
_INT_RE = re.compile(r"[+-]?\d+")


def parse_bool(value: object) -> bool:
    """A bool from a bool or a word such as 'on' or 'false'; ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError(f"expected a boolean (true/false, on/off, 1/0), got {value!r}")


def parse_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got the boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value.strip())
    raise ValueError(f"expected an integer, got {value!r}")


def parse_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {value!r}")
    number: float
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {value!r}") from None
    else:
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def is_number(text: str) -> bool:
    try:
        parse_float(text)
    except ValueError:
        return False
    return True


def legacy_host(host: object, target_host: object, error: type[Exception]) -> object:
    """`host`, or the deprecated `target_host` spelling of it (with a warning); both given is
    `error`."""
    if target_host is None:
        return host
    import warnings

    warnings.warn("the separate `target_host` argument is deprecated; pass `host=` instead",
                  DeprecationWarning, stacklevel=3)
    if host is not None:
        raise error("both `host` and the legacy `target_host` were given; pass one")
    return target_host


def load_json(text: str, what: str, error: type[Exception]) -> object:
    """`text` parsed as JSON, or `error` saying what (`what`) is malformed and where."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"invalid {what}: {err.msg} at line {err.lineno} column {err.colno}"
                    ) from None
    except RecursionError:
        raise error(f"invalid {what}: nested too deeply") from None
