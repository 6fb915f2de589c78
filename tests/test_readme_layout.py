"""README's "What is here" table matches the layout: every library folder has its row, every module of a folder
is named in that row, and every file a row names exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rows() -> dict[str, str]:
    section = (REPO / "README.md").read_text().split("## What is here", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w/]+/)` \| (.*) \|$", section, re.M)}


def _named(cell: str, folder: Path) -> set[str]:
    """The ``.py`` files a row names, resolved against its folder (a ``sub/`` prefix names a subfolder)."""
    return {name for name in re.findall(r"`([\w/]+\.py)`", cell) if (folder / name).is_file()} | \
           {name for name in re.findall(r"`([\w/]+/)`", cell)}


def test_every_library_folder_and_module_is_in_the_table():
    rows = _rows()
    folders = sorted(p for p in (REPO / "c3_plugin").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders and all(f"c3_plugin/{p.name}/" in rows for p in folders), sorted(rows)
    missing = []
    for folder in folders:
        named = _named(rows[f"c3_plugin/{folder.name}/"], folder)
        for module in sorted(folder.glob("*.py")):
            if module.stem != "__init__" and module.name not in named:
                missing.append(f"c3_plugin/{folder.name}/{module.name}")
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
            if f"{sub.name}/" not in named:
                missing.append(f"c3_plugin/{folder.name}/{sub.name}/")
    assert not missing, f"modules the README's table does not name: {missing}"


def test_every_file_the_table_names_exists():
    stale = []
    for path, cell in _rows().items():
        assert (REPO / path).is_dir(), path
        for name in re.findall(r"`([\w/]+\.py)`", cell):
            # the folder's own or a subfolder's
            if not ((REPO / path / name).is_file() or any((REPO / path).rglob(name))):
                stale.append(f"{path}{name}")
    assert not stale, f"the README's table names files that do not exist: {stale}"
