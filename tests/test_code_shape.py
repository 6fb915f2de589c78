"""The library stays readable top to bottom: no function longer than 80 lines, and the project's own modules imported
at the top of each module, bar a few function-level imports kept on purpose (the ``c3`` CLI's subcommands load torch,
transformers or CoMLRL only when run; the joint-actor package checks CoMLRL's centralized API before it imports its
trainers)."""

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "c3_plugin"
LONGEST = 80
LAZY_IMPORTS = 20  # at most this many function-level imports of the project's own modules


def functions():
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(LIBRARY.parent), node


def test_no_library_function_is_longer_than_80_lines():
    long = [f"{p}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)" for p, f in functions()
            if f.end_lineno - f.lineno + 1 > LONGEST]
    assert not long, "split these by concern: " + "; ".join(long)


def test_the_project_is_imported_at_module_tops():
    lazy = set()
    for path, f in functions():
        for node in ast.walk(f):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("c3_plugin")):
                lazy.add((str(path), node.lineno))
            elif isinstance(node, ast.Import) and any(a.name.startswith("c3_plugin") for a in node.names):
                lazy.add((str(path), node.lineno))
    assert len(lazy) <= LAZY_IMPORTS, sorted(lazy)
    assert {p for p, _ in lazy} <= {"c3_plugin/tools/cli.py", "c3_plugin/trainers/joint/__init__.py"}, sorted(lazy)
