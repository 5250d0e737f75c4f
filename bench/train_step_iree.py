"""Training step time: the step lowered to linalg and compiled by IREE,
against our own runtime's program and PyTorch eager, on the CPU, in one run.

    .venv/bin/python bench/train_step_iree.py [--steps 60] [--models mlp,cnn,transformer_block]

IREE: `amp-compile model.onnx --emit linalg --optimizer sgd --precision P`
compiled by iree-compile 3.13 for this CPU (llvm-cpu, --iree-llvmcpu-target-cpu
=host) and run by amp_mlir.iree_train (iree.runtime, driver local-task: all
cores); the time is one call of the step from Python, the outputs (loss,
scale, found_inf) read back each step as the training loop does. Ours: the
same model compiled by amp-compile and run by `./train`; PyTorch: eager,
autocast + GradScaler (bench/train_step_vs_torch.py). Medians after
--warmup steps; each run's final loss after the same steps is compared.
The ratios are the peer's time over IREE's (> 1: IREE is faster).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
from amp_mlir import examples, iree_train  # noqa: E402
import results  # noqa: E402
from train_step_vs_torch import our_times, torch_times  # noqa: E402


def iree_times(compile_, path, data, precision, steps, warmup, tmp):
    step = f"{tmp}/{os.path.basename(path)}.{precision}.linalg.mlir"
    subprocess.run([compile_, path, "-o", step, "--emit", "linalg", "--precision", precision,
                    "--optimizer", "sgd", "--lr", "0.01"], check=True, capture_output=True)
    t = iree_train.IreeTraining(step, vmfb=step + ".vmfb")
    rows = t.train(data, warmup + steps)
    return (float(np.median([r["step_time_s"] for r in rows[warmup:]])), [r["loss"] for r in rows],
            t.compile_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn,transformer_block")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    results.add_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    compile_ = os.path.join(a.build, "bin", "amp-compile")
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            model = getattr(examples, name)()
            path = f"{tmp}/{name}.onnx"
            onnx.save(model, path)
            init = {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            x = rng.standard_normal(shape).astype(np.float32)
            y = rng.integers(0, 10, shape[0]).astype(np.int64)
            data = f"{tmp}/{name}.npz"
            np.savez(data, input=x, labels=y)
            for p in ("fp32", "bf16", "fp16"):
                iree, il, csec = iree_times(compile_, path, data, p, a.steps, a.warmup, tmp)
                ours, ol = our_times(compile_, path, data, p, a.steps, a.warmup, tmp)
                theirs, tl = torch_times(name, init, x, y, p, a.steps, a.warmup)
                gap = max(abs(il[-1] - ol[-1]) / abs(ol[-1]), abs(il[-1] - tl[-1]) / abs(tl[-1]))
                rows.append((name, p, iree, ours, theirs, gap, csec))
                print(f"{name:18} {p}: IREE {iree * 1e3:8.3f} ms  ours {ours * 1e3:8.3f} ms  "
                      f"PyTorch {theirs * 1e3:8.3f} ms  ours/IREE {ours / iree:5.2f}x  "
                      f"PyTorch/IREE {theirs / iree:5.2f}x  (final losses differ by {gap:.1e}; "
                      f"iree-compile {csec:.1f} s)", flush=True)
    results.record(
        a, f"Training step in IREE (iree-compile {iree_version()}, llvm-cpu) against our runtime "
           f"and PyTorch eager (torch {torch.__version__}), median step",
        ["model", "precision", "IREE ms/step", "AMP-MLIR runtime ms/step", "PyTorch eager ms/step",
         "ours / IREE", "PyTorch / IREE", "final loss gap", "iree-compile s"],
        [(name, p, f"{i * 1e3:.3f}", f"{o * 1e3:.3f}", f"{t * 1e3:.3f}", f"{o / i:.2f}x",
          f"{t / i:.2f}x", f"{gap:.1e}", f"{c:.1f}") for name, p, i, o, t, gap, c in rows])


def iree_version():
    try:
        from importlib.metadata import version
        return version("iree-base-compiler")
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    main()
