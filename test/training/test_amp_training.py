"""End-to-end mixed-precision training against PyTorch AMP (CPU).

Training programs written by `amp-compile --optimizer ...` run for many steps
(`./train --data d.npz --steps N --metrics m.jsonl`) and their per-step
metrics (loss, the loss scale the backward used, found_inf) are compared with
PyTorch's run of the same model, data and initial weights: torch.autocast on
the CPU (float16 / bfloat16) with torch.amp.GradScaler, torch.optim.

Tolerances (relative, per step, on the loss):
- fp32: 1e-5 (docs/semantics.md; the two differ only in summation order).
- fp16: 1e-4. Both round at the same points (f16 operands, f32
  accumulation, f16 results, f32 loss); what differs is the order of the
  f32 sums, which flips the last bit of an occasional f16 activation or
  gradient. One flipped logit moves a mean cross-entropy over 256 rows by
  about 2^-11 * |logit| / 256 ~ 1e-6 relative, so 1e-4 allows ~100 such
  flips per step and still fails on any real difference (a missing
  unscale, a wrong seed, a skipped or doubled update all move the loss by
  1e-3 or more within a few steps).
- bf16: 2e-3 (bf16 keeps 8 bits: one flipped logit ~ 2^-8 * |logit| / 256).
- Adam: 1e-3 (Adam divides by sqrt(v): gradients near zero amplify rounding).
The loss scale and found_inf sequences must be identical.

The demo of docs/semantics.md section 5 uses its fixed data (seed 42); every
other case draws fresh weights and data (AMP_TEST_SEED repeats a run).

    python test_amp_training.py AMP_COMPILE
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import examples  # noqa: E402

COMPILE = sys.argv[1]
SEED = int(os.environ.get("AMP_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
rng = np.random.default_rng(SEED)
passed = failed = 0
TMP = tempfile.mkdtemp(prefix="amp-training-")
# Removed at exit however the run ends (KEEP=1 keeps it for a look).
if not os.environ.get("KEEP"):
    atexit.register(shutil.rmtree, TMP, True)
torch.set_num_threads(2)


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg, flush=True)


def compile_(model, name, *flags):
    onnx_path = f"{TMP}/{name}.onnx"
    onnx.save(model, onnx_path)
    prog = f"{TMP}/{name}"
    r = subprocess.run([COMPILE, onnx_path, "-o", prog, *flags], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"amp-compile {' '.join(flags)} failed:\n{r.stderr}")
    return prog


def train(prog, data, steps, *extra, name=None, env=None):
    metrics = f"{prog}.{name or 'm'}.jsonl"
    r = subprocess.run([prog, "--data", data, "--steps", str(steps), "--metrics", metrics,
                        "--print-every", "1000000", *extra], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
    rows = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    return rows, r


def save_data(name, x, y):
    path = f"{TMP}/{name}.npz"
    np.savez(path, input=x, labels=y)
    return path


def inits_of(model):
    return {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}


def torch_mlp(init):
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    with torch.no_grad():
        for k, layer in (("fc1", net[0]), ("fc2", net[2])):
            layer.weight.copy_(torch.tensor(init[f"{k}.weight"]))
            layer.bias.copy_(torch.tensor(init[f"{k}.bias"]))
    return net


def torch_train(init, x, y, steps, dtype=None, opt="sgd", lr=0.01, scaler=None, clip=None,
                loss_factor=1.0):
    """PyTorch's AMP recipe. Returns [(loss, scale used, found_inf)], net."""
    net = torch_mlp(init)
    o = (torch.optim.SGD(net.parameters(), lr=lr) if opt == "sgd"
         else torch.optim.Adam(net.parameters(), lr=lr))
    sc = torch.amp.GradScaler("cpu", **scaler) if scaler is not None else None
    xs, ys = torch.tensor(x), torch.tensor(y)
    out = []
    for _ in range(steps):
        o.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(net(xs), ys) * loss_factor
        if sc is None:
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            o.step()
            out.append((loss.item(), 1.0, 0))
            continue
        used = sc.get_scale()
        sc.scale(loss).backward()
        if clip:
            sc.unscale_(o)
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        sc.step(o)
        found = int(sum(v.item() for v in sc._found_inf_per_device(o).values()) != 0)
        sc.update()
        out.append((loss.item(), used, found))
    return out, net


def compare(tag, ours, ref, tol):
    check(len(ours) == len(ref), f"{tag}: {len(ours)} metric lines for {len(ref)} steps")
    worst = 0.0
    for i, (o, (l, s, f)) in enumerate(zip(ours, ref)):
        if not (np.isfinite(o["loss"]) and np.isfinite(l)):
            check(False, f"{tag}: step {i + 1}: loss {o['loss']} vs {l}")
            return
        worst = max(worst, abs(o["loss"] - l) / abs(l))
        if o["loss_scale"] != s or o["found_inf"] != f or o["step"] != i + 1:
            check(False, f"{tag}: step {i + 1}: scale {o['loss_scale']} found_inf "
                         f"{o['found_inf']}, PyTorch {s} / {f}")
            return
    check(worst <= tol, f"{tag}: loss differs from PyTorch by {worst:.3g} relative (tol {tol})")
    print(f"{tag}: worst relative loss difference vs PyTorch {worst:.3g} (tolerance {tol}); "
          f"loss scale / found_inf sequences identical over {len(ref)} steps", flush=True)


def ref_scales(found, init, growth=2.0, backoff=0.5, interval=2000):
    """docs/semantics.md section 3: the scale each step uses, from found_inf."""
    scale, tracker, out = init, 0, []
    for f in found:
        out.append(scale)
        if f:
            scale *= backoff
            tracker = 0
        else:
            tracker += 1
            if tracker == interval:
                if np.isfinite(np.float32(scale * growth)):
                    scale *= growth
                tracker = 0
    return out


# --- 1. The demo (docs/semantics.md section 5): fixed data, seed 42 ----------
demo = examples.mlp(seed=42)
d_rng = np.random.default_rng(42)
X = d_rng.standard_normal((256, 64)).astype(np.float32)
Y = d_rng.integers(0, 10, 256).astype(np.int64)
demo_data = save_data("demo", X, Y)
init = inits_of(demo)
for prec, dtype, tol in (("fp16", torch.float16, 1e-4), ("fp32", None, 1e-5)):
    prog = compile_(demo, f"demo_{prec}", "--precision", prec, "--optimizer", "sgd", "--lr", "0.01")
    rows, r = train(prog, demo_data, 200)
    check(r.returncode == 0, f"demo {prec}: rc {r.returncode}: {r.stderr}")
    ref, _ = torch_train(init, X, Y, 200, dtype=dtype, lr=0.01,
                         scaler={} if prec == "fp16" else None)
    compare(f"demo {prec}", rows, ref, tol)
    check(rows and rows[-1]["loss"] < rows[0]["loss"] - 0.1, f"demo {prec}: did not learn")

# --- 2. Fresh weights and data: fp16 Adam, bf16 SGD, static scale, clipping --
fresh = examples.mlp(seed=int(rng.integers(1 << 30)))
finit = inits_of(fresh)
FX = rng.standard_normal((256, 64)).astype(np.float32)
FY = rng.integers(0, 10, 256).astype(np.int64)
fdata = save_data("fresh", FX, FY)
cases = [
    ("fp16 adam", ["--precision", "fp16", "--optimizer", "adam", "--lr", "0.001"],
     dict(dtype=torch.float16, opt="adam", lr=0.001, scaler={}), 1e-3),
    ("bf16 sgd", ["--precision", "bf16", "--optimizer", "sgd", "--lr", "0.05"],
     dict(dtype=torch.bfloat16, lr=0.05), 2e-3),
    ("fp16 static 1024", ["--precision", "fp16", "--optimizer", "sgd", "--lr", "0.05",
                          "--loss-scaling", "static", "--init-scale", "1024"],
     dict(dtype=torch.float16, lr=0.05, scaler=dict(init_scale=1024.0, growth_interval=10**9)),
     1e-4),
    ("fp16 clip 0.05", ["--precision", "fp16", "--optimizer", "sgd", "--lr", "0.05",
                       "--max-norm", "0.05", "--growth-interval", "7"],
     dict(dtype=torch.float16, lr=0.05, scaler=dict(growth_interval=7), clip=0.05), 1e-4),
]
for tag, flags, kw, tol in cases:
    prog = compile_(fresh, tag.replace(" ", "_"), *flags)
    rows, r = train(prog, fdata, 40)
    check(r.returncode == 0, f"{tag}: rc {r.returncode}: {r.stderr}")
    ref, _ = torch_train(finit, FX, FY, 40, **kw)
    compare(tag, rows, ref, tol)
    if "clip" in kw:  # the case must clip: without it PyTorch's run differs
        plain, _ = torch_train(finit, FX, FY, 40, **{k: v for k, v in kw.items() if k != "clip"})
        gap = max(abs(a[0] - b[0]) / b[0] for a, b in zip(plain, ref))
        check(gap > 100 * tol, f"{tag}: clipping changes nothing here ({gap:.3g})")

# --- 3. Overflow: inputs x100 overflow fp16 gradients at 65536 ---------------
OX = X * 100
odata = save_data("over", OX, Y)
oprog = compile_(demo, "over", "--precision", "fp16", "--optimizer", "sgd", "--lr", "0.0001",
                 "--growth-interval", "5")
rows, r = train(oprog, odata, 40)
check(r.returncode == 0, f"overflow: rc {r.returncode}: {r.stderr}")
ref, _ = torch_train(init, OX, Y, 40, dtype=torch.float16, lr=0.0001,
                     scaler=dict(growth_interval=5))
compare("overflow (vs PyTorch)", rows, ref, 1e-4)


def overflow_invariants(tag, rows, interval):
    found = [o["found_inf"] for o in rows]
    check(found[0] == 1, f"{tag}: the first step did not overflow")
    check(sum(found) >= 2 and found.count(0) >= 10, f"{tag}: skips {sum(found)} of {len(found)}")
    check([o["loss_scale"] for o in rows] == ref_scales(found, 65536.0, interval=interval),
          f"{tag}: scale sequence {[o['loss_scale'] for o in rows]} breaks the GradScaler rule")
    for a, b in zip(rows, rows[1:]):
        if a["found_inf"]:  # parameters untouched: the same batch gives the same loss
            check(b["loss"] == a["loss"], f"{tag}: step {b['step']} loss {b['loss']} after a "
                                          f"skipped step with loss {a['loss']}")
    check(rows[-1]["skipped_total"] == sum(found), f"{tag}: skipped_total")
    applied = [o["loss"] for o in rows if not o["found_inf"]]
    check(applied[-1] < applied[0], f"{tag}: no recovery (loss {applied[0]} -> {applied[-1]})")
    print(f"{tag}: {sum(found)} of {len(found)} steps skipped, scale "
          f"{rows[0]['loss_scale']:g} -> {rows[-1]['loss_scale']:g}, loss on applied steps "
          f"{applied[0]:.6f} -> {applied[-1]:.6f}", flush=True)


overflow_invariants("overflow", rows, 5)
# Fresh weights and data, same invariants.
fo_data = save_data("fresh_over", FX * 100, FY)
fo_prog = compile_(fresh, "fresh_over", "--precision", "fp16", "--optimizer", "sgd", "--lr",
                   "0.0001", "--growth-interval", "4")
rows, r = train(fo_prog, fo_data, 40)
check(r.returncode == 0, f"fresh overflow: rc {r.returncode}: {r.stderr}")
overflow_invariants("fresh overflow", rows, 4)
# One skipped step leaves every parameter and the step counter as they were.
subprocess.run([oprog, "--data", odata, "--steps", "1", "--outputs", f"{TMP}/one.npz"],
               check=True, capture_output=True)
one = np.load(f"{TMP}/one.npz")
check(bool(one["found_inf"]) and int(one["new:step"]) == 0, "overflow: first step not skipped")
for k, v in init.items():
    check(np.array_equal(one[f"new:{k}"], v), f"overflow: {k} changed on a skipped step")
check(float(one["new:loss_scale"]) == 32768.0, "overflow: the scale did not halve")

# A floor: an overflow at min-scale stops the run (or warns).
fl_prog = compile_(demo, "floor", "--precision", "fp16", "--optimizer", "sgd", "--lr", "0.0001",
                   "--min-scale", "16384")
rows, r = train(fl_prog, odata, 10)
check(r.returncode != 0 and "minimum loss scale 16384" in r.stderr,
      f"min-scale: rc {r.returncode}, stderr {r.stderr!r}")
fw_prog = compile_(demo, "floor_warn", "--precision", "fp16", "--optimizer", "sgd", "--lr",
                   "0.0001", "--min-scale", "16384", "--on-min-scale", "warn")
rows, r = train(fw_prog, odata, 12)
check(r.returncode == 0 and "minimum loss scale" in r.stderr and
      "steps in a row skipped" in r.stderr and all(o["loss_scale"] >= 16384 for o in rows),
      f"min-scale warn: rc {r.returncode}, stderr {r.stderr!r}")

# --- 4. Underflow: loss x 1e-6 underflows every fp16 gradient unscaled -------
tiny = examples.mlp(seed=int(rng.integers(1 << 30)))
g = tiny.graph
for n in g.node:
    if n.op_type == "SoftmaxCrossEntropyLoss":
        n.output[0] = "ce"
g.node.insert(0, helper.make_node("Constant", [], ["tiny"],
                                  value=numpy_helper.from_array(np.array(1e-6, np.float32))))
g.node.append(helper.make_node("Mul", ["ce", "tiny"], ["loss"], name="/tiny/Mul"))
onnx.checker.check_model(tiny)
udata = save_data("under", rng.standard_normal((256, 64)).astype(np.float32),
                  rng.integers(0, 10, 256).astype(np.int64))
curves = {}
for tag, prec, mode in (("fp32", "fp32", "none"), ("fp16 dynamic", "fp16", "dynamic"),
                        ("fp16 none", "fp16", "none")):
    prog = compile_(tiny, "under_" + tag.replace(" ", "_"), "--precision", prec, "--optimizer",
                    "sgd", "--lr", "10000", "--loss-scaling", mode)
    rows, r = train(prog, udata, 60)
    check(r.returncode == 0 and len(rows) == 60, f"underflow {tag}: rc {r.returncode} {r.stderr}")
    curves[tag] = np.array([o["loss"] for o in rows], np.float64)
drop32 = curves["fp32"][0] - curves["fp32"][-1]
check(drop32 > 0.05e-6, f"underflow: fp32 did not learn ({drop32})")
rel = np.abs(curves["fp16 dynamic"] - curves["fp32"]) / curves["fp32"]
check(rel.max() <= 2e-3, f"underflow: fp16 dynamic differs from fp32 by {rel.max():.3g}")
drop_none = curves["fp16 none"][0] - curves["fp16 none"][-1]
check(abs(drop_none) <= 0.01 * drop32,
      f"underflow: fp16 without scaling learned ({drop_none} vs fp32 {drop32})")
print(f"underflow: loss drop over 60 steps fp32 {drop32:.3g}, fp16 dynamic "
      f"{curves['fp16 dynamic'][0] - curves['fp16 dynamic'][-1]:.3g} (worst {rel.max():.2g} "
      f"relative from fp32), fp16 mode=none {drop_none:.3g}", flush=True)

# --- 5. Checkpoint and resume: 10 + 10 steps == 20 steps, bit for bit -------
# Bit for bit needs one thread count all along: on a busy machine (ctest
# runs suites side by side) the programs drop to one thread for a while
# (amprt_threads_adapt), and oneDNN may split a product's sum by threads.
fixed = {"AMPRT_ADAPT_THREADS": "0"}
straight, r = train(oprog, odata, 20, "--outputs", f"{TMP}/straight.npz", name="straight",
                    env=fixed)
ck = f"{TMP}/ck"
first, r1 = train(oprog, odata, 10, "--checkpoint-dir", ck, name="resumed", env=fixed)
second, r2 = train(oprog, odata, 20, "--checkpoint-dir", ck, "--resume",
                   "--outputs", f"{TMP}/resumed.npz", name="resumed", env=fixed)
check(r1.returncode == 0 and r2.returncode == 0 and "resumed at step 10" in r2.stdout,
      f"resume: {r1.stderr} {r2.stderr}")
strip = lambda rows: [{k: v for k, v in o.items() if k != "step_time_s"} for o in rows]  # noqa
check(strip(second) == strip(straight), "resume: metrics differ from the straight run")
a, b = np.load(f"{TMP}/straight.npz"), np.load(f"{TMP}/resumed.npz")
check(all(np.array_equal(a[k], b[k]) for k in a.files if k.startswith("new:")),
      "resume: final state differs from the straight run")
check(any(o["found_inf"] for o in straight[10:]) or straight[10]["loss_scale"] != 65536,
      "resume: the resumed half does not exercise the restored scale")

# --- 5b. Per-shape kernel choices (AMPRT_TUNE) and a bit-exact resume ------
# bf16 products run on oneDNN's bf16 kernels or its f32 ones on widened
# copies, whichever the first call timed faster. Runs that must agree bit
# for bit share AMPRT_TUNE_FILE; a checkpoint carries the choices, so the
# resumed half takes the kernels of the run that wrote it without timing
# (AMPRT_TUNE=debug would print each timed choice).
bprog = compile_(demo, "resume_bf16", "--precision", "bf16", "--optimizer", "sgd", "--lr", "0.05")
tunef = f"{TMP}/kernels.tune"
with_file = dict(fixed, AMPRT_TUNE_FILE=tunef, AMPRT_TUNE="debug")
bstraight, r = train(bprog, demo_data, 20, "--outputs", f"{TMP}/bstraight.npz", name="bstraight",
                     env=with_file)
lines = open(tunef).read().splitlines() if os.path.exists(tunef) else []
# On a CPU where oneDNN has no bf16 kernels (AVX2 only) the bf16 products run
# on its f32 kernels and there is nothing to choose: the run says so once.
no_bf16 = "oneDNN has no bf16 kernels on this CPU" in r.stderr
check(r.returncode == 0 and (bool(lines) != no_bf16) and all(l.count("\t") >= 1 for l in lines)
      and r.stderr.count("amprt tune:") == len(lines),
      f"tune: the straight bf16 run wrote {len(lines)} choices to AMPRT_TUNE_FILE and printed "
      f"{r.stderr.count('amprt tune:')} (no bf16 kernels: {no_bf16}): {r.stderr[-400:]}")
ckb = f"{TMP}/ckb"
_, r1 = train(bprog, demo_data, 10, "--checkpoint-dir", ckb, name="bresumed", env=with_file)
_, r2 = train(bprog, demo_data, 20, "--checkpoint-dir", ckb, "--resume", "--outputs",
              f"{TMP}/bresumed.npz", name="bresumed", env=dict(fixed, AMPRT_TUNE="debug"))
with open(f"{ckb}/checkpoint.safetensors", "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
kept = header.get("__metadata__", {}).get("amprt.kernel_choices", "")
check(r1.returncode == 0 and r2.returncode == 0 and "amprt tune:" not in r1.stderr + r2.stderr
      and sorted(kept.splitlines()) == sorted(set(lines)),
      f"tune: the resumed halves took the file's and then the checkpoint's choices without "
      f"timing ({len(kept.splitlines())} kept in the checkpoint): {r1.stderr[-300:]} "
      f"{r2.stderr[-300:]}")
a, b = np.load(f"{TMP}/bstraight.npz"), np.load(f"{TMP}/bresumed.npz")
check(all(np.array_equal(a[k], b[k]) for k in a.files if k.startswith("new:"))
      and all(np.isfinite(a[k]).all() for k in a.files if k.startswith("new:")),
      "tune: bf16 10 + 10 resumed steps differ from 20 straight ones")
print(f"tune: {len(lines)} kernel choices ({', '.join(sorted(set(l.split(chr(9))[-1] for l in lines)))}"
      f"{'; oneDNN has no bf16 kernels on this CPU, nothing to choose' if no_bf16 else ''}"
      f"), kept by the checkpoint; bf16 10 + 10 resumed steps == 20 straight, bit for bit",
      flush=True)
with open(f"{TMP}/bad.tune", "w") as f:
    f.write("no tab on this line\n")
_, r = train(bprog, demo_data, 2, name="badtune", env={"AMPRT_TUNE_FILE": f"{TMP}/bad.tune"})
check(r.returncode != 0 and f"AMPRT_TUNE_FILE '{TMP}/bad.tune' line 1" in r.stderr,
      f"tune: a malformed AMPRT_TUNE_FILE is an error naming it: rc {r.returncode}: "
      f"{r.stderr[-300:]}")

# --- 5c. Where the low-precision weight copies live -------------------------
# --keep-weight-casts: each updated weight's f16 / bf16 copy is step state,
# written by the optimizer update; the default (amp-recast-weights): cast in
# the forward and again for the backward; --recast-weights=false: one cast
# kept from the forward to the backward. Bit for bit the same three runs,
# through skipped steps (the fp16 overflow data), momentum,
# Adam / AdamW and gradient accumulation; the checkpoint's copies are the
# parameters rounded. The fixed kernel rule and thread count: two programs
# must not time their way to different kernels.
from amp_mlir.torch_bridge import read_checkpoint  # noqa: E402

steady = {"AMPRT_ADAPT_THREADS": "0", "AMPRT_TUNE": "off"}
copy_cases = [
    ("fp16 sgd momentum, overflows", demo, odata,
     ["--precision", "fp16", "--optimizer", "sgd", "--lr", "0.0001", "--momentum", "0.9",
      "--growth-interval", "5"], torch.float16),
    ("bf16 adamw", fresh, fdata,
     ["--precision", "bf16", "--optimizer", "adamw", "--lr", "0.001", "--weight-decay", "0.1"],
     torch.bfloat16),
    ("fp16 adam", fresh, fdata, ["--precision", "fp16", "--optimizer", "adam", "--lr", "0.001"],
     torch.float16),
    ("bf16 sgd, 2 micro-batches", fresh, fdata,
     ["--precision", "bf16", "--optimizer", "sgd", "--lr", "0.05", "--accumulate", "2"],
     torch.bfloat16),
]
for tag, model, data, flags, dt in copy_cases:
    got = {}
    for keep, mode in (("true", ["--keep-weight-casts"]), ("false", []),
                       ("once", ["--recast-weights=false"])):
        name = f"copies_{len(got)}_{tag.split()[0]}"
        prog = compile_(model, name, *flags, *mode)
        rows, r = train(prog, data, 24, "--checkpoint-dir", f"{TMP}/{name}_ck", env=steady)
        check(r.returncode == 0, f"{tag} ({mode}): rc {r.returncode}: {r.stderr}")
        state, _ = read_checkpoint(f"{TMP}/{name}_ck/checkpoint.safetensors")
        got[keep] = (strip(rows), state)
    (rows_on, on), (rows_off, off), (rows_once, once) = got["true"], got["false"], got["once"]
    check(rows_once == rows_off and set(once) == set(off) and
          all(np.array_equal(once[k], off[k]) for k in off),
          f"{tag}: the weights cast again for the backward change the run")
    suffix = ".bf16" if dt == torch.bfloat16 else ".f16"
    copies = sorted(k for k in on if k not in off)
    check(rows_on == rows_off and len(rows_on) == 24,
          f"{tag}: the metrics differ with the weight copies kept as state")
    check(all(np.array_equal(on[k], off[k]) for k in off) and set(off) <= set(on),
          f"{tag}: the state differs with the weight copies kept as state")
    check(copies and all(k.endswith(suffix) and k[:-len(suffix)] in off for k in copies)
          and {"fc1.weight" + suffix, "fc2.weight" + suffix} <= set(copies),
          f"{tag}: copies {copies}")
    for k in copies:
        want = torch.tensor(on[k[:-len(suffix)]]).to(dt).float().numpy()
        check(np.array_equal(on[k].astype(np.float32), want),
              f"{tag}: '{k}' is not its parameter rounded to {dt}")
    skipped = sum(o["found_inf"] for o in rows_on)
    check("overflow" not in tag or skipped >= 2, f"{tag}: only {skipped} skipped steps")
    print(f"{tag}: {len(copies)} weight copies kept as state; state and metrics equal the runs "
          f"without them (cast again for the backward, or once), bit for bit, over 24 steps "
          f"({skipped} skipped)", flush=True)

# --- 6. Gradient accumulation: k micro-batches per update -------------------
def torch_accum(init, x, y, k, steps, lr, batch=256):
    """PyTorch's recipe: loss / k, scaler.scale(...).backward() every
    micro-batch, scaler.step / update / zero_grad every k-th."""
    net = torch_mlp(init)
    o = torch.optim.SGD(net.parameters(), lr=lr)
    sc = torch.amp.GradScaler("cpu")
    nb = len(x) // batch
    out = []
    for i in range(steps):
        b = i % nb
        xs, ys = torch.tensor(x[b * batch:(b + 1) * batch]), torch.tensor(y[b * batch:(b + 1) * batch])
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(xs), ys)
        used = sc.get_scale()
        sc.scale(loss / k).backward()
        found = 0
        if (i + 1) % k == 0:
            sc.step(o)
            found = int(sum(v.item() for v in sc._found_inf_per_device(o).values()) != 0)
            sc.update()
            o.zero_grad()
        out.append((loss.item(), used, found))
    return out


AX = rng.standard_normal((1024, 64)).astype(np.float32)
AY = rng.integers(0, 10, 1024).astype(np.int64)
for tag, scale_x, k in (("accumulate 4", 1.0, 4), ("accumulate 2 overflow", 100.0, 2)):
    adata = save_data(tag.replace(" ", "_"), AX * scale_x, AY)
    lr = 0.05 if scale_x == 1.0 else 0.0001
    prog = compile_(fresh, tag.replace(" ", "_"), "--precision", "fp16", "--optimizer", "sgd",
                    "--lr", str(lr), "--accumulate", str(k))
    rows, r = train(prog, adata, 24)
    check(r.returncode == 0, f"{tag}: rc {r.returncode}: {r.stderr}")
    compare(tag, rows, torch_accum(finit, AX * scale_x, AY, k, 24, lr), 1e-4)
    if scale_x != 1.0:
        check(sum(o["found_inf"] for o in rows) >= 2, f"{tag}: no overflow to skip")
        check(all(o["found_inf"] == 0 for o in rows if o["step"] % k),
              f"{tag}: found_inf reported on a non-applying micro-batch")

# --- 7. Training spec for forward graphs (no loss op), through the Python API
os.environ["AMP_MLIR_BIN"] = os.path.dirname(os.path.abspath(COMPILE))
from amp_mlir import train as amp_train  # noqa: E402


def forward_only(model, out_name, extra_nodes=()):
    """The graph up to `out_name`, without its loss (what torch.onnx.export
    gives for a model whose loss lives outside it)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    nodes = [n for n in g.node if n.op_type != "SoftmaxCrossEntropyLoss"] + list(extra_nodes)
    del g.node[:]
    g.node.extend(nodes)
    kept_in = [i for i in g.input if i.name != "labels"]
    del g.input[:]
    g.input.extend(kept_in)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(out_name, onnx.TensorProto.FLOAT, None))
    return m


# cross_entropy on the logits: the same run as the graph with its loss op.
fwd = forward_only(fresh, "logits")
onnx.save(fwd, f"{TMP}/fwd.onnx")
p1 = amp_train.compile_training(f"{TMP}/fwd.onnx", f"{TMP}/fwd_ce", precision="fp16",
                                optimizer="sgd", lr=0.05, loss_fn="cross_entropy")
p2 = compile_(fresh, "with_loss", "--precision", "fp16", "--optimizer", "sgd", "--lr", "0.05")
# Bit for bit: one thread count throughout (fixed, as for the resume above;
# under ctest's load one run dropped to one thread and differed).
r1, _ = train(p1, fdata, 20, name="ce", env=fixed)
r2, _ = train(p2, fdata, 20, env=fixed)
check(len(r1) == 20 and
      [(a["loss"], a["loss_scale"]) for a in r1] == [(b["loss"], b["loss_scale"]) for b in r2],
      "loss-fn cross_entropy: differs from the graph with its own loss op")
# nll on log-probabilities and mse against a regression target, in fp32,
# against torch's F.nll_loss / F.mse_loss.
for kind in ("nll", "mse"):
    if kind == "nll":
        m = forward_only(fresh, "logp", [helper.make_node("LogSoftmax", ["logits"], ["logp"],
                                                          axis=1, name="/logsoftmax")])
        target = FY
        ref_loss = lambda out, t: torch.nn.functional.nll_loss(  # noqa: E731
            torch.log_softmax(out, 1), torch.tensor(t))
    else:
        m = forward_only(fresh, "logits")
        target = rng.standard_normal((256, 10)).astype(np.float32)
        ref_loss = lambda out, t: torch.nn.functional.mse_loss(out, torch.tensor(t))  # noqa: E731
    onnx.save(m, f"{TMP}/fwd_{kind}.onnx")
    data = f"{TMP}/fwd_{kind}.npz"
    np.savez(data, input=FX, target=target)
    prog = amp_train.compile_training(f"{TMP}/fwd_{kind}.onnx", f"{TMP}/fwd_{kind}",
                                      optimizer="sgd", lr=0.1, momentum=0.9, loss_fn=kind,
                                      label="target")
    rows = amp_train.run_training(prog, data, 15)
    net = torch_mlp(finit)
    o = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref = []
    for _ in range(15):
        o.zero_grad()
        loss = ref_loss(net(torch.tensor(FX)), target)
        loss.backward()
        o.step()
        ref.append((loss.item(), 1.0, 0))
    compare(f"loss-fn {kind} (fp32)", rows, ref, 1e-5)
# amp-translate takes the same spec.
tr = os.path.join(os.path.dirname(os.path.abspath(COMPILE)), "amp-translate")
r = subprocess.run([tr, "--import-onnx", f"{TMP}/fwd_mse.onnx", "--loss-fn", "mse", "--label",
                    "target"], capture_output=True, text=True)
check(r.returncode == 0 and 'amp.input = "target"' in r.stdout and
      'amp.output = "loss"' in r.stdout and "amp.reduce_mean" in r.stdout,
      f"amp-translate --loss-fn: rc {r.returncode} {r.stderr}")
try:
    amp_train.compile_training(f"{TMP}/fwd.onnx", f"{TMP}/x", loss_fn="hinge")
    check(False, "loss-fn hinge was accepted")
except RuntimeError as e:
    check("unknown loss kind 'hinge'" in str(e), f"loss-fn hinge: {e}")
check(not os.path.exists(f"{TMP}/x"), "a failed compile_training left files behind")
# The keywords are amp-compile's flags, typed by the tool's own list: an
# unknown one or one of the wrong type is refused before anything runs; a
# False reaches the tool (--check-inf=false, refused with dynamic scaling).
for kw, want in ((dict(growth_intervl=10), "unknown amp-compile option 'growth_intervl' "
                  "(did you mean growth_interval"),
                 (dict(growth_interval="10"), "growth_interval must be an int, got str '10'"),
                 (dict(lr="0.1"), "lr must be a number, got str '0.1'"),
                 (dict(nesterov=1), "nesterov must be True or False, got int 1"),
                 (dict(frozen=[3]), "frozen must be a string or a list of strings")):
    try:
        amp_train.compile_training(f"{TMP}/fwd.onnx", f"{TMP}/x", loss_fn="mse", **kw)
        check(False, f"{kw} was accepted")
    except TypeError as e:
        check(want in str(e), f"{kw}: {e}")
try:
    amp_train.compile_training(f"{TMP}/fwd.onnx", f"{TMP}/x", loss_fn="cross_entropy",
                               precision="fp16", check_inf=False)
    check(False, "check_inf=False with dynamic loss scaling was accepted")
except RuntimeError as e:
    check("--check-inf=false applies to --loss-scaling none only" in str(e),
          f"check_inf=False: {e}")
check(not os.path.exists(f"{TMP}/x"), "a refused compile_training left files behind")
flags = amp_train.flags()
check(flags["growth_interval"]["type"] == "int" and flags["growth_interval"]["default"] == 2000
      and flags["check_inf"]["default"] is True and flags["frozen"]["type"] == "list",
      f"amp-compile --describe-flags: {flags.get('growth_interval')}")

# --- 8. ONNX TrainingInfoProto: the model's own training step ---------------
# Linear regression whose algorithm graph (the forward again, Gradient and
# ai.onnx.preview.training's Momentum, T incremented) updates W, B, their
# momenta and T through update_binding; compiled with --func train_step and
# run for 12 steps against ONNX's Momentum formula with torch's gradients.
I, O, NB = 8, 3, 64
tW, tB = rng.standard_normal((O, I)).astype(np.float32), np.zeros(O, np.float32)
fwd_nodes = lambda: [  # noqa: E731
    helper.make_node("Gemm", ["X", "W", "B"], ["P"], transB=1),
    helper.make_node("Sub", ["P", "Y"], ["D"]),
    helper.make_node("Mul", ["D", "D"], ["D2"]),
    helper.make_node("ReduceMean", ["D2"], ["loss"], keepdims=0),
]
vi = lambda n, t, sh: helper.make_tensor_value_info(n, t, sh)  # noqa: E731
F32, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
inits = [numpy_helper.from_array(tW, "W"), numpy_helper.from_array(tB, "B"),
         numpy_helper.from_array(np.zeros((O, I), np.float32), "VW"),
         numpy_helper.from_array(np.zeros(O, np.float32), "VB"),
         numpy_helper.from_array(np.array(0.05, np.float32), "R"),
         numpy_helper.from_array(np.array(0, np.int64), "T")]
main_graph = helper.make_graph(fwd_nodes(), "regression",
                               [vi("X", F32, [NB, I]), vi("Y", F32, [NB, O])],
                               [vi("loss", F32, [])], inits)
algo = helper.make_graph(
    fwd_nodes() + [
        helper.make_node("Gradient", ["W", "B"], ["GW", "GB"], domain="ai.onnx.preview.training",
                         xs=["W", "B"], y="loss"),
        helper.make_node("Momentum", ["R", "T", "W", "B", "GW", "GB", "VW", "VB"],
                         ["W_new", "B_new", "VW_new", "VB_new"],
                         domain="ai.onnx.preview.training", alpha=0.9, beta=0.7,
                         mode="standard", norm_coefficient=0.01),
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int64))),
        helper.make_node("Add", ["T", "one"], ["T_new"]),
    ], "step", [vi("X", F32, [NB, I]), vi("Y", F32, [NB, O])],
    [vi("loss", F32, []), vi("W_new", F32, [O, I]), vi("B_new", F32, [O]),
     vi("VW_new", F32, [O, I]), vi("VB_new", F32, [O]), vi("T_new", I64, [])])
tm = helper.make_model(main_graph, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("ai.onnx.preview.training", 1)])
ti = tm.training_info.add()
ti.algorithm.CopyFrom(algo)
for k, v in {"W": "W_new", "B": "B_new", "VW": "VW_new", "VB": "VB_new", "T": "T_new"}.items():
    e = ti.update_binding.add()
    e.key, e.value = k, v
onnx.checker.check_model(tm)
onnx.save(tm, f"{TMP}/train_info.onnx")
RX = rng.standard_normal((NB * 2, I)).astype(np.float32)
RY = rng.standard_normal((NB * 2, O)).astype(np.float32)
np.savez(f"{TMP}/reg.npz", X=RX, Y=RY)
r = subprocess.run([COMPILE, f"{TMP}/train_info.onnx", "-o", f"{TMP}/ti", "--func", "train_step"],
                   capture_output=True, text=True)
check(r.returncode == 0 and "own training step" in r.stdout, f"TrainingInfoProto: {r.stderr}")
rows, r = train(f"{TMP}/ti", f"{TMP}/reg.npz", 12, "--outputs", f"{TMP}/ti_out.npz")
check(r.returncode == 0, f"TrainingInfoProto run: {r.stderr}")
W, B = torch.tensor(tW, dtype=torch.float64), torch.tensor(tB, dtype=torch.float64)
VW, VB = torch.zeros_like(W), torch.zeros_like(B)
ref = []
for t in range(12):
    b = t % 2
    x = torch.tensor(RX[b * NB:(b + 1) * NB], dtype=torch.float64)
    y = torch.tensor(RY[b * NB:(b + 1) * NB], dtype=torch.float64)
    w, bb = W.clone().requires_grad_(), B.clone().requires_grad_()
    loss = ((x @ w.T + bb - y) ** 2).mean()
    loss.backward()
    ref.append((loss.item(), 1.0, 0))
    beta = 0.7 if t > 0 else 1.0  # ONNX Momentum: the first step's gradient weight is 1
    VW = 0.9 * VW + beta * (0.01 * W + w.grad)
    VB = 0.9 * VB + beta * (0.01 * B + bb.grad)
    W, B = W - 0.05 * VW, B - 0.05 * VB
compare("TrainingInfoProto (Momentum)", rows, ref, 1e-5)
out = np.load(f"{TMP}/ti_out.npz")
check(int(out["new:T"]) == 12 and np.allclose(out["new:W"], W.numpy(), rtol=1e-5, atol=1e-6),
      f"TrainingInfoProto: T {out['new:T']}, W off by {np.abs(out['new:W'] - W.numpy()).max()}")
bad = onnx.ModelProto()
bad.CopyFrom(tm)
bad.training_info[0].update_binding[0].value = "nothing"
onnx.save(bad, f"{TMP}/train_info_bad.onnx")
bad2 = onnx.ModelProto()
bad2.CopyFrom(tm)
bad2.training_info[0].initialization.CopyFrom(helper.make_graph(
    [helper.make_node("RandomNormal", [], ["W0"], shape=[O, I])], "init", [],
    [vi("W0", F32, [O, I])]))
onnx.save(bad2, f"{TMP}/train_info_init.onnx")
bad3 = onnx.ModelProto()
bad3.CopyFrom(tm)
bad3.training_info[0].update_binding[0].value = "VB_new"  # W [3, 8] <- a [3] value
bad3.training_info[0].update_binding[3].value = "W_new"
onnx.save(bad3, f"{TMP}/train_info_type.onnx")

# --- 9. Bad input: one clear message, non-zero exit --------------------------
bad = [
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--lr", "0.1"], "--lr is a training option"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--data-parallel"],
     "--data-parallel is a training option"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--data-parallel",
      "--accumulate", "2"], "data-parallel with accumulate > 1 is not supported yet"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--loss-scaling",
      "sometimes"], "unknown mode 'sometimes'"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "rmsprop"],
     "unknown optimizer 'rmsprop'"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--lr", "nan"],
     "lr must be a finite number > 0, got nan"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "adamw", "--weight-decay", "-0.5"],
     "--weight-decay must be >= 0, got -0.5"),
    ([COMPILE, f"{TMP}/over.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--loss", "nope"],
     "no output named 'nope'"),
    ([COMPILE, f"{TMP}/fwd.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd"],
     "add a loss to a forward graph with --loss-fn"),
    ([COMPILE, f"{TMP}/fwd.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--loss-fn", "nll",
      "--loss-of", "probs"], "no result named 'probs'"),
    ([COMPILE, f"{TMP}/fwd.onnx", "-o", f"{TMP}/x", "--optimizer", "sgd", "--label", "y"],
     "--loss-of and --label go with --loss-fn"),
    ([COMPILE, f"{TMP}/train_info_bad.onnx", "-o", f"{TMP}/x", "--func", "train_step"],
     "update_binding 'W' <- 'nothing': the algorithm has no output of that name"),
    ([COMPILE, f"{TMP}/train_info_init.onnx", "-o", f"{TMP}/x", "--func", "train_step"],
     "initialization graphs (1 nodes) are not supported"),
    ([COMPILE, f"{TMP}/train_info_type.onnx", "-o", f"{TMP}/x", "--func", "train_step"],
     "does not fit the initializer's"),
    ([oprog, "--data", odata], "training needs both --data data.npz and --steps N"),
    ([oprog, "--data", odata, "--steps", "0"], "--steps needs an integer >= 1"),
    ([oprog, "--data", odata, "--steps", "99999999999999999999"],
     "--steps needs an integer >= 1, got '99999999999999999999'"),
    ([oprog, "--data", odata, "--steps", "1", "--seed", "-3"], "--seed needs an integer >= 0, got '-3'"),
    ([oprog, "--data", fdata + ".missing", "--steps", "2"], "missing"),
    ([oprog, "--steps", "2", "--data", save_data("short", X[:100], Y[:100])],
     "fewer than the program's batch of 256"),
    ([oprog, "--steps", "2", "--data", f"{TMP}/nolabels.npz"], "input 'labels' is missing"),
    ([oprog, "--steps", "2", "--data", f"{TMP}/garbage.npz"],
     "truncated or corrupt zip (no central directory after the entries)"),
    ([oprog, "--steps", "2", "--data", f"{TMP}/badlabel.npz"], "label 12 at position 5 is outside [0, 10)"),
    ([oprog, "--steps", "2", "--data", odata, "--resume"], "--resume needs --checkpoint-dir"),
    ([oprog, "--steps", "2", "--data", odata, "--resume", "--checkpoint-dir", f"{TMP}/none"],
     "does not exist"),
]
np.savez(f"{TMP}/nolabels.npz", input=X)
# A checkpoint with a NaN in one parameter (section 5's, one f32 element
# overwritten): --resume refuses it, naming the tensor.
os.makedirs(f"{TMP}/ck_nan", exist_ok=True)
raw = bytearray(open(f"{ck}/checkpoint.safetensors", "rb").read())
hlen = int.from_bytes(raw[:8], "little")
head = json.loads(raw[8:8 + hlen])
nan_name = next(k for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32"
                and v["data_offsets"][1] - v["data_offsets"][0] >= 12)
at = 8 + hlen + head[nan_name]["data_offsets"][0] + 8
raw[at:at + 4] = np.array([np.nan], np.float32).tobytes()
open(f"{TMP}/ck_nan/checkpoint.safetensors", "wb").write(raw)
bad.append(([oprog, "--steps", "12", "--data", odata, "--resume", "--checkpoint-dir", f"{TMP}/ck_nan"],
            f"--resume: tensor '{nan_name}' in '{TMP}/ck_nan/checkpoint.safetensors' holds 1 NaN / inf "
            "value(s), the first at flat index 2"))
open(f"{TMP}/garbage.npz", "wb").write(b"PK\x03\x04garbage")
BY = Y.copy()
BY[5] = 12
np.savez(f"{TMP}/badlabel.npz", input=X, labels=BY)
# An array no input takes (a misspelt name): a warning naming it, the run goes on.
np.savez(f"{TMP}/extra.npz", input=X, labels=Y, lables=Y)
r = subprocess.run([oprog, "--data", f"{TMP}/extra.npz", "--steps", "1"], capture_output=True, text=True)
check(r.returncode == 0 and "warning: 'lables' in '" in r.stderr and
      "is no input of the program (its inputs: input, labels); ignored" in r.stderr,
      f"an extra array in --data: rc {r.returncode}, stderr {r.stderr.strip()!r}")
for cmd, msg in bad:
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode != 0 and msg in r.stderr,
          f"{' '.join(cmd[1:])}: rc {r.returncode}, stderr {r.stderr.strip()!r} (want {msg!r})")
check(not os.path.exists(f"{TMP}/x") and not os.path.exists(f"{TMP}/x.weights"),
      "a failed amp-compile left files behind")

# --- AMPRT_CHECK_NUMERICS: the op where NaN / inf first appear --------------
# loss = mean(exp(x @ w)) in fp16 with dynamic scaling from 65536: the
# product runs in fp16, the exp and the mean in f32 (autocast's policy), so
# the forward stays finite while the exp's gradient, exp(h) * scale / numel
# in f32, overflows fp16 where the backward casts it for the product's
# gradient. The run names that node once; with small inputs (nothing
# overflows) it prints nothing.
def expo(name, lo, hi):
    w = rng.uniform(lo, hi, (8, 16)).astype(np.float32)
    x = rng.uniform(lo, hi, (64, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="/proj/MatMul"),
             helper.make_node("Exp", ["h"], ["e"], name="/act/Exp"),
             helper.make_node("ReduceMean", ["e"], ["loss"], name="/loss/ReduceMean", keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(w, "w")])
    prog = compile_(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), name,
                    "--precision", "fp16", "--optimizer", "sgd", "--lr", "1e-6")
    data = f"{TMP}/{name}.npz"
    np.savez(data, x=x)
    h = x[:4].astype(np.float64) @ w.astype(np.float64)  # the first batch
    overflows = np.exp(h).max() * 65536 / h.size > 65504
    r = subprocess.run([prog, "--data", data, "--steps", "1", "--metrics", f"{prog}.jsonl"],
                       capture_output=True, text=True, env={**os.environ, "AMPRT_CHECK_NUMERICS": "1"})
    rows = [json.loads(l) for l in open(f"{prog}.jsonl")] if os.path.exists(f"{prog}.jsonl") else []
    return overflows, r, rows


overflows, r, rows = expo("expo_big", 0.5, 1.0)
lines = [l for l in r.stderr.splitlines() if "check-numerics" in l]
check(overflows and r.returncode == 0 and rows and rows[0]["found_inf"] and len(lines) == 1
      and lines[0].startswith("amprt: check-numerics: node '/act/Exp/grad' (")
      and lines[0].endswith("from finite operands"),
      f"AMPRT_CHECK_NUMERICS on an fp16 overflow (expected one: {overflows}): rc {r.returncode}, "
      f"rows {rows}, stderr {r.stderr.strip()!r}")
overflows, r, rows = expo("expo_small", 0.01, 0.02)
check(not overflows and r.returncode == 0 and rows and not rows[0]["found_inf"]
      and "check-numerics" not in r.stderr,
      f"AMPRT_CHECK_NUMERICS without an overflow: rc {r.returncode}, rows {rows}, stderr {r.stderr.strip()!r}")
print("AMPRT_CHECK_NUMERICS: " + (lines[0] if lines else "(nothing printed)"), flush=True)

# A second origin in a later step, where the slot of the op's output still
# holds the last step's inf: w = 0.75 everywhere; batch 1 (x = 1, h = 6)
# overflows the exp gradient (403 * 65536 / 64 = 4.1e5), the step is skipped
# and the scale halves; batch 2 (x = 0.75, h = 4.5) keeps the exp gradient
# in fp16 (90 * 512 = 4.6e4) while the weight gradient, four rows of
# 0.75 * 4.6e4, overflows (1.4e5): that product is named too, whatever its
# output's slot held before (values off by up to 1 %, so the bytes left
# there vary: they once read as NaN in fp16 and hid the product in about a
# third of the runs; the runtime's unit test CheckNumerics.* pins that case).
w = (0.75 * (1 + 0.01 * rng.uniform(-1, 1, (8, 16)))).astype(np.float32)
x = np.concatenate([np.full((4, 8), 1.0), np.full((4, 8), 0.75)])
x = (x * (1 + 0.01 * rng.uniform(-1, 1, x.shape))).astype(np.float32)
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="/proj/MatMul"),
                       helper.make_node("Exp", ["h"], ["e"], name="/act/Exp"),
                       helper.make_node("ReduceMean", ["e"], ["loss"], name="/loss/ReduceMean",
                                        keepdims=0)],
                      "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                      [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])],
                      [numpy_helper.from_array(w, "w")])
prog = compile_(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "expo_two",
                "--precision", "fp16", "--optimizer", "sgd", "--lr", "1e-6")
np.savez(f"{TMP}/expo_two.npz", x=x)
r = subprocess.run([prog, "--data", f"{TMP}/expo_two.npz", "--steps", "2", "--metrics", f"{prog}.jsonl"],
                   capture_output=True, text=True, env={**os.environ, "AMPRT_CHECK_NUMERICS": "1"})
rows = [json.loads(l) for l in open(f"{prog}.jsonl")] if os.path.exists(f"{prog}.jsonl") else []
lines = [l for l in r.stderr.splitlines() if "check-numerics" in l]
want = ["/act/Exp/grad", "/proj/MatMul/grad"]
check(r.returncode == 0 and [(q["loss_scale"], q["found_inf"]) for q in rows] == [(65536, 1), (32768, 1)]
      and len(lines) == 2 and all(l.startswith(f"amprt: check-numerics: node '{n}' (")
                                  and l.endswith("from finite operands") for l, n in zip(lines, want)),
      f"AMPRT_CHECK_NUMERICS, an overflow in the exp's gradient, then one in the weight's: both "
      f"named: rc {r.returncode}, rows {rows}, stderr {r.stderr.strip()!r}")

# --- The inf check at the producers: a CNN in bf16 and fp32 ------------------
# A convolution's weight gradient that the step's check reads directly is
# checked as the runtime writes it (check_dw), and the check takes that
# answer. A NaN pixel in the first batch: the step is skipped, every
# parameter kept; the finite second batch's step is applied.
cnn = examples.cnn(batch=8, seed=int(rng.integers(1 << 30)))
cx = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
cx[3, 1, 7, 9] = np.nan
cdata = save_data("cnn_nan", cx, rng.integers(0, 10, 16).astype(np.int64))
for prec in ("bf16", "fp32"):
    cprog = compile_(cnn, f"cnn_nan_{prec}", "--precision", prec, "--optimizer", "sgd", "--lr", "0.05")
    got = {}
    for steps in (1, 2):
        r = subprocess.run([cprog, "--data", cdata, "--steps", str(steps), "--outputs",
                            f"{TMP}/cnn_nan_{prec}_{steps}.npz", "--metrics", f"{cprog}.{steps}.jsonl"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"cnn nan {prec}: rc {r.returncode}: {r.stderr[-400:]}")
        got[steps] = (np.load(f"{TMP}/cnn_nan_{prec}_{steps}.npz"),
                      [json.loads(l) for l in open(f"{cprog}.{steps}.jsonl")])
    one, rows = got[1]
    two, rows2 = got[2]
    cinit = inits_of(cnn)
    params = [k for k in cinit if "running" not in k]
    check([q["found_inf"] for q in rows2] == [1, 0], f"cnn nan {prec}: found_inf {rows2}")
    check(all(np.array_equal(one[f"new:{k}"], cinit[k]) for k in params),
          f"cnn nan {prec}: a parameter changed on the skipped step")
    check(all(np.isfinite(two[f"new:{k}"]).all() and not np.array_equal(two[f"new:{k}"], cinit[k])
              for k in params), f"cnn nan {prec}: the second step was not applied")
    print(f"cnn {prec}: a NaN pixel's step skipped ({len(params)} parameters kept), the next applied",
          flush=True)

print(f"{passed} passed, {failed} failed" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
sys.exit(1 if failed or passed == 0 else 0)
