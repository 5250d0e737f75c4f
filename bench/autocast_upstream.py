"""amp-autocast on linalg on tensors against IREE's own demote pass, on the
same generated graphs of 1k, 10k and 100k ops, in one run.

    python bench/autocast_upstream.py [--opt build/bin/amp-opt] [--sizes 1000,10000,100000]

The graph is what torch-mlir writes for a stack of MLP blocks with a
row-softmax: per block tensor.empty, linalg.fill, linalg.matmul (weights as
function arguments), a broadcast bias add, a GELU-like element-wise generic,
a row-max and a row-sum reduction, a subtract-exp and a divide. Both passes
demote the products' inputs to bf16 and keep f32 accumulators:

  amp-opt --amp-autocast=target=bf16 (policy lookup, per-op report entries,
      casts de-duplicated and moved above data movement)
  iree-opt --pass-pipeline='builtin.module(func.func(
      iree-global-opt-demote-contraction-inputs{type=bf16 operation=all}))'

Each pass's own time comes from MLIR's --mlir-timing, with --verify-each=false
for both (a module pass's timer includes the verifier run after it, a pass
nested in func.func's does not: without the flag the two numbers would not
measure the same thing); parsing and printing are excluded. The table gives
microseconds per op and IREE's time over ours (above 1: ours is faster).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import results  # bench/results.py: the table into docs/results.md

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.join(HERE, "..", ".venv", "bin")
BLOCK_OPS = 12  # top-level ops per block below


def make_mlir(n_ops, d=32, b=8):
    blocks = max(1, n_ops // BLOCK_OPS)
    t, w, v, r = (f"tensor<{b}x{d}xf32>", f"tensor<{d}x{d}xf32>", f"tensor<{d}xf32>",
                  f"tensor<{b}x1xf32>")
    id2 = "affine_map<(d0, d1) -> (d0, d1)>"
    col = "affine_map<(d0, d1) -> (d1)>"
    row = "affine_map<(d0, d1) -> (d0, 0)>"
    par = '["parallel", "parallel"]'
    red = '["parallel", "reduction"]'
    args = [f"%w{i}: {w}, %b{i}: {v}" for i in range(blocks)]
    L = [f"func.func @main({', '.join(args)}, %x: {t}) -> {t} {{",
         "  %zero = arith.constant 0.0 : f32", "  %ninf = arith.constant 0xFF800000 : f32",
         "  %half = arith.constant 0.5 : f32"]
    cur = "%x"
    for i in range(blocks):
        L += [
            f"  %e{i} = tensor.empty() : {t}",
            f"  %f{i} = linalg.fill ins(%zero : f32) outs(%e{i} : {t}) -> {t}",
            f"  %m{i} = linalg.matmul ins({cur}, %w{i} : {t}, {w}) outs(%f{i} : {t}) -> {t}",
            f"  %a{i} = linalg.generic {{indexing_maps = [{id2}, {col}, {id2}], iterator_types = {par}}} "
            f"ins(%m{i}, %b{i} : {t}, {v}) outs(%e{i} : {t}) {{\n"
            f"  ^bb0(%p: f32, %q: f32, %o: f32):\n    %s = arith.addf %p, %q : f32\n    linalg.yield %s : f32\n"
            f"  }} -> {t}",
            f"  %g{i} = linalg.generic {{indexing_maps = [{id2}, {id2}], iterator_types = {par}}} "
            f"ins(%a{i} : {t}) outs(%e{i} : {t}) {{\n"
            f"  ^bb0(%p: f32, %o: f32):\n    %s = math.tanh %p : f32\n    %u = arith.addf %s, %half : f32\n"
            f"    %y = arith.mulf %p, %u : f32\n    linalg.yield %y : f32\n  }} -> {t}",
            f"  %re{i} = tensor.empty() : {r}",
            f"  %mf{i} = linalg.fill ins(%ninf : f32) outs(%re{i} : {r}) -> {r}",
            f"  %mx{i} = linalg.generic {{indexing_maps = [{id2}, {row}], iterator_types = {red}}} "
            f"ins(%g{i} : {t}) outs(%mf{i} : {r}) {{\n"
            f"  ^bb0(%p: f32, %o: f32):\n    %s = arith.maximumf %p, %o : f32\n    linalg.yield %s : f32\n"
            f"  }} -> {r}",
            f"  %ex{i} = linalg.generic {{indexing_maps = [{id2}, {row}, {id2}], iterator_types = {par}}} "
            f"ins(%g{i}, %mx{i} : {t}, {r}) outs(%e{i} : {t}) {{\n"
            f"  ^bb0(%p: f32, %q: f32, %o: f32):\n    %s = arith.subf %p, %q : f32\n    %y = math.exp %s : f32\n"
            f"    linalg.yield %y : f32\n  }} -> {t}",
            f"  %sf{i} = linalg.fill ins(%zero : f32) outs(%re{i} : {r}) -> {r}",
            f"  %sm{i} = linalg.generic {{indexing_maps = [{id2}, {row}], iterator_types = {red}}} "
            f"ins(%ex{i} : {t}) outs(%sf{i} : {r}) {{\n"
            f"  ^bb0(%p: f32, %o: f32):\n    %s = arith.addf %p, %o : f32\n    linalg.yield %s : f32\n"
            f"  }} -> {r}",
            f"  %y{i} = linalg.generic {{indexing_maps = [{id2}, {row}, {id2}], iterator_types = {par}}} "
            f"ins(%ex{i}, %sm{i} : {t}, {r}) outs(%e{i} : {t}) {{\n"
            f"  ^bb0(%p: f32, %q: f32, %o: f32):\n    %s = arith.divf %p, %q : f32\n    linalg.yield %s : f32\n"
            f"  }} -> {t}",
        ]
        cur = f"%y{i}"
    L += [f"  return {cur} : {t}", "}"]
    return "\n".join(L) + "\n", blocks * BLOCK_OPS, blocks


def pass_seconds(cmd, label):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    m = re.search(r"^\s*([0-9.]+) \([^)]*\)\s+" + label, p.stderr, re.M)
    if not m:
        raise SystemExit(f"no '{label}' line in --mlir-timing output:\n" + p.stderr[-3000:])
    return float(m.group(1)), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opt", default=os.path.join(HERE, "..", "build", "bin", "amp-opt"))
    ap.add_argument("--iree-opt", default=os.path.join(VENV_BIN, "iree-opt"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3, help="best of N runs per pass")
    results.add_args(ap)
    a = ap.parse_args()
    for tool in (a.opt, a.iree_opt):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"{tool} is missing (make build; scripts/setup.sh installs IREE into .venv)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in a.sizes.split(",")):
            text, ops, blocks = make_mlir(n)
            path = os.path.join(tmp, f"g{ops}.mlir")
            with open(path, "w") as f:
                f.write(text)
            ours = min(pass_seconds([a.opt, path, "--amp-autocast=target=bf16", "--mlir-timing",
                                     "--verify-each=false"], "AMPAutocast")[0]
                       for _ in range(a.repeats))
            theirs, out = None, None
            for _ in range(a.repeats):
                s, out = pass_seconds(
                    [a.iree_opt, path, "--mlir-timing", "--verify-each=false",
                     "--pass-pipeline=builtin.module(func.func("
                     "iree-global-opt-demote-contraction-inputs{type=bf16 operation=all}))"],
                    "DemoteContractionInputs")
                theirs = s if theirs is None else min(theirs, s)
            # Both did the job: every product reads bf16.
            if out.count("bf16") < blocks:
                raise SystemExit("IREE's pass did not demote the products")
            rows.append((ops, ours, theirs))
            print(f"{ops:7d} ops: amp-autocast {ours * 1e6 / ops:6.2f} us/op   IREE demote "
                  f"{theirs * 1e6 / ops:6.2f} us/op   IREE / ours {theirs / ours:5.2f}x", flush=True)
    results.record(
        a, "amp-autocast on linalg against IREE's DemoteContractionInputs (pass time: --mlir-timing, "
        "--verify-each=false)",
        ["ops", "amp-autocast s", "amp-autocast us/op", "IREE demote s", "IREE demote us/op",
         "IREE / ours"],
        [(ops, f"{o:.4f}", f"{o * 1e6 / ops:.2f}", f"{t:.4f}", f"{t * 1e6 / ops:.2f}", f"{t / o:.2f}x")
         for ops, o, t in rows],
        notes=["Ours also classifies every op for the per-op report (policy lookup, reason text), "
               "de-duplicates casts and moves them above data movement; IREE's pass only rewrites "
               "the products."])


if __name__ == "__main__":
    sys.exit(main())
