"""Sphinx fixes for the tinylm book's HTML (loaded by _config.yml: sphinx.local_extensions).

Sphinx 7.4 (the last Sphinx Jupyter Book 1 supports) writes twice any inline script that an extension
adds after the builder has started: once registered with filename None, once re-added with filename ''
(sphinx/builders/html/__init__.py, prepare_writing), and the two do not compare equal. sphinx-thebe adds
`const THEBE_JS_URL = ...` that way, so every page threw "Identifier 'THEBE_JS_URL' has already been
declared"; sphinx-togglebutton's selector was written twice too. Each page here keeps the first copy of
every script and stylesheet, so the page is what the extensions meant to write.
"""

from __future__ import annotations

from typing import Any


def _key(asset: Any) -> tuple:
    if isinstance(asset, str):
        return (asset, 500, ())
    attributes = tuple(sorted((k, str(v)) for k, v in getattr(asset, "attributes", {}).items()))
    return (getattr(asset, "filename", None) or "", getattr(asset, "priority", 500), attributes)


def _dedupe(assets: list) -> None:
    seen: set[tuple] = set()
    kept = []
    for asset in assets:
        key = _key(asset)
        if key not in seen:
            seen.add(key)
            kept.append(asset)
    assets[:] = kept  # in place: the builder restores its own list after each page


def dedupe_assets(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    for name in ("script_files", "css_files"):
        if isinstance(context.get(name), list):
            _dedupe(context[name])


def setup(app) -> dict:
    app.connect("html-page-context", dedupe_assets, priority=900)  # after every extension has added its own
    return {"parallel_read_safe": True, "parallel_write_safe": True}
