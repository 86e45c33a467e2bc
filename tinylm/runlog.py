"""The run logs of tools/sweep.py, ablate.py and isoflop.py: one JSON line per run, '#' lines are comments.

    read_log(path, ...)   the runs of one or more logs, in order (a missing file: ValueError, or none)
    RUNS                  where the shipped logs are: tinylm/data/runs/
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = Path(__file__).parent / "data" / "runs"


def read_log(*paths: str | Path, missing_ok: bool = False) -> list[dict]:
    """The runs of the logs at paths, file after file (with missing_ok, a missing file holds none)."""
    if not paths:
        raise ValueError("read_log needs at least one log file")
    rows: list[dict] = []
    for path in map(Path, paths):
        if not path.is_file():
            if missing_ok:
                continue
            raise ValueError(f"no run log at {path}: run the tool that writes it, or give another path")
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.startswith("#"):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    row = None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}, line {n} is not a JSON run line; remove it or use another log")
                rows.append(row)
    return rows
