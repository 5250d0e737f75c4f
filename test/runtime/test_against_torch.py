"""The runtime's AMP kernels against PyTorch itself (CPU), through ctypes:

  * amprt_update_scale reproduces torch._amp_update_scale_ exactly (scale
    bits and growth tracker) on a scripted found_inf pattern, including the
    refused growth past the largest float;
  * amprt_unscale_and_check equals torch._amp_foreach_non_finite_check_and_unscale_
    bit for bit, found_inf included;
  * SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW steps
    match torch.optim (foreach=False) to 1 ulp-level relative error over 20
    steps with GradScaler-style skipped steps;
  * f32 -> f16 / bf16 casts equal torch's .to() bit for bit (NaN: as NaN);
  * checkpoints round-trip through the safetensors package both ways.

    python test_against_torch.py LIBAMPRT
"""

import os
import sys
import tempfile

import numpy as np
import torch

os.environ["AMPRT_LIB"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import runtime as rt  # noqa: E402

torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
rng = np.random.default_rng()
passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)


# --- update_scale ---------------------------------------------------------
for interval in (1, 3, 7):
    pattern = (rng.random(300) < 0.15).astype(np.float32)
    pattern[::50] = 3.0  # a summed flag is still "found"
    for init in (65536.0, 2.0 ** 125):
        scale_t = torch.tensor([init], dtype=torch.float32)
        tracker_t = torch.zeros(1, dtype=torch.int32)
        cfg, st = rt.scaler(growth_interval=interval, init_scale=init)
        for i, f in enumerate(pattern):
            torch._amp_update_scale_(scale_t, tracker_t, torch.tensor([f]), 2.0, 0.5, interval)
            rt.update_scale(cfg, st, float(f))
            ok = (np.float32(st.scale).tobytes() == scale_t.numpy().tobytes()
                  and st.growth_tracker == int(tracker_t[0]))
            if not ok:
                check(False, f"update_scale step {i} (interval {interval}, init {init}): "
                             f"ours {st.scale}/{st.growth_tracker}, torch "
                             f"{float(scale_t[0])}/{int(tracker_t[0])}")
                break
        else:
            check(True, "")

# --- unscale_and_check ----------------------------------------------------
for trial in range(20):
    grads = [rng.standard_normal(rng.integers(1, 3000)).astype(np.float32) * 1e4
             for _ in range(4)]
    if trial % 3 == 1:
        grads[2][rng.integers(len(grads[2]))] = np.inf
    if trial % 3 == 2:
        grads[1][rng.integers(len(grads[1]))] = np.nan
    scale = float(np.float32(rng.uniform(1, 2 ** 20)))
    tg = [torch.from_numpy(g.copy()) for g in grads]
    found_t = torch.zeros(1)
    # GradScaler passes the inverse: scale.double().reciprocal().float().
    inv_t = torch.tensor([scale]).double().reciprocal().float()
    torch._amp_foreach_non_finite_check_and_unscale_(tg, found_t, inv_t)
    outs, found = rt.unscale_and_check(grads, scale)
    same = all(np.array_equal(o.view(np.uint32), t.numpy().view(np.uint32)) or
               np.array_equal(np.isnan(o), np.isnan(t.numpy())) and
               np.array_equal(o[~np.isnan(o)].view(np.uint32), t.numpy()[~np.isnan(o)].view(np.uint32))
               for o, t in zip(outs, tg))
    check(same and found == float(found_t[0]),
          f"unscale trial {trial}: bits equal {same}, found {found} vs {float(found_t[0])}")

# --- optimizers -------------------------------------------------------------
def run_optimizer(kind, **kw):
    n = 257
    p0 = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(20)]
    skips = [i in (3, 4, 11) for i in range(20)]
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    if kind == "sgd":
        opt = torch.optim.SGD([tp], foreach=False, **kw)
        cfg = rt.SgdConfig(kw["lr"], kw.get("momentum", 0.0), kw.get("dampening", 0.0),
                           kw.get("weight_decay", 0.0), int(kw.get("nesterov", False)))
    else:
        opt = (torch.optim.AdamW if kind == "adamw" else torch.optim.Adam)([tp], foreach=False, **kw)
        cfg = rt.AdamConfig(kw["lr"], kw["betas"][0], kw["betas"][1], kw.get("eps", 1e-8),
                            kw.get("weight_decay", 0.0), int(kind == "adamw"))
    p = p0.copy()
    buf = np.zeros(n, np.float32)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    step = 0
    for g, skip in zip(grads, skips):
        if not skip:  # GradScaler skips optimizer.step() on overflow
            tp.grad = torch.from_numpy(g.copy())
            opt.step()
        if kind == "sgd":
            rt.sgd_step(cfg, p, g, buf, step, 1.0 if skip else 0.0)
        else:
            rt.adam_step(cfg, p, g, m, v, step, 1.0 if skip else 0.0)
        step += 0 if skip else 1
    ref = tp.detach().numpy()
    # Differences relative to the parameters' scale: ulp-level rounding
    # differences near zero are not relative errors of the update.
    return np.max(np.abs(p - ref)) / np.max(np.abs(ref))


for kind, kw in [("sgd", dict(lr=0.05)),
                 ("sgd", dict(lr=0.05, momentum=0.9, weight_decay=1e-2)),
                 ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.1)),
                 ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
                 ("adam", dict(lr=1e-2, betas=(0.9, 0.999))),
                 ("adam", dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.05)),
                 ("adamw", dict(lr=1e-2, betas=(0.9, 0.999), weight_decay=0.05))]:
    err = run_optimizer(kind, **kw)
    # Same formulas in the same precision: only the rounding of a few f32
    # operations differs (PyTorch's vector kernels contract a * b + c into
    # an FMA), a few f32 ulps of the largest parameter over 20 steps.
    check(err < 1e-6, f"{kind} {kw}: max relative difference to torch.optim {err:.3g}")

# --- casts -----------------------------------------------------------------
x = np.concatenate([rng.standard_normal(100000).astype(np.float32) * 10 ** rng.uniform(-9, 6, 100000),
                    np.array([np.inf, -np.inf, 65504, 65520, 65519.99, 1e-8, -0.0, 3.4e38],
                             np.float32)]).astype(np.float32)
h = rt.cast(x, rt.F16)
th = torch.from_numpy(x).to(torch.float16).numpy()
check(np.array_equal(h.view(np.uint16), th.view(np.uint16)), "f32 -> f16 differs from torch")
b = rt.cast(x, rt.BF16)
tb = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
check(np.array_equal(b, tb), "f32 -> bf16 differs from torch")
xn = np.array([np.nan, -np.nan], np.float32)
check(np.isnan(rt.cast(xn, rt.F16).astype(np.float32)).all(), "NaN -> f16 is not NaN")

# --- checkpoints with the safetensors package --------------------------------
from safetensors.numpy import load_file, save_file  # noqa: E402
from safetensors import safe_open  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    tensors = {"w": rng.standard_normal((5, 7)).astype(np.float32),
               "h": rng.standard_normal(9).astype(np.float16),
               "step": np.array(42, np.int64), "mask": rng.random(4) < 0.5}
    path = os.path.join(d, "ours.safetensors")
    rt.checkpoint_save(path, tensors, {"loss_scale": "32768.0", "growth_tracker": "5"})
    back = load_file(path)
    check(all(np.array_equal(back[k], v) for k, v in tensors.items()),
          "safetensors cannot read our checkpoint back exactly")
    with safe_open(path, "np") as f:
        check(f.metadata() == {"loss_scale": "32768.0", "growth_tracker": "5"},
              f"metadata as safetensors sees it: {f.metadata()}")
    theirs = os.path.join(d, "theirs.safetensors")
    save_file(tensors, theirs, metadata={"k": "v"})
    ours, meta = rt.checkpoint_load(theirs, tensors, ["k"])
    check(all(np.array_equal(ours[k], v) for k, v in tensors.items()) and meta == {"k": "v"},
          "we cannot read a safetensors file written by the package")

# --- .npz files with numpy ---------------------------------------------------
with tempfile.TemporaryDirectory() as d:
    arrays = {"x": rng.standard_normal((3, 4)).astype(np.float32),
              "h": rng.standard_normal(5).astype(np.float16),
              "labels": rng.integers(0, 10, 7).astype(np.int64), "b": rng.random(3) < 0.5,
              "scalar": np.array(2.5, np.float32)}
    for saver in (np.savez, np.savez_compressed):
        path = os.path.join(d, "in.npz")
        saver(path, **arrays)
        back = rt.npz_read(path)
        check(set(back) == set(arrays) and all(np.array_equal(back[k], v) and back[k].dtype == v.dtype
                                               for k, v in arrays.items()),
              f"reading {saver.__name__} output")
    out = os.path.join(d, "out.npz")
    rt.npz_write(out, arrays)
    with np.load(out) as z:
        check(set(z.files) == set(arrays) and all(np.array_equal(z[k], v) for k, v in arrays.items()),
              "numpy cannot read our .npz")
    np.savez(os.path.join(d, "empty.npz"))  # no arrays: only the zip's end record
    check(rt.npz_read(os.path.join(d, "empty.npz")) == {}, "an empty .npz")
    np.save(os.path.join(d, "one.npy"), arrays["x"])
    check(np.array_equal(rt.npz_read(os.path.join(d, "one.npy"))["one"], arrays["x"]), "bare .npy")
    bad = os.path.join(d, "bad.npz")
    with open(bad, "wb") as f:
        f.write(open(out, "rb").read()[:100])
    try:
        rt.npz_read(bad)
        check(False, "a truncated .npz was accepted")
    except RuntimeError as e:
        check("truncated" in str(e) or "bad" in str(e) or "holds" in str(e), f"message: {e}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
