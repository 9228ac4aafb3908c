"""The package's modules import one another without circles, and library code never imports the CLI.

Every import counts, including those inside functions and under TYPE_CHECKING: a lazy import hides a
circle from Python, not from the reader who has to understand both modules at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# compilers/ installs as matpo_graph.compilers (pyproject's package-dir)
SOURCES = {"matpo_graph": REPO / "matpo_graph", "matpo_graph.compilers": REPO / "compilers"}
ENTRY_POINTS = {"matpo_graph.__main__"}  # `python -m matpo_graph` runs the CLI by design


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            parts = [*package.split("."), *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (``from a import b`` counts a.b when b is a module, else a)."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circle_between_modules():
    assert _cycles(_graph()) == []


def test_library_code_never_imports_the_cli():
    offenders = {module: sorted(t for t in targets if t == "matpo_graph.cli" or t.startswith("matpo_graph.cli."))
                 for module, targets in _graph().items()
                 if not module.startswith("matpo_graph.cli") and module not in ENTRY_POINTS}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path: Path):
    """A circle closed only by a function-level import is found (the test can fail)."""
    a = tmp_path / "a.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import b\n")
    b = tmp_path / "b.py"
    b.write_text("def f():\n    from p.a import x\n")
    known = {"p.a", "p.b"}
    graph = {"p.a": _imports("p.a", a, known), "p.b": _imports("p.b", b, known)}
    assert _cycles(graph) == [["p.a", "p.b"]]


# Modules run as programs (`python -m ...`): their `main` may parse argv and print.
PROGRAMS = {"matpo_graph.__main__", "matpo_graph.verl_target.smoke"}


def _talks_to_the_terminal(path: Path) -> list[str]:
    """`print(...)` calls and argparse/sys.argv uses in a module, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                a.name == "argparse" for a in node.names) | (getattr(node, "module", None) == "argparse"):
            found.append(f"{node.lineno}: argparse")
        elif isinstance(node, ast.Attribute) and node.attr == "argv" and isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"{node.lineno}: sys.argv")
    return found


def test_library_code_never_parses_argv_or_prints():
    """Verbs in cli/ own the terminal; the library reports through logging and return values."""
    offenders = {name: _talks_to_the_terminal(path) for name, path in _modules().items()
                 if not name.startswith("matpo_graph.cli") and name not in PROGRAMS}
    assert {name: found for name, found in offenders.items() if found} == {}
