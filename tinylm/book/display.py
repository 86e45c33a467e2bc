"""What a chapter shows beside its prose: glued numbers, the plot style, tables, element ids from keys."""

from __future__ import annotations

import html
import re
from typing import Any, Sequence


# ---------------------------------------------------------------------------------------------
# Glue: numbers computed in a chapter, used in its prose
# ---------------------------------------------------------------------------------------------
class Timed(float):
    """A number measured with a clock. Its text form carries a trailing `# timed` comment, which
    `{glue:text}` drops (it reads the number back with `ast.literal_eval`) and `nbval_sanitize.cfg` masks: a
    re-executed chapter is compared on every glued number except the timings, which differ from run to run."""

    def __repr__(self) -> str:
        return f"{float(self)!r}  # timed"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:      # IPython's text/plain
        p.text(repr(self))


class Approx(float):
    """A float glued for the prose. Its last digits depend on the CPU's arithmetic (the order a vectorised kernel
    sums in), so its text form is the full value and, after `# ~`, two significant digits: nbval_sanitize.cfg
    masks the full value and nbval compares the two digits, which no CPU changes (the rule: docs/testing.md)."""

    def __repr__(self) -> str:
        return f"{float(self)!r}  # ~{float(self):.2g}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


class Varies:
    """A glued value that a run produces (a trained model's loss, a count from sampling): another CPU follows
    another trajectory, so nbval compares none of it (its text ends in `# varies`, which nbval_sanitize.cfg
    masks); the cell that glues it asserts the claim the prose makes of it instead."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"{self.value!r}  # varies"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))

    def _repr_markdown_(self) -> str | None:
        """A glued Markdown (`{glue:md}`): its text, then an HTML comment (which the page does not show) that
        nbval_sanitize.cfg masks the line by."""
        markdown = getattr(self.value, "_repr_markdown_", None)
        return None if markdown is None else f"{markdown()}  <!-- varies -->"


def glue(name: str, value: Any, display: bool = False, timed: bool = False, varies: bool = False) -> None:
    """myst-nb's `glue` when it is installed (building the book, running the tests); elsewhere (Colab) the
    value has no page to go to, so it is only shown when display=True. timed: the value is a measured time or
    rate (glued as a `Timed` number, which nbval does not compare). varies: the value comes from a run whose
    trajectory depends on the CPU (glued as `Varies`, not compared: assert its claim in the cell). Any other
    float is glued as `Approx`: nbval compares its first two significant digits."""
    if timed and varies:
        raise ValueError(f"glue {name!r}: pass timed=True or varies=True, not both")
    shown = value
    if isinstance(value, (Timed, Approx, Varies)):
        pass
    elif timed:
        value = Timed(value)
    elif varies:
        value = Varies(value)
    elif isinstance(value, float) or type(value).__name__ in ("float32", "float16", "float64"):
        value = Approx(value)
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            from IPython.display import display as show

            show(shown)
        return
    myst_glue(name, value, display=display)


# ---------------------------------------------------------------------------------------------
# Plot style
# ---------------------------------------------------------------------------------------------
def plot_style() -> None:
    """One look for every figure of the course (call once per chapter)."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": (6.4, 3.6), "figure.dpi": 100, "savefig.dpi": 100,
        "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
        "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9, "font.size": 10,
        "svg.hashsalt": "tinylm",  # deterministic SVG ids
    })


def _slug(key: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", key).strip("-").lower()
    if not slug:
        raise ValueError(f"key must contain letters or digits, got {key!r}")
    return slug


# ---------------------------------------------------------------------------------------------
# Tables: aligned text for nbval and notebooks, an HTML table in the book
# ---------------------------------------------------------------------------------------------
class Table:
    """rows of cells under headers; numbers are formatted by the caller (so what is printed is what is meant)."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = ""):
        if any(len(r) != len(headers) for r in rows):
            raise ValueError(f"every row needs {len(headers)} cells, one per header")
        blank = [i for i, h in enumerate(headers) if not str(h).strip()]
        if blank:
            # a screen reader announces each cell by its column's header (axe: empty-table-header)
            raise ValueError(f"column(s) {blank} have an empty header: name every column, e.g. 'measure'")
        self.headers, self.rows, self.title = [str(h) for h in headers], [[str(c) for c in r] for r in rows], title

    def __repr__(self) -> str:
        widths = [max(len(x) for x in col) for col in zip(self.headers, *self.rows)]
        fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        lines = ([self.title] if self.title else []) + [fmt(self.headers), fmt(["-" * w for w in widths])]
        return "\n".join(lines + [fmt(r) for r in self.rows])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f'<table class="tl-table">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> Table:
    """Show rows as a table; leave it as the last expression of a cell."""
    return Table(headers, rows, title)


def millions(n: int | float, digits: int = 1) -> str:
    """63_910_656 -> '63.9M'."""
    return f"{n / 1e6:.{digits}f}M"
