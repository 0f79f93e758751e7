"""The markdown every bench writes: the preamble that says what produced a table (its
command, commit and machine), and the table itself, header, rule and rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def preamble(title: str, result: Mapping[str, Any], machine_note: str = "") -> list[str]:
    """A table's title, the command and commit that produced it, and the machine."""
    return [f"# {title}", "",
            f"Command: `{result['command']}` at commit `{result['commit']}`", "",
            f"Machine: {result['machine']}{machine_note}", ""]


def table_row(*cells: object) -> str:
    """One row of a markdown table; a None cell is left blank."""
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def table_head(*columns: str, align: str = "") -> list[str]:
    """A table's header and rule: column i is right-aligned where align[i] is "r" (`align`
    "lrr": the second and third), else left."""
    rule = "".join("---:|" if align[i:i + 1] == "r" else "---|" for i in range(len(columns)))
    return [table_row(*columns), "|" + rule]


def median_and_rounds(median: float, rounds: Iterable[float]) -> str:
    """A cell of a median and, after it, each round's figure: '12.5; 12.1, 12.5, 13.0'."""
    return f"{median}; {', '.join(map(str, rounds))}"


__all__ = ["median_and_rounds", "preamble", "table_head", "table_row"]
