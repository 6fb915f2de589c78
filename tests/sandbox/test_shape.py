"""The sandbox package stays readable (no file over 600 lines, no function over 80) and its runner, kept in parts by
concern, is still one program: the parts joined by ``runner.source()`` compile, hold no import of each other, and
define every name a part imports from another."""

import ast
from pathlib import Path

from c3_sandbox import runner

PACKAGE = Path(__file__).resolve().parents[2] / "c3_sandbox"


def test_no_file_over_600_lines_and_no_function_over_80():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 15, files  # the package and its runner's parts are all seen
    long_files = [f"{p.name}: {n}" for p in files if (n := len(p.read_text().splitlines())) > 600]
    long_functions = [f"{p.name}:{f.lineno} {f.name}" for p in files for f in ast.walk(ast.parse(p.read_text()))
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno >= 80]
    assert not long_files and not long_functions, (long_files, long_functions)


def test_the_runner_s_parts_join_into_one_program():
    source = runner.source()
    tree = ast.parse(source)
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert not relative, [ast.unparse(n) for n in relative]
    defined = {t.id for n in tree.body if isinstance(n, ast.Assign) for target in n.targets
               for t in ast.walk(target) if isinstance(t, ast.Name)}
    defined |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    seen = set()
    for part in runner.PARTS:
        part_tree = ast.parse((PACKAGE / "runner" / f"{part}.py").read_text())
        names = {a.name for n in ast.walk(part_tree) if isinstance(n, ast.ImportFrom) and n.level for a in n.names}
        assert names <= defined, (part, names - defined)
        seen.update(names)
    assert {"SetupError", "build_root", "wait_result", "job_filter"} <= seen  # the check reads the parts' imports
    assert source.rstrip().endswith('if __name__ == "__main__":\n    main()')
    assert sum(1 for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main") == 1
