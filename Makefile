# The two Quick start commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PREPKIT := $(VENV)/bin/prepkit
DEMO_OUT := out/demo
DEMO_LAYOUTS ?= raw jpeg lossless

.PHONY: demo test test-fast test-cudasim setup fuzz bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,bench]" "torch==2.13.0"
	touch $@

setup: $(VENV)/.installed

# Shard the bundled sample photographs into every layout, describe each store, then
# compare decoders on them.
demo: setup
	rm -rf $(DEMO_OUT)
	@for layout in $(DEMO_LAYOUTS); do \
	  echo "== prepkit shard samples/photos $(DEMO_OUT)/$$layout --layout $$layout"; \
	  $(PREPKIT) shard samples/photos $(DEMO_OUT)/$$layout --layout $$layout --samples-per-shard 8 --workers 2 || exit 1; \
	  $(PREPKIT) inspect $(DEMO_OUT)/$$layout || exit 1; \
	done

# The whole suite. CUDA kernels run under numba's simulator, which must be switched on
# before numba is first imported, so those tests run in their own pytest process.
test: setup
	$(PY) -m pytest -q tests --ignore=tests/cudasim
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q tests/cudasim

test-fast: setup
	$(PY) -m pytest -q -x tests --ignore=tests/cudasim

test-cudasim: setup
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q tests/cudasim

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
