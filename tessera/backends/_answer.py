"""A backend's answer for one node: whether it runs it, and why (not)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Support:
    """A backend's answer for one node: whether it runs it, and why (not)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


__all__ = ["Support"]
