"""One training step of the example models against PyTorch's.

The MLP, the CNN and the transformer block of python/amp_mlir/examples.py
(fresh random initial weights and data each run) go through amp-translate,
amp-autodiff and amp-optimizer (SGD plain, with momentum and weight decay,
and nesterov; Adam with coupled weight decay; AdamW),
and one step runs with amp-run in fp32. The same step is taken by
torch.optim.SGD (plain, momentum, nesterov) / Adam / AdamW on the same
functions written in torch,
in float64. Every updated parameter must match to 1e-5 relative to its
largest element, and the change of each parameter (the update itself, which
is small against the weights) to 1e-3 of the largest change (AdamW: where
the gradient is not rounding noise, see below), AdamW's first moment to 1e-5; the step counter must read 1
and the loss must match.

    python test_train_step.py AMP_TRANSLATE AMP_OPT AMP_RUN
"""

import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import examples  # noqa: E402

translate, opt, run = sys.argv[1:4]
# A fresh seed each run (AMP_TEST_SEED repeats one); printed with any failure.
SEED = int(os.environ.get("AMP_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
rng = np.random.default_rng(SEED)
passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)


# Relu inputs and MaxPool inputs of the last reference run (see kinks_clear).
KINKS = []


def mlp_ref(p, x, y):
    pre = F.linear(x, p["fc1.weight"], p["fc1.bias"])
    KINKS.append(("relu", pre))
    h = F.relu(pre)
    return F.cross_entropy(F.linear(h, p["fc2.weight"], p["fc2.bias"]), y)


def cnn_ref(p, x, y):
    c1 = F.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1)
    n1 = F.batch_norm(c1, p["bn1.running_mean"], p["bn1.running_var"], p["bn1.weight"],
                      p["bn1.bias"], training=False, eps=1e-5)
    KINKS.append(("relu", n1))
    r1 = F.relu(n1)
    KINKS.append(("maxpool", r1))
    c2 = F.conv2d(F.max_pool2d(r1, 2, 2), p["conv2.weight"], p["conv2.bias"], padding=1)
    KINKS.append(("relu", c2))
    r2 = F.relu(c2)
    return F.cross_entropy(F.linear(r2.mean(dim=(2, 3)), p["fc.weight"], p["fc.bias"]), y)


def transformer_ref(p, x, y, heads=4):
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
    return F.cross_entropy(F.linear(res2.mean(1), p["head.weight"], p["head.bias"]), y)


def kinks_clear(ref, inits, x, y, margin=2e-6):
    """True when no Relu input lies within `margin` (relative to the largest)
    of 0 and no 2x2 MaxPool window's two largest values are that close: fp32
    rounding cannot move a mask or an argmax, so fp32 and float64 take the
    same branch everywhere. (A flipped element moves a gradient by its full
    size: that is not an error of either, and such draws are redrawn.)"""
    KINKS.clear()
    with torch.no_grad():
        ref({k: torch.tensor(v, dtype=torch.float64) for k, v in inits.items()},
            torch.tensor(x, dtype=torch.float64), torch.tensor(y))
    for kind, t in KINKS:
        scale = float(t.abs().max())
        if kind == "relu" and float(t.abs().min()) <= margin * scale:
            return False
        if kind == "maxpool":
            n, c, h, w = t.shape
            win = t.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(-1, 4)
            top = torch.topk(win, 2, dim=1).values
            gap = top[:, 0] - top[:, 1]
            if bool(((gap <= margin * scale) & (top[:, 0] > 0)).any()):
                return False
    return True


CASES = {
    "mlp": (lambda: examples.mlp(batch=64, seed=int(rng.integers(1 << 30))), mlp_ref),
    "cnn": (lambda: examples.cnn(batch=4, seed=int(rng.integers(1 << 30))), cnn_ref),
    "transformer_block": (lambda: examples.transformer_block(batch=4, seed=int(rng.integers(1 << 30))),
                          transformer_ref),
}
OPTIMIZERS = {
    "sgd": ("optimizer=sgd lr=0.1 momentum=0.9 weight-decay=0.0001",
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4)),
    "adamw": ("optimizer=adamw lr=0.001 weight-decay=0.01",
              lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01)),
    "sgd-plain": ("optimizer=sgd lr=0.05", lambda ps: torch.optim.SGD(ps, lr=0.05)),
    "sgd-nesterov": ("optimizer=sgd lr=0.05 momentum=0.8 nesterov=true",
                     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True)),
    "adam": ("optimizer=adam lr=0.002 weight-decay=0.001 beta1=0.8 beta2=0.99",
             lambda ps: torch.optim.Adam(ps, lr=2e-3, weight_decay=1e-3, betas=(0.8, 0.99))),
}

for name, (make, ref) in CASES.items():
    m = make()
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input}
    # The examples' LayerNorm / BatchNorm start at 1 / 0: perturb them so the
    # step exercises their gradients.
    for k in inits:
        if k.startswith(("ln", "bn1.weight", "bn1.bias")):
            inits[k] = (inits[k] + 0.1 * rng.standard_normal(inits[k].shape)).astype(np.float32)
        if k == "bn1.running_var":
            inits[k] = (rng.random(inits[k].shape) + 0.5).astype(np.float32)
        if k == "bn1.running_mean":
            inits[k] = (0.1 * rng.standard_normal(inits[k].shape)).astype(np.float32)
    for attempt in range(100):
        x = rng.standard_normal(shapes["input"]).astype(np.float32)
        y = rng.integers(0, 10, shapes["labels"]).astype(np.int64)
        if kinks_clear(ref, inits, x, y):
            break
    else:
        check(False, f"{name}: no draw of 100 keeps Relu / MaxPool inputs off their kinks")
        continue
    for i in m.graph.initializer:
        if i.name in inits:
            i.CopyFrom(numpy_helper.from_array(inits[i.name], i.name))
    with tempfile.TemporaryDirectory() as d:
        onnx.save(m, f"{d}/m.onnx")
        np.savez(f"{d}/in.npz", input=x, labels=y)
        subprocess.run([translate, "--import-onnx", f"{d}/m.onnx", "-o", f"{d}/m.mlir"], check=True)
        for oname, (flags, make_opt) in OPTIMIZERS.items():
            subprocess.run([opt, f"{d}/m.mlir", "--amp-autodiff", f"--amp-optimizer={flags}",
                            "-o", f"{d}/t.mlir"], check=True)
            r = subprocess.run([run, f"{d}/t.mlir", "--inputs", f"{d}/in.npz", "--outputs",
                                f"{d}/out.npz"], capture_output=True, text=True)
            if r.returncode != 0:
                check(False, f"{name} {oname}: amp-run failed: {r.stderr.strip()}")
                continue
            out = np.load(f"{d}/out.npz")
            # torch, float64: trainable = what has a gradient (not the BN statistics).
            params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=not k.startswith(
                "bn1.running") and not k.startswith("shape_")) for k, v in inits.items()}
            trainable = [t for t in params.values() if t.requires_grad]
            o = make_opt(trainable)
            loss = ref(params, torch.tensor(x, dtype=torch.float64), torch.tensor(y))
            loss.backward()
            o.step()
            lv = float(loss.detach())
            check(abs(float(out["loss"]) - lv) <= 1e-5 * abs(lv),
                  f"{name} {oname}: loss {float(out['loss'])} vs {lv}")
            check(out["new:step"].item() == 1, f"{name} {oname}: step {out['new:step']}")
            updated = {k[len("new:"):]: out[k] for k in out.files
                       if k.startswith("new:") and k[len("new:"):] in params}
            want = {k for k, t in params.items() if t.requires_grad}
            check(set(updated) == want, f"{name} {oname}: updated {sorted(updated)}, "
                                        f"expected {sorted(want)}")
            worst = 0.0
            for k in sorted(want & set(updated)):
                new_ref = params[k].detach().numpy()
                got = updated[k].astype(np.float64)
                # AdamW's first step moves each element by about lr * sign(g):
                # where |g| is below fp32's rounding of the gradient (1e-4 of
                # the largest here) the direction is noise in any fp32
                # implementation, so those elements are left out.
                g_ref = params[k].grad.numpy()
                if oname == "adam":  # coupled weight decay: the step sees g + wd * p
                    g_ref = g_ref + 1e-3 * inits[k]
                g_ref = np.abs(g_ref)
                keep = ((g_ref >= 1e-4 * g_ref.max()) if oname in ("adamw", "adam")
                        else np.ones_like(g_ref, bool))
                err = np.abs(got - new_ref)[keep].max(initial=0) / max(np.abs(new_ref).max(), 1e-30)
                delta_ref = new_ref - inits[k]
                delta = got - inits[k]
                derr = np.abs(delta - delta_ref)[keep].max(initial=0) / max(np.abs(delta_ref).max(), 1e-30)
                if k != "attn.k.bias":
                    worst = max(worst, derr)
                # The key bias's exact gradient is 0 (softmax ignores a
                # constant added to every score of a row): its update is
                # rounding noise in both, so it is not compared. AdamW's
                # first moment (the gradient itself) is compared to 1e-5.
                dtol = None if k == "attn.k.bias" else 1e-3
                check(np.isfinite(got).all() and (dtol is None or (err <= 1e-5 and derr <= dtol)),
                      f"{name} {oname} {k}: parameter error {err:.3g}, update error {derr:.3g}")
                if oname in ("adamw", "adam"):
                    m_ref = o.state[params[k]]["exp_avg"].numpy()
                    m = out[f"new:{k}.exp_avg"].astype(np.float64)
                    merr = np.abs(m - m_ref).max() / max(np.abs(m_ref).max(), 1e-30)
                    check(merr <= 1e-5 or k == "attn.k.bias",
                          f"{name} {oname} {k}.exp_avg: error {merr:.3g}")
            if os.environ.get("VERBOSE"):
                print(f"{name} {oname}: worst update error {worst:.3g}")

print(f"{passed} passed, {failed} failed" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
sys.exit(1 if failed or passed == 0 else 0)
