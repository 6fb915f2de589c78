"""The layers of ARCHITECTURE.md hold: no module imports upward, no import cycle (imports inside functions
count), the library imports no domain, a domain imports only the library's core and no other domain,
and every library module belongs to a layer."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _modules(package):
    out = {}
    for path in (REPO / package).rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = {**_modules("c3_plugin"), **_modules("domains")}


def _targets(module, node):
    """Project modules one import statement names (a package's submodule when the name is one)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            here = here[:len(here) - node.level + 1]
            base = ".".join(here + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _graph():
    """Every import, at the top of a module or inside a function."""
    return {m: set().union(*[_targets(m, n) for n in ast.walk(ast.parse(p.read_text()))
                             if isinstance(n, (ast.Import, ast.ImportFrom))] or [set()]) for m, p in MODULES.items()}


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
    graph = _graph()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components, iterative over the call stack depth we have
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_library_imports_no_domain_and_domains_only_its_core():
    _, of = _layers()
    graph = _graph()
    into_domains = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("c3_plugin") for t in ts if t.startswith("domains"))
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


def test_the_checks_see_what_they_check():
    """The graph finds a deferred import and resolves relative ones (or the tests above would pass vacuously)."""
    graph = _graph()
    assert "c3_plugin.trace" in graph["c3_plugin.rollout"]  # a top-level relative import
    assert "c3_plugin.analysis" in graph["c3_plugin.cli"]
    deferred = [m for m, p in MODULES.items() if m.startswith("c3_plugin") and re.search(r"^\s+from \.", p.read_text(), re.M)]
    assert deferred and all(graph[m] for m in deferred)
