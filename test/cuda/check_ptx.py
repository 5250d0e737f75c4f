#!/usr/bin/env python3
"""ctest cuda-ptx-16-byte-access: the 16-byte accesses are really in the code.

The emulated tests run the kernels' host twins, where a 16-byte load is a
memcpy; whether nvcc made the device code use 128-bit loads and stores (and
kept the groups in registers, not in local memory) only shows in the PTX.
This compiles the backend (runtime/lib/cuda/*.cu) to PTX for sm_90 with the library's
flags and checks, kernel by kernel:
  - every grouped element-wise kernel (Vec8F<N, Op>): two ld.global.v4 per
    operand (an f32 group's two halves), two st.global.v4, no local memory;
  - the reduction (ReduceF): two ld.global.v4 (its dense-run path);
  - the multi-tensor unscale_and_check (UnscaleF): ld.global.v4 and
    st.global.v4;
  - the kernels that record a device error (a bad label or index, a
    division by zero) claim the record with an atomic compare-and-swap
    (atom.global.cas): many threads may find an error at once;
  - in the sources: the context's code makes no call on the legacy default
    stream (cudaMemcpy, cudaMemset, cudaDeviceSynchronize: not ordered with
    the context's non-blocking stream); check_kernels.cu, the checker's API, runs
    on the legacy stream throughout and is left out.
usage: check_ptx.py NVCC SOURCE_DIR BINARY_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

nvcc, src, build = sys.argv[1:4]
failures, passes = [], 0


def check(ok, what):
    global passes
    if ok:
        passes += 1
        print(f"ok    {what}", flush=True)
    else:
        failures.append(what)
        print(f"FAIL  {what}", flush=True)


sources = sorted(f for f in os.listdir(os.path.join(src, "runtime/lib/cuda")) if f.endswith(".cu"))
text = ""
with tempfile.TemporaryDirectory() as tmp:
    for name in sources:
        ptx = os.path.join(tmp, name + ".ptx")
        cmd = [nvcc, "-ptx", "-arch=compute_90", "-O3", "-DNDEBUG", "-std=c++17", "-fmad=false",
               "-DAMPRT_CUDA_LIB_DIR=\"/usr/local/cuda/lib64\"",
               f"-I{src}/include", f"-I{build}/include", f"-I{src}/runtime/include",
               f"-I{src}/runtime/lib",
               os.path.join(src, "runtime/lib/cuda", name), "-o", ptx]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"nvcc failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
            sys.exit(1)
        text += open(ptx).read() + "\n"
check(len(sources) >= 10, f"{len(sources)} CUDA sources compiled to PTX")

kernels = {}
for m in re.finditer(r"\.entry (\S+)\((.*?)\n\}", text, re.S):
    kernels[m.group(1)] = m.group(0)


def stats(body):
    return (len(re.findall(r"ld\.global(?:\.nc)?\.v4\.", body)), len(re.findall(r"st\.global\.v4\.", body)),
            len(re.findall(r"\.local|ld\.local|st\.local", body)))


vec = {k: v for k, v in kernels.items() if "Vec8F" in k}
check(len(vec) >= 4, f"{len(vec)} grouped element-wise kernels (unary, its gradient, binary, cast: 4 expected)")
for name, body in sorted(vec.items()):
    m = re.search(r"Vec8FILi(\d)ENS\d_(\d+)", name)  # then the op's name, its length first
    label = f"Vec8F<{m.group(1)}, {name[m.end():m.end() + int(m.group(2))]}>" if m else name[:60]
    # Per operand, the f32 path's two 16-byte loads (the first one also the
    # f16 / bf16 path's), the same for the store.
    nin = int(m.group(1)) if m else 1
    ld, st, local = stats(body)
    check(ld >= 2 * nin and st >= 2 and local == 0,
          f"{label}: {ld} 16-byte loads, {st} 16-byte stores, {local} local-memory uses "
          f"(want >= {2 * nin}, >= 2, 0)")
for tag, want_ld, want_st in (("7ReduceF", 2, 0), ("8UnscaleF", 1, 1)):
    found = [b for k, b in kernels.items() if tag in k and "eachKernel" in k]
    ld, st, _ = stats(found[0]) if found else (0, 0, 0)
    check(bool(found) and ld >= want_ld and st >= want_st,
          f"{tag[1:]}: {ld} 16-byte loads, {st} 16-byte stores (want >= {want_ld}, >= {want_st})"
          + ("" if found else " (kernel not found)"))

# The error record is claimed with atom.cas by the kernels that can record
# one (labels, indices, integer division, ...), never by plain stores.
cas_kernels = [k for k, b in kernels.items() if re.search(r"atom(?:\.global)?\.cas\.b32", b)]
check(len(cas_kernels) >= 3,
      f"{len(cas_kernels)} kernels claim the device error record with atom.cas (want >= 3: labels, "
      f"indices, integer division)")

legacy = []
for name in sources:
    if name == "check_kernels.cu":
        continue
    for i, line in enumerate(open(os.path.join(src, "runtime/lib/cuda", name)), 1):
        code = line.split("//")[0]
        if re.search(r"\b(cudaMemcpy|cudaMemset|cudaDeviceSynchronize)\(", code):
            legacy.append(f"{name}:{i}")
check(not legacy, "no legacy-stream call in the context's code"
      + (f" (found: {', '.join(legacy)})" if legacy else ""))

print(f"{passes} passed, {len(failures)} failed")
sys.exit(1 if failures or not passes else 0)
