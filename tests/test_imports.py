"""The import structure of the package, read from the source (ast over jax_tsm2/**/*.py):
no cycle among its modules, none hidden inside a function either, and the product imports
neither the benchmark harness nor the command lines."""

from __future__ import annotations

import ast
import pathlib

import pytest

import jax_tsm2

# The package under test: the source tree of an editable install, or an installed wheel's.
PACKAGE = pathlib.Path(jax_tsm2.__file__).resolve().parent


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The package module ``name`` is (or lies in): attributes resolve to their module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> set[str]:
    """The package modules an import statement runs (packages on the way included)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importing module's package upwards
            pkg = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        names = [f"{base}.{alias.name}" for alias in node.names] + [base]
    out = set()
    for name in names:
        if name != "jax_tsm2" and not name.startswith("jax_tsm2."):
            continue
        target = _resolve(name)
        while target:  # importing a.b.c runs a and a.b first
            out.add(target)
            target = target.rpartition(".")[0]
    return out


def _imports(tree: ast.AST, in_function: bool = False):
    """``(import statement, whether it is inside a function)`` for every import in ``tree``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        deeper = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _imports(child, in_function or deeper)


def _graph(with_functions: bool) -> dict[str, set[str]]:
    """module -> the package modules it imports: at module level, or anywhere. A module's own
    ancestors are left out (they are initialised before it runs)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            if in_function and not with_functions:
                continue
            for t in _targets(node, module, path.name == "__init__.py"):
                if not (module == t or module.startswith(t + ".")):
                    graph[module].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_walk_sees_the_package():
    graph = _graph(with_functions=False)
    assert {"jax_tsm2", "jax_tsm2.routing", "jax_tsm2.tune.cache"} <= set(graph)
    assert "jax_tsm2.tune.cache" in graph["jax_tsm2.routing"]
    assert "jax_tsm2.tune" in graph["jax_tsm2.routing"]  # the package runs first
    # A cycle is found where there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("with_functions", [False, True], ids=["module level", "anywhere"])
def test_no_import_cycle(with_functions):
    """At module level a cycle breaks imports; inside functions it is one dodged, not gone."""
    assert _cycles(_graph(with_functions)) == []


def test_routing_imports_neither_the_tuner_s_command_line_nor_the_harness():
    reach = _reach(_graph(with_functions=True), "jax_tsm2.routing")
    assert "jax_tsm2.tune.cli" not in reach
    assert not {m for m in reach if m.startswith("jax_tsm2.bench")}


def test_the_product_imports_no_harness_and_no_command_line():
    reach = _reach(_graph(with_functions=True), "jax_tsm2") | {"jax_tsm2"}
    assert not {m for m in reach if m.startswith("jax_tsm2.bench")}
    assert not {m for m in reach if m.endswith(("__main__", ".cli", ".demo"))}
