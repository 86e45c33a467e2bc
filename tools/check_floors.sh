#!/usr/bin/env bash
# The lower bounds pyproject.toml declares, tested: a venv with exactly the floor versions (and the pinned
# torch: its floor, 2.5, is justified in docs/pythons.md rather than tested), then `make unit`. transformers is not
# installed (it needs newer versions than these floors), so the tests that compare with it fail here.
#
# Usage: tools/check_floors.sh PYTHON VENV [TORCH]   e.g. tools/check_floors.sh python3.11 /tmp/floors torch==2.13.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: tools/check_floors.sh PYTHON VENV [TORCH]}
VENV=${2:?usage: tools/check_floors.sh PYTHON VENV [TORCH]}
TORCH=${3:-torch==2.13.0}
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$TORCH" numpy==1.24.0 matplotlib==3.7.0 ipywidgets==7.7.0 tqdm==4.60.0 \
  safetensors==0.4.0 gguf==0.19.0 regex==2023.3.22 pytest==9.2.0 hypothesis==6.170.17 nbval==0.11.0 pyyaml
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -m pip list 2>/dev/null | grep -E "^(torch|numpy|matplotlib|ipywidgets|tqdm|safetensors|gguf|regex) "
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "not e2e and not slow" tests --ignore=tests/test_reference_extras.py
