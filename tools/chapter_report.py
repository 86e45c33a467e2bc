"""Execute every chapter once (in memory, nothing written) and report its time and what nbval compares.

Usage: python tools/chapter_report.py [chapters/*.ipynb]     (`make report`)
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}


def report(path: Path) -> tuple[str, float, int, int, int, int]:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    ignored = sum(bool(IGNORE_TAGS & set(c.metadata.get("tags", []))) for c in code)
    source = "\n".join(c.source for c in code)
    questions = len(re.findall(r"\bQuestion\(", source))
    explorers = len(re.findall(r"\bstatic_explorer\(", source))
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return path.stem, time.perf_counter() - start, len(code) - ignored, len(code), questions, explorers


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted(Path("chapters").glob("*.ipynb"))
    print(f"{'chapter':24s} {'seconds':>8s} {'compared':>9s} {'quiz':>5s} {'explorers':>9s}")
    total = 0.0
    for path in paths:
        name, seconds, compared, cells, questions, explorers = report(path)
        total += seconds
        print(f"{name:24s} {seconds:8.1f} {compared:>4d}/{cells:<4d} {questions:5d} {explorers:9d}", flush=True)
    print(f"{'total':24s} {total:8.1f}")
