# A new user's first run: a fresh copy of the repository, set up only as README's quick start says, imports
# tinylm and runs one chapter. Run: .venv/bin/python -m pytest tests/test_fresh_env.py   (a few minutes: it
# builds a .venv; marked e2e: `make unit` skips it, `make test` runs it)
"""What a new user does, literally:

1. gets the repository: here, the files `git clone` would give (tracked files plus new, not-ignored ones, so an
   uncommitted change is tested too), copied into a temporary folder;
2. runs the commands of the first code block under README's "Quick start" heading, in that folder, with no
   virtual environment active (`make test` is left out: it is what runs this test);
3. in the environment those commands made: imports every module of tinylm, runs one chapter start to finish
   in a Jupyter kernel of that environment, and checks it has what README's "Locally" door uses (`jupyter lab`).

Every chapter is executed by nbval in `make test` already; this test proves only what nbval cannot: that the
README's commands alone make an environment in which the package imports and a chapter's kernel runs.
pip may reuse its download cache, as it would on a user's machine. The copy is deleted afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = re.compile(r"^make\s+(test|nbval|unit)\b")  # the test suite itself


def quick_start_commands(readme: str) -> list[str]:
    """The shell commands of the first fenced code block after the "Quick start" heading."""
    section = re.search(r"^#+\s*Quick start.*?$(.*?)(?=^#+\s|\Z)", readme, re.M | re.S | re.I)
    assert section, "README.md has no 'Quick start' section"
    block = re.search(r"^```[a-z]*\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, "README's Quick start has no code block of commands"
    commands = []
    for line in block.group(1).splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def test_quick_start_is_found_in_the_readme():
    commands = quick_start_commands((ROOT / "README.md").read_text())
    assert any(not NOT_RUN.match(c) for c in commands), f"the Quick start runs only the tests: {commands}"


def user_env() -> dict[str, str]:
    """The shell of a user who has not activated this project's environment."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    return env


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory):
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    dest = tmp_path_factory.mktemp("fresh") / "tinylm"
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    yield dest
    shutil.rmtree(dest, ignore_errors=True)  # a .venv with torch is large


CHAPTER = "chapters/01_parameter_counting.ipynb"   # one chapter: the Colab setup cell, glue, quiz, explorers

# Executes the chapter with nbclient from the fresh environment (so the kernel is that environment's Python).
RUNNER = r'''
import json, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient

probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys, tinylm; print(sys.prefix); print(tinylm.__file__)")])
NotebookClient(probe, timeout=120, kernel_name="python3").execute()
report = {"kernel": probe.cells[0].outputs[0]["text"].split(), "chapters": {}}
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    report["chapters"][path] = {"seconds": round(time.perf_counter() - start, 1),
                                "first_cell_outputs": len(nb.cells[0].outputs)}
print(json.dumps(report))
'''

# Imports every module of the package (the list is made by the test from the files of the copy).
IMPORT_ALL = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; print(len(sys.argv) - 1)"


@pytest.mark.e2e
def test_a_new_user_runs_the_quick_start_then_a_chapter(fresh_copy):
    timings = {}
    env = user_env()
    for command in quick_start_commands((fresh_copy / "README.md").read_text()):
        if NOT_RUN.match(command):
            continue
        start = time.perf_counter()
        run = subprocess.run(["bash", "-c", command], cwd=fresh_copy, env=env, capture_output=True, text=True,
                             timeout=1800)
        timings[command] = round(time.perf_counter() - start, 1)
        assert run.returncode == 0, f"README's `{command}` failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"

    python = fresh_copy / ".venv" / "bin" / "python"
    assert python.exists(), "README's Quick start must create the .venv that its other instructions use"
    modules = sorted(".".join(p.relative_to(fresh_copy).with_suffix("").parts).removesuffix(".__init__")
                     for p in (fresh_copy / "tinylm").rglob("*.py") if p.name != "__main__.py")
    run = subprocess.run([str(python), "-c", IMPORT_ALL, *modules], cwd=fresh_copy, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"a tinylm module does not import in the fresh environment:\n{run.stderr[-3000:]}"

    run = subprocess.run([str(python), "-c", RUNNER, CHAPTER], cwd=fresh_copy, env=env, capture_output=True,
                         text=True, timeout=1800)
    assert run.returncode == 0, f"{CHAPTER} failed in the fresh environment:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    prefix, tinylm_file = report["kernel"]
    assert Path(prefix).resolve() == (fresh_copy / ".venv").resolve(), f"the kernel ran {prefix}, not the new .venv"
    assert Path(tinylm_file).resolve().is_relative_to(fresh_copy.resolve()), f"tinylm came from {tinylm_file}"
    for path, r in report["chapters"].items():  # the Colab setup cell is silent where tinylm is installed
        assert r["first_cell_outputs"] == 0, f"{path}: the setup cell printed something locally"

    # README's local door: Jupyter in the new environment
    if "jupyter lab" in (fresh_copy / "README.md").read_text():
        lab = subprocess.run([str(fresh_copy / ".venv" / "bin" / "jupyter"), "lab", "--version"], cwd=fresh_copy,
                             env=env, capture_output=True, text=True, timeout=120)
        assert lab.returncode == 0, f"README says `jupyter lab`, but the new .venv cannot run it:\n{lab.stderr[-1000:]}"

    print("setup:", timings, "chapter:", {Path(p).stem: r["seconds"] for p, r in report["chapters"].items()})


def test_ci_workflow_tests_every_push_and_publishes_the_book_from_main():
    """The instructor's door: GitHub Actions runs the same `.ci/run` (make test) on pushes and pull requests,
    and publishes the built book to GitHub Pages only from main."""
    import yaml

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    triggers = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    test, deploy = flow["jobs"]["test"], flow["jobs"]["deploy"]
    runs = [s.get("run", "") for s in test["steps"]]
    assert "bash .ci/run" in runs and "make test" in (ROOT / ".ci" / "run").read_text()
    upload = [s for s in test["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert len(upload) == 1 and upload[0]["with"]["path"] == "_build/html"
    main_only = "github.ref == 'refs/heads/main'"
    needs = [deploy["needs"]] if isinstance(deploy["needs"], str) else deploy["needs"]
    assert main_only in upload[0]["if"] and main_only in deploy["if"] and set(needs) == set(flow["jobs"]) - {"deploy"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}


def test_ci_runs_the_pythons_the_readme_supports():
    """3.11 runs everything (outputs compared with nbval); every other supported Python runs
    tools/check_pythons.sh (the book, make unit, every chapter for errors). The README names the same set."""
    import re

    import yaml

    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    assert jobs["test"]["container"] == "python:3.11-bookworm"
    matrix = jobs["pythons"]["strategy"]["matrix"]["python"]
    assert jobs["pythons"]["container"] == "python:${{ matrix.python }}-bookworm"
    assert any("tools/check_pythons.sh python${{ matrix.python }}" in s.get("run", "") for s in jobs["pythons"]["steps"])
    assert (ROOT / "tools" / "check_pythons.sh").stat().st_mode & 0o111, "tools/check_pythons.sh must be executable"
    supported = {"3.11", *matrix}
    readme = (ROOT / "README.md").read_text()
    claim = re.search(r"Python (3\.\d+), (3\.\d+) (?:and|or) (3\.\d+)", readme)
    assert claim and set(claim.groups()) == supported, f"the README must name the tested Pythons {sorted(supported)}"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={min(supported)}"' in pyproject


def test_the_readme_fits_on_a_screen_and_every_link_of_the_docs_resolves():
    """README.md: at most about 6 kB, the test command `make test`, a link to each page of docs/; every relative
    link of the README and of docs/*.md names a file that exists (an anchor, a heading of that file)."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 6 * 1024, f"README.md is {len(readme.encode()):,} bytes: move detail to docs/"
    assert "The test command is `make test`" in readme
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages and all(f"](docs/{p.name})" in readme for p in pages), "the README must link every page of docs/"

    def anchor(heading: str) -> str:                 # GitHub's: lower case, punctuation dropped, spaces to -
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    for page in [ROOT / "README.md", *pages]:
        for target in re.findall(r"\]\(([^)#:\s]+\.md)?(#[^)\s]+)?\)", page.read_text(encoding="utf-8")):
            path = (page.parent / target[0]).resolve() if target[0] else page
            assert path.is_file(), f"{page.relative_to(ROOT)} links {target[0]}, which does not exist"
            if target[1]:
                headings = re.findall(r"^#+\s+(.*)$", path.read_text(encoding="utf-8"), re.M)
                assert target[1][1:] in {anchor(h) for h in headings}, f"{page.name}: {path.name} has no {target[1]}"
