"""Training steps lowered to linalg, compiled and run by IREE, against our
runtime and against PyTorch AMP.

The example MLP, CNN and transformer block (python/amp_mlir/examples.py,
fresh random weights and data each run) are compiled twice by amp-compile:
`--emit linalg` (the step as linalg on tensors, run by IREE 3.13 on the CPU
through amp_mlir.iree_train) and as our own training program. Both train
the same steps on the same batches in fp32, bf16 and fp16 with dynamic loss
scaling (growth interval 3, so that the scale grows and backs off within
the run), and PyTorch trains the same functions (torch.autocast on the CPU
+ torch.amp.GradScaler, torch.optim.SGD). Checked, per model and precision:

- IREE vs our runtime: the loss-scale and found_inf sequences identical,
  losses within 1e-5 (fp32) / 1e-4 (fp16) / 2e-3 (bf16) relative, final
  parameters within 1e-3 (fp32, see below) / 1e-2 of the largest update;
- IREE vs PyTorch: the scale and found_inf sequences identical, losses
  within the torch-bridge tolerances (1e-5 fp32, 1e-3 fp16, 2e-3 bf16) and
  parameters within 1e-3 (fp32) / 1e-2 (fp16) of the largest update; in
  bf16, where ours keeps f32 biases and weight gradients that PyTorch
  rounds, the parameters' distance from float64 PyTorch against PyTorch's
  own, on 9 data draws (our runtime): the median ratio within 1.2, every
  draw within 3x + 5e-2 (fp32 runs also print each one's distance from
  float64);
- an overflowing model (inputs x 100 at scale 65536) skips the same steps
  on IREE, our runtime and PyTorch, and the skipped steps change nothing.

    python test_iree_training.py AMP_COMPILE
"""

import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from amp_mlir import examples, iree_train  # noqa: E402

COMPILE = sys.argv[1]
SEED = int(os.environ.get("AMP_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
rng = np.random.default_rng(SEED)
TMP = tempfile.mkdtemp(prefix="amp-iree-train-")
# Removed at exit however the run ends (KEEP=1 keeps it for a look).
if not os.environ.get("KEEP"):
    atexit.register(shutil.rmtree, TMP, True)
STEPS = 10
DRAWS = 9  # fresh data draws for the bf16 rule (see the loop)
passed = failed = 0
torch.set_num_threads(1)


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg, flush=True)


def mlp_ref(p, x):
    h = F.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
    return F.linear(h, p["fc2.weight"], p["fc2.bias"])


def cnn_ref(p, x):
    c1 = F.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1)
    n1 = F.batch_norm(c1, p["bn1.running_mean"], p["bn1.running_var"], p["bn1.weight"],
                      p["bn1.bias"], training=False, eps=1e-5)
    r1 = F.relu(n1)
    c2 = F.conv2d(F.max_pool2d(r1, 2, 2), p["conv2.weight"], p["conv2.bias"], padding=1)
    return F.linear(F.relu(c2).mean(dim=(2, 3)), p["fc.weight"], p["fc.bias"])


def transformer_ref(p, x, heads=4):
    b, s, d = x.shape
    dh = d // heads
    x1 = F.layer_norm(x, (d,), p["ln1.weight"], p["ln1.bias"], eps=1e-5)

    def lin(v, n):
        return v @ p[n + ".weight"] + p[n + ".bias"]

    q = lin(x1, "attn.q").reshape(b, s, heads, dh).transpose(1, 2)
    k = lin(x1, "attn.k").reshape(b, s, heads, dh).permute(0, 2, 3, 1)
    v = lin(x1, "attn.v").reshape(b, s, heads, dh).transpose(1, 2)
    probs = torch.softmax(q @ k * (1.0 / math.sqrt(dh)), -1)
    ctx = (probs @ v).transpose(1, 2).reshape(b, s, d)
    res1 = x + lin(ctx, "attn.out")
    h = lin(F.layer_norm(res1, (d,), p["ln2.weight"], p["ln2.bias"], eps=1e-5), "mlp.fc1")
    g = h * (torch.erf(h / math.sqrt(2.0)) + 1.0) * 0.5
    res2 = res1 + lin(g, "mlp.fc2")
    return F.linear(res2.mean(1), p["head.weight"], p["head.bias"])


BUFFERS = {"bn1.running_mean", "bn1.running_var", "shape_heads", "shape_model"}
MODELS = {
    "mlp": (lambda s: examples.mlp(batch=32, seed=s), mlp_ref, (64,)),
    "cnn": (lambda s: examples.cnn(batch=8, seed=s), cnn_ref, (3, 32, 32)),
    "transformer_block": (lambda s: examples.transformer_block(batch=8, seed=s), transformer_ref,
                          (16, 64)),
}


def torch_train(ref, init, x, y, batch, steps, prec, lr, growth_interval, f64=False):
    cast = (lambda a: torch.tensor(a, dtype=torch.float64)) if f64 else torch.tensor
    params = {k: cast(v).requires_grad_(k not in BUFFERS) for k, v in init.items()}
    trained = [v for k, v in params.items() if k not in BUFFERS]
    opt = torch.optim.SGD(trained, lr=lr)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec)
    sc = torch.amp.GradScaler("cpu", growth_interval=growth_interval) if prec == "fp16" else None
    out = []
    n = x.shape[0] // batch
    for s in range(steps):
        k = s % n
        xs, ys = cast(x[k * batch:(k + 1) * batch]), torch.tensor(y[k * batch:(k + 1) * batch])
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(ref(params, xs), ys)
        if sc is None:
            loss.backward()
            opt.step()
            out.append((loss.item(), 1.0, 0))
            continue
        used = sc.get_scale()
        sc.scale(loss).backward()
        sc.step(opt)
        found = int(sum(v.item() for v in sc._found_inf_per_device(opt).values()) != 0)
        sc.update()
        out.append((loss.item(), used, found))
    return out, {k: v.detach().numpy() for k, v in params.items()}


def run_runtime(onnx_path, flags, data, steps, name):
    prog = f"{TMP}/{name}"
    r = subprocess.run([COMPILE, onnx_path, "-o", prog, *flags], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"amp-compile {flags}: {r.stderr}")
    return run_program(prog, data, steps, name)


def run_program(prog, data, steps, name):
    """The compiled training program `prog` for `steps` steps on `data`
    from its initial weights: (metrics rows, final state)."""
    ck = f"{TMP}/{name}.ck"
    m = f"{TMP}/{name}.jsonl"
    r = subprocess.run([prog, "--data", data, "--steps", str(steps), "--metrics", m,
                        "--checkpoint-dir", ck, "--print-every", "1000000"],
                       capture_output=True, text=True, env=dict(os.environ, AMPRT_ADAPT_THREADS="0"))
    if r.returncode != 0:
        raise SystemExit(f"{prog}: {r.stderr}")
    import json
    rows = [json.loads(line) for line in open(m)]
    return rows, load_file(f"{ck}/checkpoint.safetensors")


def run_iree(onnx_path, flags, data, steps, name):
    step = f"{TMP}/{name}.linalg.mlir"
    r = subprocess.run([COMPILE, onnx_path, "-o", step, "--emit", "linalg", *flags],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"amp-compile --emit linalg {flags}: {r.stderr}")
    t = iree_train.IreeTraining(step, vmfb=f"{TMP}/{name}.vmfb")
    rows = t.train(data, steps)
    return rows, t.state()


def param_err(a, b, init, names):
    """max |a - b| over the parameters, relative to the largest change of b."""
    diff = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in names)
    moved = max(float(np.abs(b[k].astype(np.float64) - init[k]).max()) for k in names)
    return diff / moved if moved > 0 else float("inf"), moved


def compare(tag, rows, ref, tol):
    """ref: [(loss, scale, found)]; returns the worst relative loss difference."""
    if len(rows) != len(ref):
        check(False, f"{tag}: {len(rows)} steps for {len(ref)}")
        return float("inf")
    worst = 0.0
    for i, (o, (l, s, f)) in enumerate(zip(rows, ref)):
        if not (np.isfinite(o["loss"]) and np.isfinite(l)):
            check(False, f"{tag}: step {i + 1}: loss {o['loss']} vs {l}")
            return float("inf")
        worst = max(worst, abs(o["loss"] - l) / abs(l))
        if o["loss_scale"] != s or o["found_inf"] != f:
            check(False, f"{tag}: step {i + 1}: scale {o['loss_scale']} found_inf {o['found_inf']}"
                         f", reference {s} / {f}")
            return float("inf")
    check(worst <= tol, f"{tag}: losses differ by {worst:.2e} relative (tolerance {tol})")
    return worst


LOSS_TOL_RT = {"fp32": 1e-5, "fp16": 1e-4, "bf16": 2e-3}
LOSS_TOL_TORCH = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 2e-3}
GROWTH = 3
ONLY = os.environ.get("AMP_IREE_MODELS")  # a comma-separated subset (debugging)
for name, (make, ref, shape) in MODELS.items():
    if ONLY and name not in ONLY.split(","):
        continue
    model = make(int(rng.integers(1 << 30)))
    init = {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}
    trained = [k for k in init if k not in BUFFERS]
    onnx_path = f"{TMP}/{name}.onnx"
    with open(onnx_path, "wb") as f:
        f.write(model.SerializeToString())
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    x = rng.standard_normal((2 * batch, *shape)).astype(np.float32)
    y = rng.integers(0, 10, 2 * batch).astype(np.int64)
    data = f"{TMP}/{name}.npz"
    np.savez(data, input=x, labels=y)
    for prec in ("fp32", "bf16", "fp16"):
        tag = f"{name} {prec}"
        flags = ["--precision", prec, "--optimizer", "sgd", "--lr", "0.05",
                 "--growth-interval", str(GROWTH)]
        if prec != "fp16":
            flags = flags[:-2]
        ours, ours_state = run_iree(onnx_path, flags, data, STEPS, f"{name}_{prec}")
        rt, rt_state = run_runtime(onnx_path, flags, data, STEPS, f"{name}_{prec}")
        w_rt = compare(f"{tag}: IREE vs our runtime", ours,
                       [(r["loss"], r["loss_scale"], r["found_inf"]) for r in rt], LOSS_TOL_RT[prec])
        # fp32: 1e-3 of the largest update. Our runtime and PyTorch share
        # oneDNN's convolutions and agree to ~1e-6; IREE's own f32 code (its
        # order of the 32k-term convolution sums, its polynomial exp / log)
        # was seen 1.3e-4 away from both on one draw of the CNN. A wrong
        # formula moves parameters by the whole update.
        ptol = 1e-3 if prec == "fp32" else 1e-2
        e_rt, moved = param_err(ours_state, rt_state, init, trained)
        check(e_rt <= ptol, f"{tag}: parameters differ from our runtime's by {e_rt:.2e} of the "
                            f"largest update {moved:.2e} (tolerance {ptol})")
        tref, tstate = torch_train(ref, init, x, y, batch, STEPS, prec, 0.05, GROWTH)
        w_t = compare(f"{tag}: IREE vs PyTorch", ours, tref, LOSS_TOL_TORCH[prec])
        e_t, moved_t = param_err(ours_state, tstate, init, trained)
        if prec == "bf16":
            # Ours keeps biases and weight gradients f32 in bf16 (autocast's
            # f32 accumulators) where PyTorch rounds them to bf16: a torch
            # emulation of those rules follows our runtime to 3e-5 over the
            # ten steps, and PyTorch's rounding added to it gives PyTorch's
            # steps to 4e-7. The two trajectories part by whatever a ReLU
            # input rounded to the other side of 0 does (up to 4e-2 of the
            # largest update on the MLP), and which of them ends nearer
            # float64 is a draw: over 150 draws of the MLP ours was farther
            # than 1.5x PyTorch's + 2e-3 on 6, PyTorch's than ours on 2, the
            # median ratio 0.95, each at most 8e-2 away. So the rule is
            # judged on DRAWS fresh data draws (our runtime, whose state IREE
            # follows to 1e-2 above): on the median draw ours is within 1.2x
            # PyTorch's distance from float64 (+ 1e-3), on every draw within
            # 3x + 5e-2; a rule that loses precision every step (bf16 master
            # weights, bf16 sums) moves the median.
            prog = f"{TMP}/{name}_{prec}"
            ratios, worst = [], float("-inf")
            for d in range(DRAWS):
                if d == 0:
                    xd, yd, st, ts = x, y, rt_state, tstate
                else:
                    xd = rng.standard_normal(x.shape).astype(np.float32)
                    yd = rng.integers(0, 10, y.shape[0]).astype(np.int64)
                    np.savez(f"{TMP}/{name}_{d}.npz", input=xd, labels=yd)
                    _, st = run_program(prog, f"{TMP}/{name}_{d}.npz", STEPS, f"{name}_{prec}_{d}")
                    _, ts = torch_train(ref, init, xd, yd, batch, STEPS, prec, 0.05, GROWTH)
                _, s64 = torch_train(ref, init, xd, yd, batch, STEPS, "fp32", 0.05, GROWTH, f64=True)
                e64, e64_t = (param_err(v, s64, init, trained)[0] for v in (st, ts))
                ratios.append((e64 + 1e-3) / (e64_t + 1e-3))
                worst = max(worst, e64 - 3 * e64_t)
            med = float(np.median(ratios))
            msg = (f"{tag}: over {DRAWS} data draws the parameters' distance from float64's, ours "
                   f"over PyTorch's (+1e-3 each): median {med:.2f} (tolerance 1.2), range "
                   f"{min(ratios):.2f}..{max(ratios):.2f}; ours - 3x PyTorch's at most {worst:.1e} "
                   f"(tolerance 5e-2)")
            check(med <= 1.2 and worst <= 5e-2, msg)
            print(msg, flush=True)
        else:
            check(e_t <= ptol, f"{tag}: parameters differ from PyTorch's by {e_t:.2e} of the "
                               f"largest update {moved_t:.2e} (tolerance {ptol})")
        e_rt_t, _ = param_err(rt_state, tstate, init, trained)
        if prec == "fp32":  # both against float64 PyTorch: which sums are nearer the truth
            _, s64 = torch_train(ref, init, x, y, batch, STEPS, prec, 0.05, GROWTH, f64=True)
            print(f"{tag}: against float64: IREE {param_err(ours_state, s64, init, trained)[0]:.1e}, "
                  f"our runtime {param_err(rt_state, s64, init, trained)[0]:.1e}", flush=True)
        scales = [r["loss_scale"] for r in ours]
        print(f"{tag}: IREE vs runtime: losses {w_rt:.1e}, parameters {e_rt:.1e}; vs PyTorch: "
              f"losses {w_t:.1e}, parameters {e_t:.1e} (our runtime vs PyTorch: parameters "
              f"{e_rt_t:.1e}); scales {sorted(set(scales))}, "
              f"skipped {sum(r['found_inf'] for r in ours)}", flush=True)
        if prec == "fp16":
            check(len(set(scales)) > 1, f"{tag}: the scale never moved ({scales})")

# An overflowing model: the MLP with inputs x 100 overflows fp16 gradients at
# 65536; the skipped steps are the same everywhere and change nothing.
model = examples.mlp(batch=32, seed=int(rng.integers(1 << 30)))
init = {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}
onnx_path = f"{TMP}/over.onnx"
with open(onnx_path, "wb") as f:
    f.write(model.SerializeToString())
x = (rng.standard_normal((64, 64)) * 100).astype(np.float32)
y = rng.integers(0, 10, 64).astype(np.int64)
data = f"{TMP}/over.npz"
np.savez(data, input=x, labels=y)
flags = ["--precision", "fp16", "--optimizer", "sgd", "--lr", "0.0001", "--growth-interval", "5"]
ours, _ = run_iree(onnx_path, flags, data, 30, "over")
rt, _ = run_runtime(onnx_path, flags, data, 30, "over")
# Losses within 1e-3 (as against PyTorch): over 30 fp16 steps on inputs x 100
# a one-ulp fp16 rounding that IREE's and oneDNN's orders of a sum decide
# differently grows (seed 2940288290: 1e-9 apart to step 24, 3e-6 at 25,
# 1.1e-4 at 29, with the same skips and scales throughout); the skips and
# scales are compared exactly.
compare("overflow: IREE vs our runtime", ours,
        [(r["loss"], r["loss_scale"], r["found_inf"]) for r in rt], 1e-3)
tref, _ = torch_train(mlp_ref, init, x, y, 32, 30, "fp16", 0.0001, 5)
compare("overflow: IREE vs PyTorch", ours, tref, 1e-3)
found = [r["found_inf"] for r in ours]
check(found[0] == 1 and sum(found) >= 2 and found.count(0) >= 10,
      f"overflow: skips {found}")
# Two skipped steps in a row: the batch of the first comes again next, on
# unchanged parameters: the same loss, bit for bit.
pairs = 0
for a, b, c in zip(ours, ours[1:], ours[2:]):
    if a["found_inf"] and b["found_inf"]:
        pairs += 1
        check(c["loss"] == a["loss"], f"overflow: step {c['step']} loss {c['loss']} after two "
                                      f"skipped steps from {a['loss']}")
print(f"overflow: {sum(found)} of {len(found)} steps skipped on IREE, our runtime and PyTorch "
      f"alike; scales {[r['loss_scale'] for r in ours][:12]}...", flush=True)

print(f"{passed} passed, {failed} failed (seed {SEED})")
sys.exit(1 if failed else 0)
