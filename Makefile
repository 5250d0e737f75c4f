# AMP-MLIR: the two commands.
#   make demo   set up, build, and run the main job
#   make test   set up, build, and run every test suite under ctest
BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: demo test build setup configure clean bench-deps docs

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

demo: build
	@scripts/demo.sh $(BUILD)

# The suites run side by side, one per core (-j; JOBS=1 for one at a time).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# docs/passes.md and docs/dialect.md from the .td files (ctest docs-up-to-date).
docs:
	@scripts/gen-docs.sh

# The peers of the benchmarks in bench/ (TVM, onnxruntime): optional. And
# torchvision's model definitions for bench/torchvision_zoo.py, without its
# dependencies (its wheels pin an older torch than the venv's; the models
# are Python and need none of torchvision's compiled ops).
bench-deps: setup
	.venv/bin/python -m pip install -q -r bench/requirements.txt
	.venv/bin/python -c 'import torchvision' 2>/dev/null || .venv/bin/python -m pip install -q --no-deps torchvision==0.29.2

clean:
	rm -rf $(BUILD)
