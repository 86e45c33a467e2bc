# No exercise can be passed by calling something the chapter already has. The probe itself runs inside nbval's
# execution of each chapter (tests/exercise_nbval.py, added by conftest.py; `make test` runs it); this file tests
# that it is there and that it can fail. Run: .venv/bin/python -m pytest tests/test_exercise_bypass.py
"""The probe's pieces, and its presence in nbval's items for every chapter with an exercise."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import exercise_nbval as share
import exercise_probe as probe

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"


WITH_EXERCISES = sorted(p.name for p in CHAPTERS.glob("*.ipynb")
                        if share.exercises(nbformat.read(p, as_version=4).cells))


def test_the_chapters_with_exercises_are_found():
    assert len(WITH_EXERCISES) >= 10, WITH_EXERCISES
    assert share.checked_names("def f(x): ...\nprint(check(f, g))\n") == ["f", "g"]
    with pytest.raises(AssertionError, match="does not call check"):
        share.checked_names("print(f(1))\n")


def test_nbval_runs_the_probe_around_every_exercise():
    """Collected as `make test` collects: a listing item just before each exercise cell, a probe item just
    after its solution cell, in every chapter with an exercise."""
    paths = [str(CHAPTERS / c) for c in WITH_EXERCISES]
    out = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--collect-only", "-q", "-p", "no:xdist",
                          "-p", "no:cacheprovider", *paths], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    for chapter in WITH_EXERCISES:
        mine = [i.split("::", 1)[1] for i in ids if i.startswith(f"chapters/{chapter}::")]
        cells = [c for c in nbformat.read(CHAPTERS / chapter, as_version=4).cells if c.cell_type == "code"]
        for exercise, solution in share.exercises(cells):
            at = mine.index(f"Cell {exercise}")
            assert mine[at - 1] == f"Cell {exercise} ({share.LISTING})", (chapter, mine[at - 2:at + 1])
            at = mine.index(f"Cell {solution}")
            assert mine[at + 1] == f"Cell {exercise} ({share.CHECKING})", (chapter, mine[at:at + 2])


def test_the_probe_names_a_callable_that_passes_and_a_refused_solution():
    def check(f):
        return f(3) == 9

    def square(x):
        return x * x

    def wrong(x):
        return x + 6            # right at 3 only: the checker's one case

    report = probe.run(check, [square], [("wrong", wrong), ("abs", abs)])
    assert report["tried"] == 2 and [b[1] for b in report["bypasses"]] == ["wrong"]
    with pytest.raises(AssertionError, match="`wrong` passes the checker"):
        probe.verdict(report, "ch, exercise square", ["square"])
    report = probe.run(check, [abs], [("square", square)])
    with pytest.raises(AssertionError, match="refuses the chapter's own solution"):
        probe.verdict(report, "ch, exercise f", ["f"])
    probe.verdict(probe.run(lambda f: f(3) == 9 and f(4) == 16, [square], [("wrong", wrong)]), "ch", ["square"])


def test_the_probe_leaves_the_folder_and_the_random_generators_as_they_were():
    import numpy as np
    import torch

    def noisy(x):
        Path("written.txt").write_text("x")       # a candidate such as a `save` method
        random.random(), np.random.rand(), torch.rand(1)
        return False

    cwd = os.getcwd()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = random.random(), np.random.rand(), torch.rand(1).item()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    probe.run(lambda f: f(1), [lambda x: True], [("noisy", noisy)])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert os.getcwd() == cwd and not Path("written.txt").exists()


def test_a_candidate_that_changes_an_object_leaves_the_chapters_object_as_it_was():
    """A tinylm model's method set an attribute to the checker's array and broke the chapter's next cell:
    the candidates run in a forked copy of the kernel."""
    class Model:
        explicit = False

        def use(self, value):
            self.explicit = value
            return True

    model = Model()
    report = probe.run(lambda f: f([1, 2]) is True and False, [lambda x: True], [("model.use", model.use)])
    assert report["tried"] == 1 and model.explicit is False
