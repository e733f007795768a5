# The two Quick start commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PREPKIT := $(VENV)/bin/prepkit
DEMO_OUT := out/demo
DEMO_LAYOUTS ?= raw jpeg lossless

.PHONY: demo test test-fast test-cudasim lint setup fuzz bench compile-audit evalsets bench-lossless gpu-wheels gpu-install gpu-correct gpu-bench gpu-check clean

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
	@echo "== prepkit warmup (compile the CPU kernels once; later commands load them from numba's cache)"
	$(PREPKIT) warmup
	@for layout in $(DEMO_LAYOUTS); do \
	  echo "== prepkit shard samples/photos $(DEMO_OUT)/$$layout --layout $$layout"; \
	  $(PREPKIT) shard samples/photos $(DEMO_OUT)/$$layout --layout $$layout --samples-per-shard 8 --workers 2 || exit 1; \
	  $(PREPKIT) inspect $(DEMO_OUT)/$$layout || exit 1; \
	done
	$(PREPKIT) verify $(DEMO_OUT)/lossless --decode
	@echo "== prepkit bench-decode (the bundled sample photos, every format side by side)"
	$(PREPKIT) bench-decode --repeat 3 --json $(DEMO_OUT)/bench.json --plot $(DEMO_OUT)/bench.png

# The whole suite. CUDA kernels run under numba's simulator, which must be switched on
# before numba is first imported, so those tests run in their own pytest process. The two
# processes run side by side (each is mostly one thread; the simulator suite is the longer),
# the simulator's output is printed when both are done; make fails if either fails. Both
# use the CPU kernels: `prepkit warmup` compiles them once first (its parts on both cores),
# where each suite would otherwise compile them on its own in its first minutes.
SIM_LOG := out/test-cudasim.log
test: setup lint
	@mkdir -p out
	@echo "== prepkit warmup (the CPU kernels compiled once, into numba's cache, for both suites)"
	$(PREPKIT) warmup
	@NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q --durations=10 tests/cudasim > $(SIM_LOG) 2>&1 & sim=$$!; \
	echo "== main suite (the CUDA simulator suite runs beside it, output in $(SIM_LOG))"; \
	$(PY) -m pytest -q --durations=10 tests --ignore=tests/cudasim; main=$$?; \
	wait $$sim; simulated=$$?; \
	echo "== CUDA simulator suite"; cat $(SIM_LOG); \
	if [ $$main -ne 0 ] || [ $$simulated -ne 0 ]; then echo "make test: main suite exit $$main, simulator suite exit $$simulated"; exit 1; fi

# Lint and types: ruff over the code and tests, mypy over the package (configuration in
# pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check prepkit tests recipes
	$(VENV)/bin/mypy

# One suite each, after the same warm-up as `make test` (a few seconds once the cache is full).
test-fast: setup
	$(PREPKIT) warmup
	$(PY) -m pytest -q -x tests --ignore=tests/cudasim

test-cudasim: setup
	$(PREPKIT) warmup
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q tests/cudasim

# Long runs, not part of `make test`: the fuzz harness and the benchmarks of docs/BENCHMARKS.md.
FUZZ_SECONDS ?= 600
fuzz: setup
	$(PY) -m prepkit.fuzz --seconds $(FUZZ_SECONDS)

# The CPU kernels' cold compile, part by part, each in a new process with an empty numba cache
# (about 4 minutes on the dev VM); exits 1 when a kernel was compiled for two signatures.
compile-audit: setup
	$(PY) -m prepkit.bench.compile_audit --json out/compile-audit.json

bench: setup
	$(PY) -m prepkit.bench.reads
	$(PY) -m prepkit.bench.codec --threads 1
	$(PY) -m prepkit.bench.codec --threads 2
	$(PY) -m prepkit.bench.augment
	$(PY) -m prepkit.bench.crop
	$(PY) -m prepkit.bench.reader
	$(PY) -m prepkit.bench.remote
	$(PY) -m prepkit.bench.hostprep --make-store out/hostprep --images 64 --version 2
	$(PY) -m prepkit.bench.hostprep out/hostprep/lossless --batch 64 --threads 2 --json out/hostprep.json
	$(PY) -m prepkit.bench.hostprep out/hostprep/lossless --batch 64 --threads 2 --crop 224 --json out/hostprep-crop.json
	$(PY) recipes/l3_comparison.py --out out/l3

# The GPU machine (Python 3.12, CUDA 13, torch/numba/numba-cuda/CuPy installed; no zarr and no
# nvImageCodec) cannot reach PyPI: `make gpu-wheels` here downloads what it lacks into the
# ignored .whl/, which travels with the working tree; `make gpu-check` there installs them
# into the system environment (not --target: nvImageCodec's nvidia/ package would shadow the
# image's CUDA libraries) and runs both halves. numpy 2.4 replaces the image's numpy 2.5: that
# image's numba-cuda registers np.row_stack, which numpy 2.5 removed, so `numba.cuda` fails to
# import there (seen 2026-11-26 on an H200). On the device, as two calls (together they pass
# the 600 s a call may run): `make gpu-correct`, then `make gpu-bench` (estimated from stop
# 41's and 48's parts: about 330 s and 300 s; not yet run in this form); each packs GPU_OUT
# into $OUT. `make gpu-check` runs both where time allows.
# Every device machine starts with an empty numba cache, and the CPU kernels' cold compile is
# minutes (the decoders' 142 s on one core of the dev VM since stop 49, 337 s before: stop 48's
# checks ran past their limit compiling), so both halves run `python -m prepkit.warmup` (prepkit/warmup.py) first.
# - gpu-correct: the CUDA tests on the device (eight pytest-xdist workers, test by test: 230 s
#   on the H200 machine in stop 48) beside the warm-up; then prepkit.bench.gpucheck's
#   identity, fuzz and reader stages beside compute-sanitizer; then an ncu profile of the v2
#   decode kernel;
# - gpu-bench: prepkit.bench.gpucheck's benchmarks, alone on the GPU (with stack samples of
#   the Reader's threads), then the Reader's host work on that machine (bench.hostprep).
GPU_PY ?= python3
GPU_OUT ?= out/gpucheck
GPU_BENCH_SECONDS ?= 300
GPU_RUN := PYTHONPATH=$(CURDIR) PYTHONUNBUFFERED=1
# pytest-xdist where the machine has it (the image lists it), else one process.
GPU_XDIST = $(shell $(GPU_PY) -c "import xdist" 2>/dev/null && echo "-n 8 --dist load")
# Under the device tool ($OUT set there): the whole GPU_OUT as one archive (at most 8 files come back).
GPU_PACK = if [ -n "$$OUT" ]; then tar czf "$$OUT/$@.tgz" -C $(GPU_OUT) .; fi
gpu-correct gpu-bench: SHELL := /bin/bash
gpu-correct gpu-bench: .SHELLFLAGS := -o pipefail -c
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl \
	  zarr==3.1.6 numcodecs==0.16.5 donfig==0.8.1.post1 google-crc32c==1.9.0 crc32c==2.9.post0 \
	  nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.2.3.58 qoi==0.7.2 pyspng==0.1.4 numpy==2.4.6

GPU_INSTALLED ?= /tmp/prepkit-gpu-wheels-installed
gpu-install:
	@[ -f $(GPU_INSTALLED) ] || { $(GPU_PY) -m pip install -q --no-index --no-deps --force-reinstall --no-compile \
	  --no-cache-dir .whl/*.whl && touch $(GPU_INSTALLED); }
	$(GPU_PY) -c "import numpy, numba.cuda; print('numpy', numpy.__version__, '- numba.cuda imports')"
	mkdir -p $(GPU_OUT)
	-nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current \
	  --format=csv > $(GPU_OUT)/nvidia-smi.txt

# Fails (after printing every summary) when any of its five parts failed. The tests and the
# warm-up run side by side, then the checks beside the sanitizer (about 60 s each from a warm
# cache on the H200 machine); with the tests, checks and sanitizer at once (stop 41) the checks'
# CPU decodes and memcheck ran past their limits.
gpu-correct: gpu-install
	@$(GPU_RUN) timeout 280 $(GPU_PY) -m prepkit.warmup > $(GPU_OUT)/warmup.log 2>&1 & warm=$$!; \
	$(GPU_RUN) timeout 280 $(GPU_PY) -m pytest -q $(GPU_XDIST) -p no:cacheprovider --noconftest tests/cudasim \
	  --ignore=tests/cudasim/test_simulator_active.py tests/lossless/test_ptx.py tests/augment/test_ptx.py \
	  > $(GPU_OUT)/pytest.log 2>&1; tests=$$?; \
	wait $$warm; warm=$$?; grep "^warmup" $(GPU_OUT)/warmup.log; \
	$(GPU_RUN) timeout 200 $(GPU_PY) -m prepkit.bench.gpucheck --stages sanitize --sanitize-timeout 120 \
	  --out $(GPU_OUT)/sanitize > $(GPU_OUT)/sanitize.log 2>&1 & sanitize=$$!; \
	$(GPU_RUN) timeout 200 $(GPU_PY) -m prepkit.bench.gpucheck --stages env,identity,fuzz,reader \
	  --out $(GPU_OUT)/check 2>&1 | tee $(GPU_OUT)/check.log | tail -8; checks=$$?; \
	wait $$sanitize; sanitize=$$?; \
	$(GPU_RUN) timeout 120 ncu --set basic -k regex:decode_kernel -s 1 -c 1 \
	  $(GPU_PY) -m prepkit.bench.gpucheck --child profile > $(GPU_OUT)/ncu.txt 2>&1; profile=$$?; \
	tail -3 $(GPU_OUT)/pytest.log; tail -2 $(GPU_OUT)/sanitize.log; \
	grep -E "Duration|Registers|Occupancy|Throughput" $(GPU_OUT)/ncu.txt | head -12; \
	echo "gpu-correct: tests exit $$tests, warm-up $$warm, checks $$checks, sanitizer $$sanitize, ncu $$profile"; \
	$(GPU_PACK); [ $$tests = 0 ] && [ $$warm = 0 ] && [ $$checks = 0 ] && [ $$sanitize = 0 ] && [ $$profile = 0 ]

# The benchmark alone on the GPU, then the Reader's host work on that machine's cores
# (bench.hostprep with 1, 4 and 8 gather threads).
gpu-bench: gpu-install
	@$(GPU_RUN) timeout 280 $(GPU_PY) -m prepkit.warmup | grep "^warmup"; \
	$(GPU_RUN) timeout $(GPU_BENCH_SECONDS) $(GPU_PY) -m prepkit.bench.gpucheck --stages env,bench \
	  --out $(GPU_OUT)/bench 2>&1 | tee $(GPU_OUT)/bench.log | tail -40; bench=$$?; \
	$(GPU_RUN) timeout 90 $(GPU_PY) -m prepkit.bench.hostprep --make-store /tmp/hostprep --images 64 --version 2 \
	  --batch 64 --repeat 5 --threads 1 --json $(GPU_OUT)/hostprep-1.json | tail -3; host=$$?; \
	for threads in 4 8; do $(GPU_RUN) timeout 60 $(GPU_PY) -m prepkit.bench.hostprep /tmp/hostprep/lossless-v2 \
	  --batch 64 --repeat 5 --threads $$threads --json $(GPU_OUT)/hostprep-$$threads.json | tail -3 || host=1; done; \
	echo "gpu-bench: benchmark exit $$bench, hostprep exit $$host"; \
	$(GPU_PACK); [ $$bench = 0 ] && [ $$host = 0 ]

# Both halves, the second also when the first failed; fails when either did.
gpu-check:
	@$(MAKE) --no-print-directory gpu-correct; correct=$$?; $(MAKE) --no-print-directory gpu-bench; bench=$$?; \
	echo "gpu-check: gpu-correct exit $$correct, gpu-bench exit $$bench"; [ $$correct = 0 ] && [ $$bench = 0 ]

# The lossless evaluation sets (docs/BENCHMARKS.md, "Evaluation sets"): the wallpaper packages, the
# documentation packages whose figures are the screenshots and a head CT with its masks are
# installed with apt-get when run as root; without them the sets hold scikit-image's and rendered
# images only, and the builder names the missing packages.
EVALSETS ?= out/evalsets
EVALSETS_MAX ?= 40
WALLPAPER_PACKAGES := gnome-backgrounds plasma-workspace-wallpapers lomiri-wallpapers ukui-wallpapers
SCREENSHOT_PACKAGES := gnome-user-docs gimp-help-en gnucash-docs
MEDICAL_PACKAGES := invesalius-examples
evalsets: setup
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(WALLPAPER_PACKAGES) $(SCREENSHOT_PACKAGES) $(MEDICAL_PACKAGES); \
	else echo "not root: using the wallpaper, documentation and CT packages already installed"; fi
	rm -rf $(EVALSETS)
	$(PY) -m prepkit.bench.evalsets build $(EVALSETS) --max-per-set $(EVALSETS_MAX)

# Size and decode speed of every lossless format on the evaluation sets (run `make evalsets` first),
# then v2's encode speed against PNG's and its per-image sizes.
LOSSLESS_REPEAT ?= 5
bench-lossless: setup
	$(PY) -m prepkit.bench.lossless_eval $(EVALSETS) --threads 1 2 --repeat $(LOSSLESS_REPEAT) \
	  --json out/lossless-eval.json --markdown out/lossless-eval.md --plot out/lossless-sizes.png
	$(PY) -m prepkit.bench.encode_speed $(EVALSETS) --threads 1 2 --repeat 3 --limit 12 --json out/encode-speed.json
	$(PY) -m prepkit.bench.lossless_sizes $(EVALSETS) --limit 12

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
