"""Re-execute chapters in place and keep their metadata clean (so diffs show only real changes).

Usage: python tools/execute.py chapters/01_parameter_counting.ipynb [...]   (`make execute` runs them all)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import numerics  # tools/numerics.py: the same pinned CPU code paths as the tests

KEEP_CELL_METADATA = {"tags", "collapsed", "jupyter", "mystnb"}  # mystnb: image alt text


def clean(nb: nbformat.NotebookNode) -> None:
    nb.metadata = nbformat.from_dict({
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA})
        cell.pop("id", None)
    nb.nbformat, nb.nbformat_minor = 4, 4


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    clean(nb)
    nbformat.write(nb, path)
    return seconds


if __name__ == "__main__":
    numerics.apply()  # the kernels inherit this environment
    for arg in sys.argv[1:]:
        print(f"{arg}: {execute(Path(arg)):.1f} s", flush=True)
