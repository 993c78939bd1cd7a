"""The README is the front door: its layout section names what the tree holds, and it links every docs/ page."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO


def layout_block() -> dict[str, str]:
    """The layout section's code block: top-level entry -> its description (continuation lines included)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Layout\n\n```\n(.*?)```", readme, re.DOTALL | re.MULTILINE).group(1)
    entries, current = {}, None
    for line in block.splitlines():
        if line and not line[0].isspace():
            current, _, text = line.partition(" ")
            entries[current] = text
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def test_every_layout_entry_exists_and_every_top_level_folder_is_named():
    entries = layout_block()
    assert all((REPO / name.rstrip("/")).exists() for name in entries), entries.keys()
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    folders = {path.split("/")[0] + "/" for path in tracked.splitlines() if "/" in path and not path.startswith(".")}
    assert folders <= set(entries), folders - set(entries)


def test_the_package_entry_names_every_module_and_subpackage():
    described = layout_block()["hara/"]
    names = [
        p.name + ("/" if p.is_dir() else "")
        for p in (REPO / "hara").iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.name != "__init__.py")
    ]
    assert [name for name in names if not re.search(rf"\b{re.escape(name)}", described)] == []


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert [p.name for p in (REPO / "docs").glob("*.md") if f"](docs/{p.name})" not in readme] == []
