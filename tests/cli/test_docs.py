"""The README and docs/: short enough, links that resolve, the options table in step with the
options themselves, and text that speaks of the project only."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tessera import CompilationConfig
from tessera.config import option_infos

ROOT = Path(__file__).parent.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_short_and_gives_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text and ".ci/run" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if not re.match(r"[a-z]+:", target):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


HISTORY = re.compile(r"\bseeds? \d|\bsessions? \d|\bissues?\b|\btickets?\b|\bA1a\b|shared/seeds",
                     re.IGNORECASE)


def test_text_users_see_speaks_of_the_project_only() -> None:
    files = [*PAGES, *sorted((ROOT / "tessera").rglob("*.py")),
             *sorted((ROOT / "bench").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
             if HISTORY.search(line)]
    assert found == []


def test_options_page_lists_every_option() -> None:
    defaults = CompilationConfig.create("cpu").options.to_dict()
    rows = []
    for info in option_infos():
        name = info.name.replace("_", "-")
        value = defaults[name]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        rows.append(f"| `{name}` | `{shown}` | {'yes' if info.cache_key else 'no'} | "
                    f"{info.doc} |")
    page = ROOT / "docs" / "options.md"
    text = page.read_text()
    head = "| option | default | cache key | meaning |\n|---|---|---|---|\n"
    start = text.index(head) + len(head)
    end = text.index("\n\n", start)
    if os.environ.get("TESSERA_UPDATE_GOLDEN"):
        text = text[:start] + "\n".join(rows) + text[end:]
        page.write_text(text)
    assert text[start:end].splitlines() == rows, (
        "docs/options.md differs from the options; rerun with TESSERA_UPDATE_GOLDEN=1")
