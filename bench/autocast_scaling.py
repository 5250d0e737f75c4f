"""Time of the amp-autocast pass on generated graphs of 1k, 10k and 100k ops.

    python bench/autocast_scaling.py [--opt build/bin/amp-opt] [--sizes 1000,10000,100000]

The graph is a chain of transformer-like layers (matmul with a parameter,
bias add, gelu, layer norm, residual add, softmax), so every policy class
and the cast de-duplication are exercised. The pass's own time comes from
MLIR's --mlir-timing (parsing and printing excluded). Linear growth means
the time per op stays flat.

When apache-tvm is installed in the venv (`make bench-deps`), the same graph
is built as a Relax function and run through TVM's
relax.transform.ToMixedPrecision in the same run, and the ratio is printed.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import results  # bench/results.py: the table into docs/results.md

HERE = os.path.dirname(os.path.abspath(__file__))
LAYER_OPS = 7  # ops per layer below


def make_mlir(n_ops, d=64, b=8):
    layers = max(1, n_ops // LAYER_OPS)
    t = f"tensor<{b}x{d}xf32>"
    w = f"tensor<{d}x{d}xf32>"
    v = f"tensor<{d}xf32>"
    args = [f"%w{i}: {w} {{amp.param = \"w{i}\"}}, %b{i}: {v} {{amp.param = \"b{i}\"}}" for i in range(layers)]
    lines = [f"func.func @main({', '.join(args)}, %g: {v} {{amp.param = \"g\"}}, %x: {t}) -> {t} {{"]
    cur = "%x"
    for i in range(layers):
        lines += [
            f"  %m{i} = amp.matmul {cur}, %w{i} : ({t}, {w}) -> {t}",
            f"  %a{i} = amp.add %m{i}, %b{i} : ({t}, {v}) -> {t}",
            f"  %h{i} = amp.gelu %a{i} : {t}",
            f"  %n{i}:3 = amp.layer_norm %h{i}, %g : ({t}, {v}) -> ({t}, tensor<{b}x1xf32>, tensor<{b}x1xf32>)",
            f"  %r{i} = amp.add %n{i}#0, {cur} : ({t}, {t}) -> {t}",
            f"  %s{i} = amp.softmax %r{i} : {t}",
            f"  %y{i} = amp.mul %s{i}, %r{i} : ({t}, {t}) -> {t}",
        ]
        cur = f"%y{i}"
    lines += [f"  return {cur} : {t}", "}"]
    return "\n".join(lines) + "\n", layers * LAYER_OPS


def time_amp(opt, path):
    p = subprocess.run([opt, path, "--amp-autocast", "--mlir-timing", "-o", os.devnull],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(p.stderr)
    m = re.search(r"^\s*([0-9.]+) \([^)]*\)\s+AMPAutocast", p.stderr, re.M)
    if not m:
        raise SystemExit("no AMPAutocast line in --mlir-timing output:\n" + p.stderr)
    return float(m.group(1))


def time_tvm(layers, d=64, b=8):
    try:
        import tvm
        from tvm import relax
    except Exception:
        return None
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((b, d), "float32"))
    g = relax.Var("g", relax.TensorType((d,), "float32"))
    ws = [relax.Var(f"w{i}", relax.TensorType((d, d), "float32")) for i in range(layers)]
    bs = [relax.Var(f"b{i}", relax.TensorType((d,), "float32")) for i in range(layers)]
    with bb.function("main", [x, g] + ws + bs):
        with bb.dataflow():
            cur = x
            for i in range(layers):
                m = bb.emit(relax.op.matmul(cur, ws[i]))
                a = bb.emit(relax.op.add(m, bs[i]))
                h = bb.emit(relax.op.nn.gelu(a))
                n = bb.emit(relax.op.nn.layer_norm(h, g, g, axes=[-1]))
                r = bb.emit(relax.op.add(n, cur))
                s = bb.emit(relax.op.nn.softmax(r))
                cur = bb.emit(relax.op.multiply(s, r))
            out = bb.emit_output(cur)
        bb.emit_func_output(out)
    mod = bb.get()
    t0 = time.perf_counter()
    relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opt", default=os.path.join(HERE, "..", "build", "bin", "amp-opt"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    results.add_args(ap)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            text, ops = make_mlir(n)
            path = os.path.join(tmp, f"g{n}.mlir")
            with open(path, "w") as f:
                f.write(text)
            amp = min(time_amp(args.opt, path) for _ in range(args.repeat))
            tvm_t = time_tvm(ops // LAYER_OPS)
            rows.append((ops, amp, tvm_t))
    base = rows[0][1] / rows[0][0]
    print(f"{'ops':>8} {'amp-autocast s':>15} {'us/op':>7} {'vs smallest':>11} "
          f"{'TVM ToMixedPrecision s':>23} {'TVM / amp':>10}")
    for ops, amp, tvm_t in rows:
        per = amp / ops
        tvm_s = f"{tvm_t:23.3f}" if tvm_t is not None else f"{'(tvm not installed)':>23}"
        ratio = f"{tvm_t / amp:10.1f}" if tvm_t is not None else f"{'-':>10}"
        print(f"{ops:8d} {amp:15.4f} {per * 1e6:7.2f} {per / base:11.2f} {tvm_s} {ratio}")
    worst = max(r[1] / r[0] for r in rows) / min(r[1] / r[0] for r in rows)
    print(f"time per op varies by {worst:.2f}x across sizes (linear: within 2x)")
    results.record(
        args, "amp-autocast time against graph size (TVM's ToMixedPrecision on the same graph)",
        ["ops", "amp-autocast s", "us/op", "per op vs smallest", "TVM ToMixedPrecision s",
         "TVM / amp"],
        [(ops, f"{amp:.4f}", f"{amp / ops * 1e6:.2f}", f"{amp / ops / base:.2f}",
          f"{t:.3f}" if t is not None else "(tvm not installed)",
          f"{t / amp:.1f}x" if t is not None else "-") for ops, amp, t in rows],
        [f"Time per op varies by {worst:.2f}x across sizes (linear: within 2x)."])


if __name__ == "__main__":
    sys.exit(main())
