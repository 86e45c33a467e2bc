# No import cycles inside tinylm, lazy imports included. Run: .venv/bin/python -m pytest tests/test_imports.py
"""Parses (never imports) every module of the package and follows its imports of other tinylm modules,
wherever they are written: at the top, or inside a function (a lazy import can only hide a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tinylm"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(source: str, name: str, is_package: bool = False) -> set[str]:
    """The tinylm modules that the module `name` (with this source) imports, anywhere in its code."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:                                   # from . import x / from ..config import Config
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}   # `from . import reference` is a module
    return {m for m in found if m in MODULES and m != name}


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
            for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (the first repeated at the end), or None."""
    state: dict[str, str] = {}                               # "open" while on the stack, then "done"
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    # A package's __init__ re-exports its modules; a module importing a sibling does not go through it.
    graph = {m: {d for d in deps if not (MODULES[d].name == "__init__.py" and m.startswith(d + "."))}
             for m, deps in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_parser_sees_lazy_and_relative_imports():
    source = "from .config import Config\nfrom . import reference as ref\n\ndef f():\n    from .model import TinyLM\n"
    assert imported_modules(source, "tinylm.moe") == {"tinylm", "tinylm.config", "tinylm.reference", "tinylm.model"}
    assert imported_modules("from ..model import TinyLM\n", "tinylm.train.loop") == {"tinylm.model"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_moe_knows_nothing_of_the_model():
    assert "tinylm.model" not in import_graph()["tinylm.moe"]


def test_every_subpackage_is_installed():
    """pyproject lists its packages by name: a new folder left out would be missing from a pip install."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert sorted(listed) == sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def test_every_module_says_its_job_and_the_layout_names_it():
    """docs/layout.md (the README links it) names every module of the package."""
    readme = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    for name, path in MODULES.items():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and doc.splitlines()[0].strip(), f"{name} has no docstring saying its job in its first line"
        file = path.relative_to(PACKAGE).as_posix()
        if path.parent == PACKAGE and path.name != "__init__.py":
            assert f"`{file}`" in readme, f"docs/layout.md's module table does not name tinylm/{file}"
        elif path.parent != PACKAGE and path.stem not in ("__init__", "__main__"):
            assert f"`{path.name}`" in readme, f"docs/layout.md's module table does not name tinylm/{file}"
