"""The `tessera` command: a thin shell over the Python API."""

from __future__ import annotations

from tessera.cli._main import cli, main

__all__ = ["cli", "main"]
