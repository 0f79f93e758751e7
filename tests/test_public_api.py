"""The public API, name by name and signature by signature: `tessera.__all__` and each
subpackage's. A change here is a change users see, so it must be deliberate: regenerate the
golden file with TESSERA_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
from pathlib import Path

import tessera

GOLDEN = Path(__file__).parent / "golden" / "public_api.txt"
PACKAGES = ["tessera", "tessera.errors", "tessera.target", "tessera.config", "tessera.ir",
            "tessera.backends", "tessera.oracle", "tessera.placement", "tessera.runtime"]


def _describe(name: str, value: object) -> list[str]:
    if inspect.isclass(value):
        lines = [f"class {name}{_signature(value)}"]
        if dataclasses.is_dataclass(value):
            lines += [f"    field {f.name}: {f.type}" for f in dataclasses.fields(value)]
        for attr, member in sorted(vars(value).items()):
            if attr.startswith("_") and attr != "__init__":
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member):
                lines.append(f"    def {attr}{_signature(member)}")
            elif isinstance(member, property):
                lines.append(f"    property {attr}")
        return lines
    if inspect.isfunction(value):
        return [f"def {name}{_signature(value)}"]
    if inspect.ismodule(value):
        return [f"module {name}"]
    return [f"{name}: {type(value).__name__}"]


def _signature(value: object) -> str:
    try:
        text = str(inspect.signature(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's address changes every run


def render() -> str:
    lines = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        lines.append(f"== {package}")
        for name in sorted(module.__all__):
            lines += _describe(name, getattr(module, name))
    return "\n".join(lines) + "\n"


def test_the_public_api_changes_only_on_purpose() -> None:
    text = render()
    if os.environ.get("TESSERA_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert GOLDEN.is_file(), "no golden file: run with TESSERA_UPDATE_GOLDEN=1"
    assert text == GOLDEN.read_text()


def test_the_names_users_rely_on_are_public() -> None:
    assert {"compile", "partition", "load", "load_model", "Target", "CompilationConfig",
            "errors", "backends"} <= set(tessera.__all__)
