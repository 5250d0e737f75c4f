"""Training step time: AMP-MLIR's compiled training programs against PyTorch's
CPU training step, in fp32, bf16 and fp16, on the same models and data, in
one run.

    .venv/bin/python bench/train_step_vs_torch.py [--steps 60] [--min-time 0.5]
                                                  [--models mlp,cnn,transformer_block] [--rounds 3]

Ours: `amp-compile model.onnx --optimizer sgd --precision P` (fp16 with
dynamic loss scaling, bf16 and fp32 without), run as `./train --data d.npz
--steps N`; the time is the median of the per-step times the program writes
to its metrics (one whole step: forward, backward, unscale and inf check,
optimizer update, scale update), after --warmup steps.

PyTorch: eager, the AMP recipe of its documentation on the same model and
initial weights: zero_grad, forward under torch.autocast("cpu", dtype) (none
for fp32), backward of scaler.scale(loss) (GradScaler for fp16 only),
scaler.step(opt), scaler.update(); the median over the same steps. Both use
all of this machine's cores.

Each measurement runs --steps steps (60), or more where our fp32 step is
short: enough for --min-time seconds (0.5) of our fp32 steps (the count
set per model by a first run, the same for every configuration; PyTorch's
runs stop once they have --steps steps and --min-time seconds). A step of
half a millisecond then gives a median over some thousand steps instead
of a 30 ms window that one burst of load on a shared machine can fill (the transformer block's bf16 speed-up over 60
steps: 1.27-1.55x in five runs; over 600: 1.35-1.54x in four).

Each configuration is measured --rounds times (3), the configurations in
turn, and each time is the median of its rounds: a burst of load on a
shared machine then falls on every configuration alike.

The final loss gap compares the two losses after --warmup + --steps
steps (65), however many steps were timed.

The ratio is PyTorch's time over ours (> 1: we are faster); "our fp32 /
ours" is each precision's speed-up over our fp32 step. Each is the median
of the rounds' own ratios (the two steps of a ratio ran seconds apart, under
the same load).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from amp_mlir import examples  # noqa: E402
import results  # noqa: E402

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class TorchBlock(torch.nn.Module):
    """examples.transformer_block in torch: pre-LN 4-head attention, erf GELU
    MLP, residuals, mean over tokens, Linear head, cross entropy; weights from
    the ONNX file (MatMul layers store W^T as the exporter writes them)."""

    def __init__(self, init, heads=4):
        super().__init__()
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(torch.tensor(v)) for k, v in init.items()
             if v.dtype == np.float32})
        self.heads = heads

    def forward(self, x, y):
        F = torch.nn.functional
        g = lambda n: self.p[n.replace(".", "_")]  # noqa: E731
        lin = lambda z, n: torch.matmul(z, g(n + ".weight")) + g(n + ".bias")  # noqa: E731
        b, t, d = x.shape
        hd = d // self.heads
        h = F.layer_norm(x, (d,), g("ln1.weight"), g("ln1.bias"), 1e-5)
        sh = lambda z: z.reshape(b, t, self.heads, hd).transpose(1, 2)  # noqa: E731
        q, k, v = (sh(lin(h, f"attn.{n}")) for n in "qkv")
        a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / hd ** 0.5), -1)
        a = torch.matmul(a, v).transpose(1, 2).reshape(b, t, d)
        x = x + lin(a, "attn.out")
        h = F.layer_norm(x, (d,), g("ln2.weight"), g("ln2.bias"), 1e-5)
        x = x + lin(F.gelu(lin(h, "mlp.fc1")), "mlp.fc2")
        logits = F.linear(x.mean(1), g("head.weight"), g("head.bias"))
        return F.cross_entropy(logits, y)


class TorchCNN(torch.nn.Module):
    """examples.cnn in torch: conv, batch norm (inference form, as the ONNX
    node has it: running statistics are buffers), relu, max pool, conv,
    relu, global average pool, linear, cross entropy."""

    def __init__(self, init):
        super().__init__()
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(torch.tensor(v)) for k, v in init.items()
             if "running" not in k})
        self.rm = torch.tensor(init["bn1.running_mean"])
        self.rv = torch.tensor(init["bn1.running_var"])

    def forward(self, x, y):
        F = torch.nn.functional
        g = lambda n: self.p[n.replace(".", "_")]  # noqa: E731
        h = F.conv2d(x, g("conv1.weight"), g("conv1.bias"), padding=1)
        h = F.batch_norm(h, self.rm, self.rv, g("bn1.weight"), g("bn1.bias"), False, 0.1, 1e-5)
        h = F.max_pool2d(F.relu(h), 2)
        h = F.relu(F.conv2d(h, g("conv2.weight"), g("conv2.bias"), padding=1))
        logits = F.linear(h.mean((2, 3)), g("fc.weight"), g("fc.bias"))
        return F.cross_entropy(logits, y)


def torch_model(name, init):
    if name == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, 10))
        with torch.no_grad():
            for k, layer in (("fc1", net[0]), ("fc2", net[2])):
                layer.weight.copy_(torch.tensor(init[f"{k}.weight"]))
                layer.bias.copy_(torch.tensor(init[f"{k}.bias"]))
        return net, lambda x, y: torch.nn.functional.cross_entropy(net(x), y)
    m = TorchCNN(init) if name == "cnn" else TorchBlock(init)
    return m, m


def torch_times(name, init, x, y, precision, steps, warmup, enough=None):
    """PyTorch's median step after warmup, over `steps` steps, or fewer where `enough` = (n, seconds):
    stopped once n steps and that many seconds of steps were timed."""
    model, fwd = torch_model(name, init)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dtype = DTYPES[precision]
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "fp16")
    xs, ys = torch.tensor(x), torch.tensor(y)
    times, losses = [], []
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = fwd(xs, ys)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if enough and len(times) >= warmup + enough[0] and sum(times[warmup:]) >= enough[1]:
            break
    return float(np.median(times[warmup:])), losses


def our_program(compile_, path, precision, tmp):
    prog = f"{tmp}/{os.path.basename(path)}.{precision}"
    subprocess.run([compile_, path, "-o", prog, "--precision", precision, "--optimizer", "sgd",
                    "--lr", "0.01"], check=True, capture_output=True)
    return prog


def our_times(prog, data, steps, warmup):
    m = f"{prog}.jsonl"
    subprocess.run([prog, "--data", data, "--steps", str(warmup + steps), "--metrics", m,
                    "--print-every", "1000000"], check=True, capture_output=True)
    rows = [json.loads(l) for l in open(m)]
    return float(np.median([r["step_time_s"] for r in rows[warmup:]])), [r["loss"] for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5,
                    help="seconds of our fp32 steps each measurement covers at least (more steps "
                         "than --steps for a short step)")
    ap.add_argument("--models", default="mlp,cnn,transformer_block")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times each configuration is measured, in turn with the others (median)")
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
            precisions = ("fp32", "bf16", "fp16")
            progs = {p: our_program(compile_, path, p, tmp) for p in precisions}
            probe, _ = our_times(progs["fp32"], data, a.steps, a.warmup)
            steps = max(a.steps, int(np.ceil(a.min_time / probe)))
            print(f"{name}: {steps} steps a measurement (our fp32 step {probe * 1e3:.3f} ms)",
                  flush=True)
            # Rounds: every configuration in turn, each figure the median of
            # its rounds (a burst of load on a shared machine falls on all).
            got = {p: ([], []) for p in precisions}
            gaps = {}
            for r in range(a.rounds):
                for p in precisions:
                    ours, ol = our_times(progs[p], data, steps, a.warmup)
                    theirs, tl = torch_times(name, init, x, y, p, steps, a.warmup,
                                             (a.steps, a.min_time))
                    got[p][0].append(ours)
                    got[p][1].append(theirs)
                    # (after warmup + --steps steps, whatever the count run)
                    last = a.warmup + a.steps - 1
                    gaps.setdefault(p, abs(ol[last] - tl[last]) / abs(tl[last]))
            # A ratio is the median of the rounds' own ratios (its two steps
            # ran seconds apart, under the same load).
            for p in precisions:
                ours, theirs = float(np.median(got[p][0])), float(np.median(got[p][1]))
                ratio = float(np.median(np.array(got[p][1]) / np.array(got[p][0])))
                speedup = float(np.median(np.array(got["fp32"][0]) / np.array(got[p][0])))
                rows.append((name, p, ours, theirs, ratio, speedup, gaps[p]))
                print(f"{name:18} {p}: ours {ours * 1e3:8.3f} ms  PyTorch {theirs * 1e3:8.3f} ms"
                      f"  ratio {ratio:5.2f}x  speed-up over our fp32 {speedup:5.2f}x"
                      f"  (final loss differs by {gaps[p]:.1e})", flush=True)
    results.record(
        a, f"Training step against PyTorch eager (torch {torch.__version__}, median step)",
        ["model", "precision", "AMP-MLIR ms/step", "PyTorch eager ms/step", "PyTorch / ours",
         "our fp32 / ours", "final loss gap"],
        [(name, p, f"{ours * 1e3:.3f}", f"{theirs * 1e3:.3f}", f"{ratio:.2f}x",
          f"{speedup:.2f}x", f"{gap:.1e}") for name, p, ours, theirs, ratio, speedup, gap in rows])


if __name__ == "__main__":
    main()
