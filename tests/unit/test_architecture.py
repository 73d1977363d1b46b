"""The house's rules, read from the code's own imports (every import, at module level or inside a
function; docs/architecture.md):

- the layers depend one way: ``signoff`` (CLI, process wiring) → ``api`` → ``service`` →
  ``workflows`` → ``activities`` → ``engine``; nothing imports a layer above its own;
- ``engine`` never imports Temporal or FastAPI, ``service`` and below never import FastAPI;
- no import cycle between the modules of a layer;
- no module over 500 lines unless its docstring says why ("Over 500 lines on purpose": a
  declarative table or a contract).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package → folder, from the top layer down
LAYERS = [
    ("signoff", "signoff"),
    ("signoff.api", "api"),
    ("signoff.service", "service"),
    ("signoff.workflows", "workflows"),
    ("signoff.activities", "activities"),
    ("signoff.engine", "engine"),
]
RANK = {pkg: i for i, (pkg, _) in enumerate(LAYERS)}


def _modules() -> dict[str, Path]:
    found = {}
    for pkg, folder in LAYERS:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([pkg, *parts])] = path
    return found


MODULES = _modules()


def _layer(module: str) -> str:
    """The layer a module of signoff belongs to (the longest matching package)."""
    best = "signoff"
    for pkg, _ in LAYERS:
        if (module == pkg or module.startswith(pkg + ".")) and len(pkg) > len(best):
            best = pkg
    return best


def _imports(module: str, path: Path) -> set[str]:
    """Every module this one imports (absolute names), wherever the import statement is."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return out


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def test_the_tables_see_the_code():
    assert len(MODULES) > 60 and "signoff.engine.decisions" in MODULES and "signoff.service.runs" in MODULES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module):
    mine = RANK[_layer(module)]
    up = sorted(i for i in IMPORTS[module] if i.startswith("signoff") and i in MODULES and RANK[_layer(i)] < mine)
    assert up == [], f"{module} ({_layer(module)}) imports from a layer above: {up}"


@pytest.mark.parametrize(("layer", "banned"), [
    ("signoff.engine", ("temporalio", "fastapi", "starlette", "uvicorn")),
    ("signoff.activities", ("fastapi", "starlette", "uvicorn")),
    ("signoff.workflows", ("fastapi", "starlette", "uvicorn")),
    ("signoff.service", ("fastapi", "starlette", "uvicorn")),
])
def test_a_layer_does_not_import_what_it_must_not(layer, banned):
    bad = {m: sorted(i for i in IMPORTS[m] if i.split(".")[0] in banned)
           for m in MODULES if _layer(m) == layer}
    assert {m: b for m, b in bad.items() if b} == {}


def test_no_import_cycle():
    graph = {m: {i for i in IMPORTS[m] if i in MODULES and i != m} for m in MODULES}
    # a package's __init__ re-exporting its own submodules is not a cycle of the design
    for m in graph:
        graph[m] = {i for i in graph[m] if not (MODULES[m].name == "__init__.py" and i.startswith(m + "."))}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_a_long_module_says_why():
    """Size alone is no fault, several ideas in one file are: a module over 500 lines is a table or
    a contract, and says so where a reader starts."""
    unexplained = {}
    for module, path in MODULES.items():
        text = path.read_text()
        lines = text.count("\n")
        if lines > 500 and "Over 500 lines on purpose" not in " ".join((ast.get_docstring(ast.parse(text)) or "").split()):
            unexplained[module] = lines
    assert unexplained == {}
