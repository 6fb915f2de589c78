"""The answer language's package stays readable: split by concern, no file over 600 lines, no function over 80."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "answer_language"


def test_no_file_over_600_lines_and_no_function_over_80():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 8  # split by concern, not one module
    long_files = [f"{p.name} ({n})" for p in files if (n := len(p.read_text().splitlines())) > 600]
    assert not long_files, long_files
    long = [f"{p.name}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)" for p in files
            for f in ast.walk(ast.parse(p.read_text())) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.end_lineno - f.lineno + 1 > 80]
    assert not long, long


def test_the_grammar_is_written_down():
    readme = (PACKAGE / "README.md").read_text()
    for rule in ("box", "body", "item", "side", "expr", "name", "unit", "number", "text"):
        assert f"\n{rule}" in readme or f" {rule} " in readme, rule
