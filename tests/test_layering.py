"""The layers of ARCHITECTURE.md hold: no module imports upward, no import cycle (imports inside functions
count), the library imports no domain, a domain imports only the library's core and no other domain,
and every library module belongs to a layer."""

import re
from pathlib import Path

from tests.test_imports import cycles, import_graph, module_files

REPO = Path(__file__).resolve().parents[1]
MODULES = {**module_files(REPO, "c3_plugin"), **module_files(REPO, "c3_sandbox"), **module_files(REPO, "domains"),
           **module_files(REPO, "answer_language")}


def _graph():
    """Every import, at the top of a module or inside a function (tests/test_imports.py's graph)."""
    return import_graph(MODULES)


def _layers():
    block = re.search(r"```layers\n(.*?)```", (REPO / "ARCHITECTURE.md").read_text(), re.S).group(1)
    order, of = [], {}
    for line in block.strip().splitlines():
        layer, names = line.split(":", 1)
        order.append(layer.strip())
        for name in names.split():
            of["c3_plugin" if name == "__init__" else f"c3_plugin.{name}"] = layer.strip()
    return order, of


def _layer_of(module, of):
    for name in (module, module + ".*", *[module.rsplit(".", k)[0] + ".*" for k in range(1, module.count("."))]):
        if name in of:
            return of[name]
    return None


def test_every_library_module_has_a_layer():
    _, of = _layers()
    missing = sorted(m for m in MODULES if m.startswith("c3_plugin") and _layer_of(m, of) is None)
    assert not missing, f"modules in no layer of ARCHITECTURE.md: {missing}"
    stale = sorted(n for n in of if not n.endswith(".*") and n not in MODULES)
    assert not stale, f"ARCHITECTURE.md names modules that do not exist: {stale}"


def test_no_module_imports_a_layer_above_its_own():
    order, of = _layers()
    rank = {layer: i for i, layer in enumerate(order)}
    upward = []
    for module, targets in _graph().items():
        if not module.startswith("c3_plugin"):
            continue
        for t in targets:
            if t.startswith("c3_plugin") and rank[_layer_of(t, of)] > rank[_layer_of(module, of)]:
                upward.append(f"{module} ({_layer_of(module, of)}) imports {t} ({_layer_of(t, of)})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycle_counting_imports_inside_functions():
    assert cycles(_graph()) == []


def test_the_library_imports_no_domain_and_domains_only_its_core():
    _, of = _layers()
    graph = _graph()
    into_domains = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("c3_plugin") for t in ts
                          if t.startswith("domains"))
    assert not into_domains, into_domains
    bad = []
    for m, ts in graph.items():
        if not m.startswith("domains."):
            continue
        for t in ts:
            if t.startswith("c3_plugin") and _layer_of(t, of) != "core":
                bad.append(f"{m} -> {t} ({_layer_of(t, of)})")
            if t.startswith("domains.") and t.split(".")[1] != m.split(".")[1]:
                bad.append(f"{m} -> {t} (another domain)")
    assert not bad, bad


def test_the_sandbox_imports_neither_the_library_nor_a_domain_and_the_library_not_it():
    """``c3_sandbox`` stands alone (stdlib only): a domain may call it, the library never does."""
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                 if (m.startswith("c3_sandbox") and not t.startswith("c3_sandbox"))
                 or (m.startswith("c3_plugin") and t.startswith("c3_sandbox")))
    assert not bad, bad


def test_the_answer_language_imports_neither_the_library_nor_a_domain():
    """``answer_language/`` sits beside the domains: plain Python that the math domain calls, importing neither
    ``c3_plugin`` nor any domain (ARCHITECTURE.md)."""
    graph = _graph()
    assert "answer_language.reader" in graph and "domains.math.answer" in graph
    assert "answer_language.client" in graph["domains.math.answer"]
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("answer_language") for t in ts
                 if t.startswith(("c3_plugin", "domains")))
    assert not bad, bad


def test_the_checks_see_what_they_check():
    """The graph finds deferred imports and resolves relative ones (or the tests above would pass vacuously)."""
    graph = _graph()
    assert "c3_plugin.core.trace" in graph["c3_plugin.core.rollout"]
    assert "c3_plugin.tools.session" in graph["c3_plugin.tools.cli"]
    assert "c3_sandbox.cgroups" in graph["c3_sandbox.sandbox"]  # ``from . import cgroups``
    assert "c3_sandbox.sandbox" in graph["domains.code.tasks"]
    deferred = {m: re.findall(r"^\s+from (c3_plugin[\w.]*) import", p.read_text(), re.M)
                for m, p in MODULES.items() if m.startswith("c3_plugin")}
    deferred = {m: found for m, found in deferred.items() if found}
    assert deferred and all(set(found) & (graph[m] | {t.rpartition(".")[0] for t in graph[m]})
                            for m, found in deferred.items())


def test_each_layer_is_a_folder():
    """A layer is the folder of its name (the package's ``__init__`` and ``__main__`` aside): the layout shows the
    layers, and a new module joins its folder's layer without an edit here."""
    order, of = _layers()
    for name, layer in of.items():
        assert name in ("c3_plugin", "c3_plugin.__main__") or name == f"c3_plugin.{layer}.*", (name, layer)
    flat = sorted(p.name for p in (REPO / "c3_plugin").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert not flat, f"modules outside every layer folder: {flat}"
