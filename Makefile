# AMP-MLIR: the two commands.
#   make demo   set up, build, and run the main job
#   make test   set up, build, and run every test suite under ctest
BUILD ?= build
CMAKE_FLAGS ?=
# The sanitizer build (clang-22, ASan + UBSan, the fuzzers; CUDA off): its
# tests are part of `make test` (ctest sanitize-*, fuzz-*).
ASAN_BUILD ?= $(BUILD)-asan
# Fuzzing time per fuzzer for `make fuzz`, in seconds.
FUZZ_TIME ?= 900
# ccache keys on paths relative to the checkout: a fresh clone elsewhere
# reuses the objects another checkout compiled.
export CCACHE_BASEDIR := $(CURDIR)
# (and the sanitizer build's -g1 would otherwise key its objects on the
# build folder's absolute path)
export CCACHE_NOHASHDIR := 1

.PHONY: demo test build setup configure clean bench-deps docs asan fuzz format

setup:
	@scripts/setup.sh

configure: setup
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja \
	    -DCMAKE_BUILD_TYPE=Release \
	    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
	    -DCMAKE_C_COMPILER_LAUNCHER=ccache \
	    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
	    -DPython3_EXECUTABLE=$(CURDIR)/.venv/bin/python \
	    $(CMAKE_FLAGS); \
	fi

build: configure
	@cmake --build $(BUILD)

# ASan + UBSan with clang-22: every tool, the runtime, the unit tests and the
# fuzzers (make fuzz runs them). Each sanitizer report aborts.
asan: setup
	@if [ ! -f $(ASAN_BUILD)/build.ninja ]; then \
	  cmake -S . -B $(ASAN_BUILD) -G Ninja \
	    -DCMAKE_BUILD_TYPE=Release \
	    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	    -DAMP_SANITIZE=address,undefined -DAMP_FUZZ=ON -DAMP_ENABLE_CUDA=OFF \
	    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
	    -DCMAKE_C_COMPILER_LAUNCHER=ccache \
	    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
	    -DPython3_EXECUTABLE=$(CURDIR)/.venv/bin/python; \
	fi
	@cmake --build $(ASAN_BUILD)

# Every fuzzer for FUZZ_TIME seconds (make fuzz FUZZ_TIME=60), one after the
# other; FUZZ_JOBS=N forks N workers each.
fuzz: asan
	@scripts/fuzz.sh $(ASAN_BUILD) $(FUZZ_TIME)

demo: build
	@scripts/demo.sh $(BUILD)

# The suites run side by side, one per core (-j; JOBS=1 for one at a time).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: build asan
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# docs/passes.md and docs/dialect.md from the .td files (ctest docs-up-to-date).
docs:
	@scripts/gen-docs.sh

# The peers of the benchmarks in bench/ (TVM, onnxruntime): optional. And
# torchvision's model definitions for bench/torchvision_zoo.py, without its
# dependencies (its wheels pin an older torch than the venv's; the models
# are Python and need none of torchvision's compiled ops).
# clang-format the C++ / CUDA sources in place (ctest clang-format checks them).
format:
	scripts/check-format.sh --fix

bench-deps: setup
	.venv/bin/python -m pip install -q -r bench/requirements.txt
	.venv/bin/python -c 'import torchvision' 2>/dev/null || .venv/bin/python -m pip install -q --no-deps torchvision==0.29.2

clean:
	rm -rf $(BUILD)
