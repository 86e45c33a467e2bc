"""Explorers: a figure or table driven by sliders, live (ipywidgets) or static (precomputed frames, plain JS).

  live_explorer   -> ipywidgets (Jupyter, Colab); render runs in the kernel on every move
  static_explorer -> plain HTML + JS (the HTML book, or anywhere): every frame precomputed
`controls` maps a name to the list of values a slider steps through; `render(**values)` returns
a matplotlib Figure or an HTML string.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import re
from typing import Any, Callable, Sequence

from .display import _slug


def _frame_html(out: Any) -> str:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    if isinstance(out, Figure):
        buf = io.BytesIO()
        out.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
        plt.close(out)
        b64 = base64.b64encode(buf.getvalue()).decode()
        return f'<img alt="figure" style="max-width:100%" src="data:image/png;base64,{b64}">'
    if isinstance(out, str):
        return out
    raise ValueError(f"render must return a matplotlib Figure or an HTML string, got {type(out).__name__}")


def _check_controls(controls: dict[str, Sequence]) -> None:
    if not controls:
        raise ValueError("controls must name at least one slider")
    for name, values in controls.items():
        if len(values) < 2:
            raise ValueError(f"control {name!r} needs at least two values, got {list(values)}")


def _script_json(value: Any) -> str:
    """JSON to paste inside <script>: a frame holding "</script>" (or "<!--", "<script") would end or
    derail the script there, so their "<" is written as the JSON escape \\u003c (same string in JS)."""
    return re.sub(r"<(?=/?script|!--)", r"\\u003c", json.dumps(value), flags=re.IGNORECASE)


class StaticExplorer:
    """Sliders over precomputed frames: works in the static HTML book with no kernel and no CDN."""

    MAX_FRAMES = 64

    def __init__(self, key: str, controls: dict[str, Sequence], render: Callable[..., Any],
                 labels: dict[str, str] | None = None):
        _check_controls(controls)
        names = list(controls)
        combos = list(itertools.product(*(range(len(controls[n])) for n in names)))
        if len(combos) > self.MAX_FRAMES:
            raise ValueError(f"{len(combos)} frames is too many for a static page (at most {self.MAX_FRAMES}); "
                             "use fewer slider values")
        self.key, self.controls, self.labels = _slug(key), controls, labels or {}
        self.frames = {"-".join(map(str, c)): _frame_html(render(**{n: controls[n][i] for n, i in zip(names, c)}))
                       for c in combos}

    def _repr_html_(self) -> str:
        k = f"tl-x-{self.key}"
        names = list(self.controls)
        rows = []
        for j, name in enumerate(names):
            values = [str(v) for v in self.controls[name]]
            label = html.escape(self.labels.get(name, name))
            rows.append(
                f'<label style="display:block;margin:.2em 0">{label}: '
                f'<input type="range" min="0" max="{len(values) - 1}" step="1" value="0" data-i="{j}" '
                f'oninput="window[\'{k}_show\']()" style="vertical-align:middle;width:14em"> '
                f'<output>{html.escape(values[0])}</output></label>')
        values_js = _script_json([[str(v) for v in self.controls[n]] for n in names])
        script = (
            f"<script>var {k.replace('-', '_')}_f={_script_json(self.frames)};"
            f"function {k}_show(){{var r=document.getElementById('{k}');var v={values_js};"
            f"var s=Array.from(r.querySelectorAll('input[type=range]'));"
            f"s.forEach(function(e,i){{e.nextElementSibling.textContent=v[i][e.value]}});"
            f"r.querySelector('.tl-frame').innerHTML={k.replace('-', '_')}_f"
            "[s.map(function(e){return e.value}).join('-')];}"
            "</script>"
        ).replace(f"function {k}_show", f"window['{k}_show']=function")
        first = self.frames["-".join("0" * len(names))]
        return (f'<div class="tl-explorer" id="{k}" style="border:1px solid #c9d3e0;border-radius:6px;'
                f'padding:.6em 1em;margin:.8em 0">{"".join(rows)}<div class="tl-frame">{first}</div></div>{script}')

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n} ({len(v)} values)" for n, v in self.controls.items())
        return f"Static explorer '{self.key}': {len(self.frames)} precomputed frames over {sizes}."


def static_explorer(key: str, controls: dict[str, Sequence], render: Callable[..., Any],
                    labels: dict[str, str] | None = None) -> StaticExplorer:
    """Precompute render(**values) for every combination and show it behind HTML sliders."""
    return StaticExplorer(key, controls, render, labels)


def live_explorer(controls: dict[str, Sequence], render: Callable[..., Any], labels: dict[str, str] | None = None):
    """An ipywidgets version of the same explorer (runs `render` on every move). Works on ipywidgets 7.7 and 8."""
    import ipywidgets as widgets
    from IPython.display import HTML, display

    _check_controls(controls)
    labels = labels or {}
    sliders = {name: widgets.SelectionSlider(options=list(values), value=values[0],
                                             description=labels.get(name, name),
                                             style={"description_width": "initial"}, continuous_update=False)
               for name, values in controls.items()}
    view = widgets.HTML(value=_frame_html(render(**{n: s.value for n, s in sliders.items()})))

    def redraw(_change=None) -> None:
        view.value = _frame_html(render(**{n: s.value for n, s in sliders.items()}))

    for s in sliders.values():
        s.observe(redraw, names="value")
    return widgets.VBox([*sliders.values(), view])
