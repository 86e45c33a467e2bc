# No exercise can be passed by calling something the chapter already has. Run one chapter:
#   .venv/bin/python -m pytest tests/test_exercise_bypass.py -k 10_tokenizer
# (marked e2e: it executes every chapter with an exercise, minutes in all; `make unit` skips it, `make test` runs it)
"""Each chapter is executed as nbval executes it (a kernel of this environment, with conftest.py's CPU pins; in a
temporary folder, as the chapters read no file by a relative path), cell by cell. At each exercise (a cell tagged
`exercise`), before the learner's cell:

1. every callable the learner could reach there is listed (tests/exercise_probe.py says which: the namespace's
   functions, classes and callable objects, the functions of the tinylm and gguf modules it holds, one submodule
   deep, the methods of tinylm's classes and of its tinylm objects);
2. the chapter's solution cell (tagged `solution`) runs in place of the learner's cell;
3. the exercise's checker (`check`, called as the exercise cell calls it) must pass the solution, and must
   refuse each listed callable put in place of the solution (in each argument position, for a checker of two).

A failure names the chapter, the exercise and every callable that passed.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
PROBE = Path(__file__).with_name("exercise_probe.py")
MARK = "<<exercise-probe>>"


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def exercises(nb) -> list[tuple[int, int]]:
    """(exercise cell index, its solution cell index): the first `solution` cell after each `exercise` cell."""
    found = []
    for i, cell in enumerate(nb.cells):
        if "exercise" in tags(cell):
            after = [j for j in range(i + 1, len(nb.cells)) if "solution" in tags(nb.cells[j])]
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


WITH_EXERCISES = sorted(p.name for p in CHAPTERS.glob("*.ipynb") if exercises(nbformat.read(p, as_version=4)))


def test_the_chapters_with_exercises_are_found():
    assert len(WITH_EXERCISES) >= 10, WITH_EXERCISES
    assert checked_names("def f(x): ...\nprint(check(f, g))\n") == ["f", "g"]


def probe_source(names: list[str]) -> str:
    """The cell run after the solution: the checker on the solution and on every candidate listed before it."""
    return (f"import json as _json\n"
            f"_tl_report = _tl_probe.run(check, [{', '.join(names)}], _tl_found)\n"
            f"print({MARK!r} + _json.dumps(_tl_report))\n"
            f"del _tl_found, _tl_report\n")


def listing_source(names: list[str]) -> str:
    """The cell run before the solution: load the probe by path, list what the learner can call."""
    return (f"import importlib.util as _tl_u\n"
            f"_tl_s = _tl_u.spec_from_file_location('_tl_probe', {str(PROBE)!r})\n"
            f"_tl_probe = _tl_u.module_from_spec(_tl_s)\n"
            f"_tl_s.loader.exec_module(_tl_probe)\n"
            f"_tl_found = _tl_probe.candidates(get_ipython().user_ns, skip={set(['check', *names])!r})\n"
            f"print({MARK!r} + str(len(_tl_found)))\n")


def marked_output(cell) -> str:
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    lines = [line for line in text.splitlines() if line.startswith(MARK)]
    assert lines, f"the probe printed nothing it should have: {cell.outputs}"
    return lines[-1][len(MARK):]


@pytest.mark.e2e
@pytest.mark.parametrize("chapter", WITH_EXERCISES)
def test_no_callable_in_the_chapter_passes_its_exercise(chapter, monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(CHAPTERS / chapter, as_version=4)
    todo = exercises(nb)
    skip_cells = {i for i, _ in todo}                 # the learner's cells: the solution runs in their place
    # the kernel works in a temporary folder: a candidate such as a `save` method writes there, if anywhere
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    problems, reports = [], []
    with client.setup_kernel():
        for i, cell in list(enumerate(nb.cells)):   # the probe's cells are appended to nb.cells as they run
            if cell.cell_type != "code" or i in skip_cells:
                continue
            at = [(e, s) for e, s in todo if s == i]
            if at:
                exercise = at[0][0]
                names = checked_names(nb.cells[exercise].source)
                listing = nbformat.v4.new_code_cell(listing_source(names))
                nb.cells.append(listing)
                client.execute_cell(listing, len(nb.cells) - 1)
                n_found = int(marked_output(listing))
            client.execute_cell(cell, i)
            if at:
                probe = nbformat.v4.new_code_cell(probe_source(names))
                nb.cells.append(probe)
                client.execute_cell(probe, len(nb.cells) - 1)
                report = json.loads(marked_output(probe))
                what = f"{chapter}, exercise {', '.join(names)} (cell {exercise})"
                reports.append(f"{what}: {n_found} callables, {report['tried']} checker calls")
                passed, verdict = report["solution"]
                if not passed:
                    problems.append(f"{what}: the checker refuses the chapter's own solution: {verdict}")
                for position, label, verdict in report["bypasses"]:
                    slot = f" as argument {position + 1}" if len(names) > 1 else ""
                    problems.append(f"{what}: `{label}`{slot} passes the checker ({verdict})")
                if at[0] == todo[-1]:
                    break                               # nothing after the last exercise is needed
    print("\n".join(reports))
    assert not problems, "exercises that can be bypassed:\n" + "\n".join(problems)
