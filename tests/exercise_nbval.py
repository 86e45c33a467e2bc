# The exercise-bypass probe, run inside nbval's own execution of each chapter (conftest.py calls `add_probes`), so
# `make test` executes every chapter once. Check one chapter: .venv/bin/python -m pytest --nbval chapters/02_rmsnorm.ipynb
"""At each exercise (a code cell tagged `exercise`) of a chapter nbval runs, two cells are added to nbval's items,
in the chapter's kernel:

1. before the learner's cell, *listing*: every callable the learner could reach there (tests/exercise_probe.py
   says which: the namespace's functions, classes and callable objects, the functions of the tinylm and gguf
   modules it holds, one submodule deep, the methods of tinylm's classes and of its tinylm objects);
2. after the chapter's solution cell (the first cell tagged `solution` after it), *probe*: the exercise's checker
   (`check`, called as the exercise cell calls it) must pass the solution and refuse each listed callable put in
   place of the solution (in each argument position, for a checker of two). The probe cell raises an
   AssertionError that names the chapter, the exercise and every callable that passed.

The probe runs the candidates in a forked copy of the kernel (a candidate may change the object it is bound to,
as a model's method setting an attribute to the checker's array did), in a temporary folder, so the chapter's
later cells print what they printed before. Neither added cell is compared.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PROBE = Path(__file__).with_name("exercise_probe.py")
LISTING, CHECKING = "exercise probe: listing", "exercise probe: checking"


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def exercises(cells) -> list[tuple[int, int]]:
    """(exercise cell index, its solution cell index) in `cells`: the first `solution` cell after each
    `exercise` cell."""
    found = []
    for i, cell in enumerate(cells):
        if "exercise" in tags(cell):
            after = [j for j in range(i + 1, len(cells)) if "solution" in tags(cells[j])]
            assert after, f"the exercise in cell {i} has no solution cell (tag `solution`) after it"
            found.append((i, after[0]))
    return found


def checked_names(source: str) -> list[str]:
    """The arguments of the exercise cell's `check(...)` call: the names of the learner's functions."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check":
            assert all(isinstance(a, ast.Name) for a in node.args) and node.args, "check(...) takes the function names"
            return [a.id for a in node.args]
    raise AssertionError(f"the exercise cell does not call check(...):\n{source}")


def listing_source(names: list[str], chapter: str) -> str:
    """The cell run before the learner's: load the probe by path, list what the learner can call, and add
    the chapter's named shortcuts and wrong answers (tests/exercise_bypasses.py) for a checker of one."""
    named = (f"_tl_found += _tl_probe.named(get_ipython().user_ns, {chapter!r})\n" if len(names) == 1 else "")
    return (f"import importlib.util as _tl_u\n"
            f"_tl_s = _tl_u.spec_from_file_location('_tl_probe', {str(PROBE)!r})\n"
            f"_tl_probe = _tl_u.module_from_spec(_tl_s)\n"
            f"_tl_s.loader.exec_module(_tl_probe)\n"
            f"_tl_found = _tl_probe.candidates(get_ipython().user_ns, skip={set(['check', *names])!r})\n"
            + named + "del _tl_u, _tl_s\n")


def probe_source(names: list[str], what: str) -> str:
    """The cell run after the solution: the checker on the solution and on every candidate listed before;
    raises if the solution fails or a candidate passes."""
    return (f"_tl_report = _tl_probe.run(check, [{', '.join(names)}], _tl_found)\n"
            f"try:\n"
            f"    _tl_probe.verdict(_tl_report, {what!r}, {names!r})\n"
            f"finally:\n"
            f"    del _tl_found, _tl_report, _tl_probe\n")


def add_probes(items: list) -> None:
    """Insert, in place, the listing and probe items around each exercise of every notebook nbval collected."""
    from nbformat.v4 import new_code_cell
    from nbval.plugin import IPyNbCell

    by_file: dict = {}
    for item in items:
        if isinstance(item, IPyNbCell):
            by_file.setdefault(item.parent, []).append(item)
    for notebook, cells in by_file.items():
        chapter = Path(str(notebook.fspath)).name
        before, after = {}, {}
        for exercise, solution in exercises([c.cell for c in cells]):
            names = checked_names(cells[exercise].cell.source)
            what = f"{chapter}, exercise {', '.join(names)} (code cell {exercise})"
            n = cells[exercise].cell_num
            for where, at, label, source in ((before, exercise, LISTING, listing_source(names, chapter)),
                                             (after, solution, CHECKING, probe_source(names, what))):
                where[id(cells[at])] = IPyNbCell.from_parent(
                    notebook, name=f"Cell {n} ({label})", cell_num=n, cell=new_code_cell(source),
                    options=defaultdict(bool, check=False))
        ordered = []
        for item in items:
            ordered += [x for x in (before.get(id(item)), item, after.get(id(item))) if x is not None]
        items[:] = ordered
