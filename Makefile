# The two Quick start commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PREPKIT := $(VENV)/bin/prepkit
DEMO_OUT := out/demo
DEMO_LAYOUTS ?= raw jpeg lossless

.PHONY: demo test test-fast test-cudasim setup fuzz bench evalsets bench-lossless clean

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
	$(PREPKIT) verify $(DEMO_OUT)/lossless --decode
	@echo "== prepkit bench-decode (the bundled sample photos, every format side by side)"
	$(PREPKIT) bench-decode --repeat 3 --json $(DEMO_OUT)/bench.json --plot $(DEMO_OUT)/bench.png

# The whole suite. CUDA kernels run under numba's simulator, which must be switched on
# before numba is first imported, so those tests run in their own pytest process.
test: setup
	$(PY) -m pytest -q tests --ignore=tests/cudasim
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q tests/cudasim

test-fast: setup
	$(PY) -m pytest -q -x tests --ignore=tests/cudasim

test-cudasim: setup
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q tests/cudasim

# Long runs, not part of `make test`: the fuzz harness and the benchmarks of docs/BENCHMARKS.md.
FUZZ_SECONDS ?= 600
fuzz: setup
	$(PY) -m prepkit.fuzz --seconds $(FUZZ_SECONDS)

bench: setup
	$(PY) -m prepkit.bench.reads
	$(PY) -m prepkit.bench.codec --threads 1
	$(PY) -m prepkit.bench.codec --threads 2
	$(PY) -m prepkit.bench.augment
	$(PY) -m prepkit.bench.crop
	$(PY) -m prepkit.bench.reader
	$(PY) recipes/l3_comparison.py --out out/l3

# The lossless evaluation sets (docs/BENCHMARKS.md, "Evaluation sets"): the wallpaper packages are
# installed with apt-get when run as root; without them the sets hold scikit-image's and rendered
# images only, and the builder names the missing packages.
EVALSETS ?= out/evalsets
EVALSETS_MAX ?= 40
WALLPAPER_PACKAGES := gnome-backgrounds plasma-workspace-wallpapers lomiri-wallpapers ukui-wallpapers
evalsets: setup
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(WALLPAPER_PACKAGES); \
	else echo "not root: using the wallpaper packages already installed"; fi
	rm -rf $(EVALSETS)
	$(PY) -m prepkit.bench.evalsets build $(EVALSETS) --max-per-set $(EVALSETS_MAX)

# Size and decode speed of every lossless format on the evaluation sets (run `make evalsets` first).
LOSSLESS_REPEAT ?= 5
bench-lossless: setup
	$(PY) -m prepkit.bench.lossless_eval $(EVALSETS) --threads 1 2 --repeat $(LOSSLESS_REPEAT) \
	  --json out/lossless-eval.json --markdown out/lossless-eval.md

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
