"""List chapter code-cell lines longer than PEP 8's 79 characters (the book's code box holds them).

Usage: python tools/check_code_width.py chapters/*.ipynb [--max 79] [--count]
Prints `path:cell:line: (N chars) text` for each long line and a summary per notebook; the exit status is
1 when any line is too long. `--count` prints only the per-notebook counts. tests/test_browser.py uses
`long_lines` to know which pages are still awaiting their reformat.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MAX = 79


def long_lines(path: Path, limit: int = MAX) -> list[tuple[int, int, str]]:
    """(cell index, line number from 1, line) for every code-cell line over `limit` characters."""
    cells = json.loads(Path(path).read_text())["cells"]
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for n, line in enumerate("".join(cell["source"]).splitlines(), 1):
            if len(line) > limit:
                found.append((i, n, line))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--max", type=int, default=MAX, help="the longest line allowed (default 79)")
    parser.add_argument("--count", action="store_true", help="only the number of long lines per notebook")
    args = parser.parse_args(argv)
    total = 0
    for path in args.notebooks:
        found = long_lines(path, args.max)
        total += len(found)
        if not args.count:
            for cell, n, line in found:
                print(f"{path}:cell {cell}:line {n}: ({len(line)} chars) {line}")
        print(f"{path}: {len(found)} line(s) over {args.max} characters")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
