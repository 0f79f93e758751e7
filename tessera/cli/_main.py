"""Entry point: import the command modules so they register on the group."""

from __future__ import annotations

from tessera.cli import _build, _explain, _generate, _records, _targets
from tessera.cli._app import cli

del _build, _explain, _generate, _records, _targets

__all__ = ["cli", "main"]


def main() -> None:
    cli(prog_name="tessera")
