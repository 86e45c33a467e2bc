# Live explorers and quizzes on ipywidgets 7.7 (Colab) and 8.x (local Jupyter). Run: .venv/bin/python -m pytest tests/test_widgets_compat.py
# Marked e2e (Jupyter kernels, a pip install of ipywidgets 7.7): `make unit` skips it, `make test` runs it.
"""The same checks run twice in a real Jupyter kernel: once with the ipywidgets of requirements.txt (8.x),
once with ipywidgets 7.7 put in front of it on PYTHONPATH (the version Colab ships). ipywidgets 7.7 is installed once, with pip, into a cache folder (~/.cache/tinylm,
or $TINYLM_CACHE) and reused; it is pure Python, so this needs PyPI only the first time.

Chapters use widgets only through `tinylm.book.live_explorer` (checked below), so these builders are all
the widget code a chapter runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.e2e
IPYWIDGETS7 = ["ipywidgets==7.7.1", "widgetsnbextension==3.6.1", "jupyterlab_widgets==1.1.1", "ipython_genutils==0.2.0"]


@pytest.fixture(scope="session")
def ipywidgets7() -> Path:
    """A folder holding ipywidgets 7.7 and its pure-Python companions (installed on first use)."""
    cache = Path(os.environ.get("TINYLM_CACHE", Path.home() / ".cache" / "tinylm"))
    target = cache / ("-".join(p.replace("==", "") for p in IPYWIDGETS7))
    if not (target / "ipywidgets" / "__init__.py").exists():
        partial = target.with_name(target.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial),
                              *IPYWIDGETS7], capture_output=True, text=True)
        assert run.returncode == 0, f"could not install {IPYWIDGETS7}:\n{run.stderr[-2000:]}"
        partial.rename(target)
    return target


# The first cell of the kernel's notebook: builds explorers and quizzes, moves sliders, checks what they show.
CHECKS = textwrap.dedent(r'''
    import json, sys
    import ipywidgets
    expected_major = sys.argv[1]
    assert ipywidgets.__version__.split(".")[0] == expected_major, ipywidgets.__version__
    from matplotlib.figure import Figure
    from tinylm.book import live_explorer, quiz, static_explorer, Question

    def card(size, mode):                      # an HTML render
        return f"<p>{size} {mode}</p>"

    def plot(k):                               # a matplotlib render
        fig = Figure(figsize=(2, 1.5))
        fig.add_subplot().plot(range(4), [i ** k for i in range(4)])
        return fig

    w = live_explorer({"size": [64, 128, 256], "mode": ["a", "b"]}, card, labels={"size": "model size"})
    size, mode, view = w.children
    assert [type(c).__name__ for c in w.children] == ["SelectionSlider", "SelectionSlider", "HTML"]
    assert size.description == "model size" and list(size.options) == [64, 128, 256]
    assert view.value == "<p>64 a</p>"
    size.value, mode.value = 256, "b"                        # what dragging the sliders does
    assert view.value == "<p>256 b</p>", view.value
    size.value = 128
    assert view.value == "<p>128 b</p>", view.value

    p = live_explorer({"k": [1, 2]}, plot)
    first = p.children[-1].value
    assert first.startswith("<img") and "base64," in first
    p.children[0].value = 2
    assert p.children[-1].value.startswith("<img") and p.children[-1].value != first

    q = quiz("compat", Question("2 + 2?", ["4", "5"], 0, ["yes", "no"]), Question("1 + 1?", ["3", "2"], 1, ["no", "yes"]))
    assert q._repr_html_().count("<button") == 4
    s = static_explorer("compat", {"k": [1, 2]}, plot)
    assert s._repr_html_().count('type="range"') == 1 and len(s.frames) == 2
    print("checks passed on ipywidgets", ipywidgets.__version__)
''')

KERNEL = textwrap.dedent(r'''
    import json, sys
    import nbformat
    from nbclient import NotebookClient

    checks = open(sys.argv[1]).read().replace("sys.argv[1]", repr(sys.argv[2]))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        checks,
        "w = live_explorer({'size': [64, 128, 256], 'mode': ['a', 'b']}, card)\nw",
        "w.children[0].value = 256\nw.children[1].value = 'b'",
        "quiz('k', Question('2 + 2?', ['4', '5'], 0, ['yes', 'no']), Question('1?', ['1', '2'], 0, ['yes', 'no']))",
        "static_explorer('k', {'k': [1, 2]}, plot)",
    ]]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = [[{"type": o.output_type, "text": o.get("text", ""), "mimes": sorted(o.get("data", {}))}
                for o in c.outputs] for c in nb.cells]
    views = [o["data"]["application/vnd.jupyter.widget-view+json"] for o in nb.cells[1].outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    html = {"quiz": nb.cells[3].outputs[0]["data"]["text/html"], "explorer": nb.cells[4].outputs[0]["data"]["text/html"]}
    print(json.dumps({"outputs": outputs, "views": views, "state": state, "html": html}))
''')


def run(code: str, *args: str, pythonpath: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    script = tmp_path / "script.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, f"failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(params=["7", "8"], ids=["ipywidgets-7.7", "ipywidgets-8"])
def flavour(request, ipywidgets7):
    return request.param, (ipywidgets7 if request.param == "7" else None)


def test_builders_work_in_a_kernel(flavour, tmp_path):
    major, path = flavour
    (tmp_path / "checks.py").write_text(CHECKS)
    result = json.loads(run(KERNEL, str(tmp_path / "checks.py"), major, pythonpath=path,
                            tmp_path=tmp_path).stdout.strip().splitlines()[-1])
    setup, shown, moved, quiz_out, explorer_out = result["outputs"]
    assert any(f"checks passed on ipywidgets {major}." in o["text"] for o in setup), setup
    # the live explorer is a widget view the front end can draw (ipywidgets 7 and 8 both speak protocol 2)
    assert len(result["views"]) == 1 and result["views"][0]["version_major"] == 2
    assert moved == [], f"moving the sliders printed something: {moved}"
    # the kernel sent the moved sliders and the new frame to the front end (the widget state it synced)
    state = result["state"]
    box = state[result["views"][0]["model_id"]]
    size, mode, view = (state[c.removeprefix("IPY_MODEL_")]["state"] for c in box["state"]["children"])
    assert (size["index"], mode["index"]) == (2, 1), "sliders not at size 256 (option 2) and mode 'b' (option 1)"
    assert view["value"] == "<p>256 b</p>", view["value"]
    assert result["html"]["quiz"].count("<button") == 4 and 'class="tl-quiz"' in result["html"]["quiz"]
    assert 'class="tl-explorer"' in result["html"]["explorer"]


def test_chapters_use_widgets_only_through_tinylm_book():
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code":
                assert not re.search(r"^\s*(import ipywidgets|from ipywidgets)", src, re.M), \
                    f"{path.name}: build widgets with tinylm.book.live_explorer (tested on ipywidgets 7.7 and 8)"
                if re.search(r"\blive_explorer\(", src):
                    assert "remove-output" in cell["metadata"].get("tags", []), \
                        f"{path.name}: a live_explorer cell must be tagged remove-output (the static book shows its static_explorer)"
