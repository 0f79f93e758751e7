"""The layout follows the pipeline and data flows one way: a layer imports only the layers
below it, placement never reaches up into the runtime or the CLI, and no module imports
itself back through a cycle. Imports are read from the source, and every kind counts:
function-level imports, those in `if TYPE_CHECKING:` blocks (a type a module names is a
dependency too), and modules named by string for importlib ('module:attribute' registry
entries, `import_module("...")`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "tessera"
# lowest first; a module may import its own layer and those before it
LAYERS = ["errors", "_private", "target", "config", "ir", "backends", "oracle", "placement",
          "runtime", "onnx_backend", "zoo", "cli"]


def _module_name(path: Path) -> str:
    parts = ["tessera", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


# a registry entry naming its code: "tessera.runtime._executor:GraphExecutor"
_IMPORT_STRING = re.compile(r"(tessera(?:\.\w+)+):\w+")


def _imports(path: Path) -> list[str]:
    """Modules `path` imports or names for importlib, resolved to tessera modules where they
    are."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.append(full if full in MODULES else node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _IMPORT_STRING.fullmatch(node.value)
            found += [match.group(1)] if match else []
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module")
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append(node.args[0].value)
    return [name for name in found if name.startswith("tessera")]


GRAPH = {name: sorted(dict.fromkeys(i for i in _imports(path) if i in MODULES and i != name))
         for name, path in MODULES.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m) is not None])
def test_a_layer_imports_only_the_layers_below_it(module: str) -> None:
    mine = _layer(module)
    upward = [i for i in GRAPH[module] if (_layer(i) or 0) > (mine or 0)]
    assert not upward, f"{module} imports a higher layer: {upward}"


def test_placement_never_imports_the_runtime_or_the_cli() -> None:
    reaching = {m: [i for i in GRAPH[m] if i.startswith(("tessera.runtime", "tessera.cli"))]
                for m in MODULES if m.startswith("tessera.placement")}
    assert {m: i for m, i in reaching.items() if i} == {}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: dict[str, bool] = {}
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack[node] = True
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif on_stack.get(nxt):
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack[top] = False
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in GRAPH:
        if name not in index:
            visit(name)
    return found


def test_no_import_cycles() -> None:
    assert _cycles() == []


# placement's rooms, lowest first: a room imports only itself and the rooms before it; the
# shared context sits between measurement and the search
PLACEMENT_ROOMS = ["record", "measure", "_context", "search", "judge"]


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["tessera", "placement"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in PLACEMENT_ROOMS else "driver"


@pytest.mark.parametrize("module", [m for m in MODULES if _room(m) not in (None, "driver")])
def test_a_placement_room_imports_only_the_rooms_below_it(module: str) -> None:
    mine = PLACEMENT_ROOMS.index(str(_room(module)))
    upward = [i for i in GRAPH[module] if (room := _room(i)) is not None
              and (room == "driver" or PLACEMENT_ROOMS.index(room) > mine)]
    assert not upward, f"{module} imports a room above its own: {upward}"


def test_only_the_driver_uses_every_room_of_placement() -> None:
    rooms = ("record", "measure", "search", "judge")
    using_all = [m for m in MODULES if _room(m) == "driver"
                 and all(any(_room(i) == r for i in GRAPH[m]) for r in rooms)]
    assert using_all == ["tessera.placement._driver"]


def test_registry_strings_and_type_checking_imports_are_imports(tmp_path: Path) -> None:
    """A module that names another only for importlib, or only for the type checker,
    depends on it all the same."""
    source = tmp_path / "registry.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from tessera.ir import Model\n"
        "EXECUTOR = 'tessera.runtime._executor:GraphExecutor'\n"
        "KEY = 'tessera.weights'  # a metadata key, no module\n"
        "def load() -> object:\n"
        "    return importlib.import_module('tessera.cli')\n")
    assert sorted(_imports(source)) == ["tessera.cli", "tessera.ir",
                                        "tessera.runtime._executor"]


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    """The checks above would catch what they are for (a synthetic graph)."""
    saved = dict(GRAPH)
    try:
        GRAPH["tessera.placement.record._plan"] = [*GRAPH["tessera.placement.record._plan"],
                                            "tessera.placement._driver"]
        assert any("tessera.placement.record._plan" in c for c in _cycles())
    finally:
        GRAPH.clear()
        GRAPH.update(saved)
