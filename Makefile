# stallscope: the two commands a fresh Debian 12 machine needs are `make demo` and `make test`.
# Both install missing Debian packages first (apt-get; root or sudo).

BUILD       ?= build
BUILD_ASAN  ?= build-asan
# Compile jobs: CPUs + 4 (ninja's own default is CPUs + 2: a compile waiting on its disk or a link
# leaves a CPU idle; and on a machine shared with other work each job is one more share of it).
# Tests at once (ctest -j; RUN_SERIAL tiers stay alone): most tests wait on the jobs, servers and
# subprocesses they start (the e2e and Python tiers used 94 s of CPU in 100 s of wall time with
# -j2 beside stress-ng, 80 s of wall time with -j3), so CPUs + 2.
JOBS        ?= $(shell echo $$(( $$(nproc) + 4 )))
TEST_JOBS   ?= $(shell echo $$(( $$(nproc) + 2 )))
CMAKE_FLAGS ?=
# Line tables only (-g1): backtraces, ASan reports and profilers still name file:line, and the
# three builds of `make test` compile about a quarter faster than with full -g.
DEBUG_INFO  ?= -g1
PY          := /usr/bin/python3

DEB_PACKAGES := build-essential cmake ninja-build pkg-config git \
  libfmt-dev libcli11-dev libsimdjson-dev nlohmann-json3-dev zlib1g-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  python3 python3-dev python3-venv python3-pip pybind11-dev python3-torch python3-numpy procps time clang-format \
  clang-14 libclang-rt-14-dev lld-14 \
  libncurses-dev libcairo2-dev chromium tmux \
  prometheus-cpp-dev prometheus wrk

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build build-demo build-asan build-release-tiers wheel dist demo check test \
  test-release test-asan test-dist gpu-check format-check bench verdicts overhead trace-bench \
  format clean fuzz

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Browser libraries (web/package.json, pinned by web/package-lock.json) from the npm registry,
	@# embedded into the binary at build time; npm itself from Debian when the machine has none.
	@if [ ! -f web/node_modules/uplot/dist/uPlot.iife.min.js ]; then \
	  command -v npm >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends npm; }; \
	  npm ci --prefix web --no-audit --no-fund --loglevel=error; \
	fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $(DEBUG_INFO) -DNDEBUG" $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The platform wheel (docs/install.md): the bundle's binaries and libraries inside the Python
# package, a `stallscope` command on the venv's PATH; py3-none-manylinux_2_<N>_<machine>, N the
# glibc floor make_dist.sh measured. Offline: python -m pip install --no-index $(BUILD)/dist/*.whl
# (The package-only wheel, for a job's own environment, is in the bundle's lib/stallscope/.)
wheel: dist
	$(PY) python/make_wheel.py --package $(BUILD)/python/stallscope \
	  --bundle "$$(echo $(BUILD)/stage/stallscope-*)" --out $(BUILD)/dist --force

# The relocatable bundle (README "Bundle"): this build's binaries (linked for it: the C++
# runtime, fmt and zlib inside) and Python package, assembled by tools/make_dist.sh →
# $(BUILD)/stallscope-<version>-linux-<machine>.tar.gz
dist: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target stallscope stallscope_python demo_gpu
	tools/make_dist.sh $(BUILD)

# The ASan+UBSan build uses clang 14 where it is installed (`make deps` installs it): then it also
# has the libFuzzer harnesses (tests/fuzz), run 10 s each by test-asan. ASAN_CC= ASAN_CXX= gives
# the default compiler (no harnesses). An existing $(BUILD_ASAN) keeps its compiler: remove it.
# It links with lld where clang has it (ld.lld-14): ASan binaries link 5x faster than with ld.bfd
# (report_test 8.6 → 1.7 s of CPU; the ~60 links of the build 90 s → ~20 s).
ASAN_CC  ?= $(shell command -v clang-14)
ASAN_CXX ?= $(shell command -v clang++-14)
ASAN_LLD := $(if $(ASAN_CXX),$(if $(shell command -v ld.lld-14),-fuse-ld=lld-14))
ASAN_CONFIGURE = $(if $(ASAN_CXX),CC=$(ASAN_CC) CXX=$(ASAN_CXX)) cmake -S . -G Ninja \
	  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=$(DEBUG_INFO)" \
	  -DSTALLSCOPE_SANITIZE=ON $(if $(ASAN_LLD),-DCMAKE_EXE_LINKER_FLAGS=$(ASAN_LLD) \
	  -DCMAKE_SHARED_LINKER_FLAGS=$(ASAN_LLD)) \
	  -DSTALLSCOPE_BUILD_PYTHON=OFF -DSTALLSCOPE_BUILD_BENCH=OFF $(CMAKE_FLAGS)
$(BUILD_ASAN)/build.ninja:
	$(ASAN_CONFIGURE) -B $(BUILD_ASAN)

build-asan: deps $(BUILD_ASAN)/build.ninja
	cmake --build $(BUILD_ASAN) -j $(JOBS)

# The main job on a built-in default: a snapshot, a 10 s recording and its summary, then a
# data-bound PyTorch training under `stallscope run` with its verdict, and the same training
# with the recommended fix: measured speed-up beside the predicted one. In between, `trace` on a
# real torch.profiler trace (checked in). It builds what it runs and nothing else (issue 41:
# `build` compiled every test binary first): the two binaries, the Python package the job's
# hooks come from (without its optional extension _core: the hooks record through ctypes), and
# the demo GPUs (`top --demo`: the GPU view on a machine without one).
DEMO_TARGETS := stallscope stallscope_python_package demo_gpu
build-demo: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)

demo: build-demo
	./$(BUILD)/stallscope top --once
	./$(BUILD)/stallscope top --once --demo
	./$(BUILD)/stallscope record -i 500ms --duration 10s --force -o $(BUILD)/demo.jsonl
	./$(BUILD)/stallscope summary $(BUILD)/demo.jsonl
	./$(BUILD)/stallscope report $(BUILD)/demo.jsonl --html $(BUILD)/demo.html --force
	./$(BUILD)/stallscope trace tests/data/traces/steps_torch113_cpu.json
	examples/demo_fix.sh $(BUILD) 60

# Test tiers are CTest labels (CMakeLists.txt, stallscope_test): unit, golden, e2e, job (real
# PyTorch jobs, one at a time), job-extra (more of them, on demand: ctest -L job-extra), release
# (in-process tests of the optimized build only: sizes and speeds, allocation counts), python,
# py-matrix (pyenv's interpreters), dist, fuzz.
# The fast tier while you work: in-process unit tests and the goldens (recorded inputs held to
# checked-in outputs; no job runs). Under 3 minutes on a 2-CPU VM once built.
check: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -L '^(unit|golden)$$'

# The whole suite, every test once in the build that checks it best: in the optimized build
# (what users run) every tier but unit, dist and job-extra, then the bundle and the wheel; under
# ASan+UBSan the in-process unit tests, the goldens, the binary's e2e tests and the fuzz harnesses
# (not the Python tiers: the Python extension cannot load a sanitized runtime into Debian's
# python3, so the jobs would run without their hooks).
# Every tier runs even when one before it failed, each logged in $(BUILD)/test-logs/TIER.log;
# then one summary of every failure (tools/test_tiers.sh), and a non-zero exit if any.
TEST_TIERS := format-check test-release test-dist test-asan
test:
	+@MAKE="$(MAKE)" tools/test_tiers.sh $(BUILD)/test-logs $(TEST_TIERS)

format-check: deps
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror

# The optimized build without the binaries of unit tests alone (CMakeLists.txt release_tiers):
# test-asan builds and runs those. Tiers named with -L, not left out with -LE: the tests of a
# binary not built are one unlabelled `<binary>_NOT_BUILT` test each, which would fail.
build-release-tiers: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target release_tiers

test-release: build-release-tiers
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -L '^(golden|e2e|job|release|python|py-matrix)$$'

# The bundle unpacked and run as on another machine (tests/e2e/dist_e2e_test.cc), and the
# platform wheel installed into a fresh venv of every local interpreter
# (python/tests/test_platform_wheel.py).
test-dist: build-release-tiers wheel
	cd $(BUILD) && STALLSCOPE_DIST_TARBALL="$$(echo $(abspath $(BUILD))/stallscope-*.tar.gz)" \
	  STALLSCOPE_PLATFORM_WHEEL="$$(echo $(abspath $(BUILD))/dist/stallscope-*-manylinux_*.whl)" \
	  ctest --output-on-failure -j $(TEST_JOBS) -L dist

# Under the sanitizers: the C++ tiers and the fuzz harnesses; the `release` tier (sizes and speeds)
# is not run here. Nor, for the same reason, three e2e tests of size: `trace` on the reference
# traces in full (16 and 10 s under ASan beside stress-ng) and on a 320 MiB gzip bomb (17 s;
# ReadTraceLimits.GzipBombOfWhitespaceHoldsNoBuffer runs the same reader on it here). The same
# readers still run here on HTA traces (HtaExpected*, HtaTraces.*), on cuts at every byte and in
# the fuzz harnesses.
ASAN_SKIP := TraceE2e\.HtaCompatMatchesExpectedTemporalBreakdown|TraceE2e\.VerdictsOnReferenceTraces
ASAN_SKIP := $(ASAN_SKIP)|TraceE2e\.GzipBombOfWhitespaceIsReadInBoundedMemory
test-asan: build-asan
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(TEST_JOBS) -L '^(unit|golden|e2e|fuzz)$$' -E '^($(ASAN_SKIP))$$'

# Every libFuzzer harness (tests/fuzz/README.md) for FUZZ_RUNS inputs, one after another, on a
# corpus seeded afresh from tests/data in $(BUILD_FUZZ)/tests/fuzz/corpus; crashes are saved
# in $(BUILD_FUZZ)/tests/fuzz/corpus/artifacts. A build of its own: the ASan build's flags (clang
# needed, see above) plus coverage instrumentation of the libraries the harnesses read with
# (STALLSCOPE_FUZZ_COVERAGE), which guides libFuzzer; only the harnesses are built there.
BUILD_FUZZ ?= build-fuzz
FUZZ_RUNS  ?= 1000000
$(BUILD_FUZZ)/build.ninja:
	$(ASAN_CONFIGURE) -B $(BUILD_FUZZ) -DSTALLSCOPE_FUZZ_COVERAGE=ON
fuzz: deps $(BUILD_FUZZ)/build.ninja
	@test -f $(BUILD_FUZZ)/tests/fuzz/CTestTestfile.cmake || \
	  { echo "fuzz: $(BUILD_FUZZ) is not a clang build; rm -rf $(BUILD_FUZZ) and install clang-14"; exit 1; }
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_harnesses
	@for h in trace recording run_dir run_analysis proc nvml_scenario pystack; do \
	  log=$(BUILD_FUZZ)/tests/fuzz/$$h.log; \
	  tests/fuzz/run_fuzz.sh $(BUILD_FUZZ)/tests/fuzz/$${h}_fuzz $(BUILD_FUZZ)/tests/fuzz/corpus/$$h \
	    -runs=$(FUZZ_RUNS) >$$log 2>&1 || { tail -60 $$log; echo "fuzz: $$h failed (log: $$log)"; exit 1; }; \
	  grep -E 'seeds$$|^Done|stat::number_of_executed_units|stat::average_exec_per_sec' $$log; \
	done

# On a machine with an NVIDIA GPU and a CUDA PyTorch (README "GPU check"); needs no build tools
# there (the bundle has the same as bin/stallscope-gpu-check). Here: "no NVIDIA GPU", exit 3.
# GPU_CHECK_FLAGS: --stallscope PATH, --python PATH, --out DIR, --quick.
gpu-check:
	python3 tools/gpu_check.py $(GPU_CHECK_FLAGS)

bench: build
	./$(BUILD)/src/gpu/gpu_bench || true
	./$(BUILD)/src/host/host_bench || true
	./$(BUILD)/bench/reader_bench || true
	$(PY) bench/verdict_table.py $(BUILD)/stallscope

# The verdict and the step ledger of every recorded run (tests/data/runs, tests/data/repeat, the
# H100 gpu-check in ../shared) in one table; fails when a run with steady steps has no verdict.
verdicts: build
	$(PY) bench/verdict_table.py $(BUILD)/stallscope

overhead: build
	bench/overhead.sh $(BUILD)

# `stallscope trace` speed and memory (generates a multi-GB synthetic trace set under $TMPDIR).
trace-bench: build
	STALLSCOPE=$(BUILD)/stallscope bench/trace_bench.sh

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
