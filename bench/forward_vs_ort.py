"""Forward time of the example MLP, CNN and transformer block: amp-run
(fp32 and bf16) against onnxruntime (fp32) on the same inputs, in one run.

    make bench-deps    # once: onnxruntime into .venv
    .venv/bin/python bench/forward_vs_ort.py [--runs 50]

Times are medians of --runs runs after a warm-up; amp-run's exclude
compilation (its --repeat reports the compiled function alone). The ratio
is onnxruntime's time over ours (> 1: we are faster). Both use the same
threads (this machine's cores). The machine's speed drifts, so each model
is measured in --rounds rounds, onnxruntime and ours back to back in each;
the table shows the median round (by ratio) and the lowest and highest
ratio of the rounds.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import results  # bench/results.py: the table into docs/results.md

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from amp_mlir import examples  # noqa: E402


def ort_time(path, feeds, runs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def amp_time(tool, path, npz, precision, runs):
    p = subprocess.run([tool, path, "--inputs", npz, "--precision", precision,
                        "--repeat", str(runs)], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(p.stderr)
    for line in p.stdout.splitlines():
        if line.startswith("median time per run:"):
            return float(line.split(":")[1].split()[0]) / 1e3
    raise SystemExit("no timing in amp-run's output:\n" + p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", default=os.path.join(HERE, "..", "build", "bin", "amp-run"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    results.add_args(ap)
    args = ap.parse_args()
    try:
        import onnxruntime
        ortv = onnxruntime.__version__
    except ImportError:
        raise SystemExit("onnxruntime is not installed: run `make bench-deps` first")
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, kw in [("mlp", examples.mlp, dict(batch=256)),
                               ("cnn", examples.cnn, dict(batch=32)),
                               ("transformer_block", examples.transformer_block, dict(batch=8))]:
            m = make(**kw)
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(m, path)
            feeds = {}
            for i in m.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                feeds[i.name] = (rng.integers(0, 10, shape).astype(np.int64)
                                 if i.type.tensor_type.elem_type == onnx.TensorProto.INT64
                                 else rng.standard_normal(shape).astype(np.float32))
            npz = os.path.join(tmp, name + ".npz")
            np.savez(npz, **feeds)
            rounds = []
            for _ in range(max(1, args.rounds)):
                t_ort = ort_time(path, feeds, args.runs)
                t32 = amp_time(args.tool, path, npz, "fp32", args.runs)
                t16 = amp_time(args.tool, path, npz, "bf16", args.runs)
                rounds.append((t_ort / t32, t_ort, t32, t16))
            rounds.sort()
            _, t_ort, t32, t16 = rounds[len(rounds) // 2]
            rows.append((name, t_ort, t32, t16, rounds[0][0], rounds[-1][0]))
    print(f"onnxruntime {ortv}, {os.cpu_count()} cores, {args.rounds} rounds of {args.runs} runs\n")
    print(f"{'model':18} {'ORT fp32 ms':>12} {'amp fp32 ms':>12} {'ORT/amp':>8} "
          f"{'(min-max)':>11} {'amp bf16 ms':>12} {'fp32/bf16':>10}")
    for name, o, a, b, lo, hi in rows:
        print(f"{name:18} {o * 1e3:12.3f} {a * 1e3:12.3f} {o / a:8.2f} {f'{lo:.2f}-{hi:.2f}':>11} "
              f"{b * 1e3:12.3f} {a / b:10.2f}")
    results.record(
        args, f"Forward (inference) against onnxruntime {ortv} (median of {args.rounds} rounds "
        f"of {args.runs} runs)",
        ["model", "ORT fp32 ms", "AMP-MLIR fp32 ms", "ORT / ours", "(min-max)",
         "AMP-MLIR bf16 ms", "fp32 / bf16"],
        [(name, f"{o * 1e3:.3f}", f"{a * 1e3:.3f}", f"{o / a:.2f}x", f"{lo:.2f}-{hi:.2f}",
          f"{b * 1e3:.3f}", f"{a / b:.2f}") for name, o, a, b, lo, hi in rows])


if __name__ == "__main__":
    main()
