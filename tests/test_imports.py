"""Module structure of the library: no import cycle through the ``c3_plugin.trainers`` modules (imports
at module level and inside functions alike), and the preference package kept in files under 400 lines."""

import ast
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, however deeply nested (functions, methods, try blocks), except under
    ``if TYPE_CHECKING:``, which never runs."""
    for node in ast.iter_child_nodes(tree):
        if _type_checking_only(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports by name (``from pkg import mod`` names ``pkg.mod``)."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    edges.add(target)
                elif base in modules:
                    edges.add(base)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import helper\n")
    (pkg / "b.py").write_text("def helper():\n    pass\n\ndef lazy():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a "
                              "import x\nimport pkg.b\n")
    graph = import_graph(module_files(tmp_path, "pkg"))
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.b"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_among_the_trainer_modules():
    graph = import_graph(module_files(ROOT, "c3_plugin"))
    assert {"c3_plugin.trainers.joint", "c3_plugin.trainers.joint.actor"} <= set(graph)
    assert [c for c in cycles(graph) if any(m.startswith("c3_plugin.trainers.") for m in c)] == []


def test_preference_package_files_stay_under_the_line_limit():
    files = sorted((ROOT / "c3_plugin" / "trainers" / "preference").glob("*.py"))
    assert len(files) > 1 and not (ROOT / "c3_plugin" / "trainers" / "preference.py").exists()
    long = {f.name: n for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) >= MAX_LINES}
    assert long == {}, f"split these preference modules below {MAX_LINES} lines: {long}"


def test_public_preference_names_import_from_the_package():
    import c3_plugin.trainers.preference as preference
    from c3_plugin.core.registry import PREFERENCE, resolve

    for name in preference.__all__:
        assert getattr(preference, name).__module__.startswith("c3_plugin.trainers.preference.")
    for name in PREFERENCE:
        config_cls, trainer_cls = resolve(name)
        assert (getattr(preference, trainer_cls.__name__) is trainer_cls
                and getattr(preference, config_cls.__name__) is config_cls)


def test_a_checkpoint_written_under_the_single_module_name_still_loads():
    from comlrl.utils import checkpoint

    from c3_plugin.trainers.preference import MaskedPreferenceTensors

    t = MaskedPreferenceTensors(prompt_input_ids=torch.tensor([1, 2]), winner_completion_ids=torch.tensor([3]),
                                loser_completion_ids=torch.tensor([4]), winner_loss_mask=torch.tensor([1]),
                                loser_loss_mask=torch.tensor([0]))
    encoded = checkpoint._encode(t, copy_tensors=True)
    assert encoded["class"] == "c3_plugin.trainers.preference.likelihood.MaskedPreferenceTensors"
    for name in (encoded["class"], "c3_plugin.trainers.preference.MaskedPreferenceTensors"):
        back = checkpoint._decode({**encoded, "class": name})
        assert isinstance(back, MaskedPreferenceTensors) and torch.equal(back.loser_loss_mask, t.loser_loss_mask)

