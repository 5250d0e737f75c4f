"""The random ops (RandomNormal / RandomUniform / their Like forms,
Bernoulli) through amp-run: their distributions, seeding, and clean errors.

    python random_check.py DIR AMP_RUN AMP_TRANSLATE [cuda]

- the samples' moments and the Kolmogorov-Smirnov distance to the exact
  distribution (scipy-free: the normal's CDF from math.erf) at the 1e-4
  level; Bernoulli with a different probability per element: the count of
  ones as a z-score against its binomial mean and variance, and per
  probability band; f16 / bf16 outputs as the f32 samples would round;
- two ops in one program draw different numbers; the same --seed repeats a
  run bit for bit, another seed changes it; with `cuda` (the executor
  emulated on the host) the numbers equal the CPU's bit for bit;
- a probability outside [0, 1] (CPU and device), low above high, a Like
  input of dynamic shape, a double dtype: one message each, exit 1.
"""

import math
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

d, amp_run, translate = sys.argv[1:4]
device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
failures = 0


def check(ok, what):
    global failures
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    failures += not ok


def save(name, nodes, inputs, outputs, opset=18):
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs])
    path = os.path.join(d, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def run(model, inputs, out, *extra, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    cmd = [amp_run, model, "--inputs", inputs, "--device", device, *extra] + (["--outputs", out] if out else [])
    return subprocess.run(cmd, capture_output=True, text=True, env=e)


def ks(samples, cdf):
    x = np.sort(samples.astype(np.float64).ravel())
    n = x.size
    f = cdf(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


rng = np.random.default_rng()
N = (300, 400)  # 120000 samples per op
p = rng.random(N).astype(np.float32)
p[0, :50] = 0.0  # certain zeros and ones
p[1, :50] = 1.0
inp = os.path.join(d, "in.npz")
np.savez(inp, x=p)
mean, scale, low, high = 1.5, 2.5, -2.0, 3.0
model = save("random", [
    helper.make_node("RandomNormalLike", ["x"], ["n"], mean=mean, scale=scale),
    helper.make_node("RandomNormal", [], ["n2"], shape=list(N)),
    helper.make_node("RandomUniform", [], ["u"], low=low, high=high, shape=list(N)),
    helper.make_node("RandomUniformLike", ["x"], ["u16"], low=low, high=high, dtype=TensorProto.FLOAT16),
    helper.make_node("RandomNormalLike", ["x"], ["nb"], dtype=TensorProto.BFLOAT16),
    helper.make_node("Bernoulli", ["x"], ["b"]),
    helper.make_node("Bernoulli", ["x"], ["bb"], dtype=TensorProto.BOOL),
], [("x", TensorProto.FLOAT, list(N))], ["n", "n2", "u", "u16", "nb", "b", "bb"])
seed = str(int(rng.integers(1, 2**63)))
r = run(model, inp, os.path.join(d, "a.npz"), "--seed", seed)
check(r.returncode == 0, f"amp-run --device {device} --seed {seed}: exit {r.returncode} {r.stderr.strip()[-300:]}")
o = np.load(os.path.join(d, "a.npz"))
n = o["n"].size
crit = 2.2 / math.sqrt(n)  # Kolmogorov's distribution: P(D > 2.2 / sqrt n) ~ 1.2e-4
phi = np.vectorize(lambda t: 0.5 * math.erfc(-t / math.sqrt(2)))
for k, mu, sd in (("n", mean, scale), ("n2", 0.0, 1.0)):
    v = o[k].astype(np.float64)
    dist = ks(v, lambda t: phi((t - mu) / sd))
    zm = (v.mean() - mu) / (sd / math.sqrt(n))
    check(o[k].dtype == np.float32 and np.isfinite(v).all() and abs(zm) < 4.5 and abs(v.std() / sd - 1) < 0.02
          and dist < crit,
          f"{k}: normal({mu}, {sd}): mean z-score {zm:.2f}, std {v.std():.4f}, KS distance {dist:.2e} "
          f"(< {crit:.2e})")
v = o["u"].astype(np.float64)
dist = ks(v, lambda t: np.clip((t - low) / (high - low), 0, 1))
check(v.min() >= low and v.max() < high and dist < crit,
      f"u: uniform [{low}, {high}): range [{v.min():.5f}, {v.max():.5f}], KS distance {dist:.2e}")
check(not np.array_equal(o["n"], o["n2"] * scale + mean) and not np.array_equal(o["n"], o["nb"]),
      "two random ops draw different numbers")
# f16 / bf16: as rounded f32 samples; the same distribution.
u16 = o["u16"]
dist = ks(u16.astype(np.float64), lambda t: np.clip((t - low) / (high - low), 0, 1))
check(u16.dtype == np.float16 and dist < crit + 1.0 / 2048, f"u16: f16 uniform, KS distance {dist:.2e}")
nb = o["nb"]  # amp-run writes a bf16 output as f32 (numpy has no bf16)
on_grid = nb.dtype == np.float32 and not (nb.view(np.uint32) & 0xFFFF).any()
dist = ks(nb.astype(np.float64), phi)
check(on_grid and dist < crit + 2e-3, f"nb: bf16 normal(0, 1): every value a bf16, KS distance {dist:.2e}")
b = o["b"].astype(np.float64)
pp = p.astype(np.float64)
z = (b - pp).sum() / math.sqrt((pp * (1 - pp)).sum())
check(set(np.unique(b)) <= {0.0, 1.0} and abs(z) < 4.5 and (b[0, :50] == 0).all() and (b[1, :50] == 1).all(),
      f"b: Bernoulli(p), p per element: z-score {z:.2f}; p = 0 gives 0, p = 1 gives 1")
for lo, hi in ((0.0, 0.1), (0.45, 0.55), (0.9, 1.0)):
    m = (pp > lo) & (pp < hi)
    zz = (b[m] - pp[m]).sum() / math.sqrt((pp[m] * (1 - pp[m])).sum())
    check(abs(zz) < 4.5, f"b: p in ({lo}, {hi}): z-score {zz:.2f} over {m.sum()} elements")
bb = o["bb"]
check(bb.dtype == np.bool_ and abs((bb - pp).sum() / math.sqrt((pp * (1 - pp)).sum())) < 4.5,
      f"bb: Bernoulli with dtype BOOL ({bb.dtype})")

# Seeds: the same seed repeats the run, another changes every output.
r2 = run(model, inp, os.path.join(d, "b.npz"), "--seed", seed)
r3 = run(model, inp, os.path.join(d, "c.npz"), "--seed", str(int(seed) ^ 1))
o2, o3 = np.load(os.path.join(d, "b.npz")), np.load(os.path.join(d, "c.npz"))
check(r2.returncode == 0 and all(np.array_equal(o[k], o2[k]) for k in o.files),
      "the same --seed: the same numbers, bit for bit")
check(r3.returncode == 0 and not any(np.array_equal(o[k], o3[k]) for k in ("n", "n2", "u", "u16", "nb", "b")),
      "another --seed: other numbers in every output")
if device == "cuda":
    rc = subprocess.run([amp_run, model, "--inputs", inp, "--outputs", os.path.join(d, "cpu.npz"), "--seed", seed],
                        capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                             if k != "AMPRT_CUDA_EMULATE"})
    oc = np.load(os.path.join(d, "cpu.npz"))
    check(rc.returncode == 0 and all(np.array_equal(o[k], oc[k]) for k in o.files),
          "the device (emulated) draws the CPU's numbers, bit for bit")

# Errors: one message naming the culprit, exit 1, no output file.
bad = p.copy()
bad[7, 9] = 1.25
np.savez(os.path.join(d, "bad.npz"), x=bad)
out = os.path.join(d, "bad_out.npz")
r = run(model, os.path.join(d, "bad.npz"), out)
check(r.returncode == 1 and "bernoulli probability 1.25 at element 2809 is outside [0, 1]" in r.stderr
      and not os.path.exists(out), f"a probability of 1.25: exit {r.returncode}, '{r.stderr.strip()}'")
bad[7, 9] = np.nan
np.savez(os.path.join(d, "bad.npz"), x=bad)
r = run(model, os.path.join(d, "bad.npz"), out, "--nan-check", "off")
check(r.returncode == 1 and "bernoulli probability nan" in r.stderr and not os.path.exists(out),
      f"a NaN probability: exit {r.returncode}, '{r.stderr.strip()}'")
cases = [
    ("low_above_high", [helper.make_node("RandomUniform", [], ["y"], low=2.0, high=1.0, shape=[3])], [],
     "low 2.000000 is above high 1.000000"),
    ("no_shape", [helper.make_node("RandomNormal", [], ["y"])], [], "needs the 'shape' attribute"),
    ("double", [helper.make_node("RandomNormal", [], ["y"], shape=[2], dtype=TensorProto.DOUBLE)], [],
     "DOUBLE"),
    ("int_like", [helper.make_node("RandomUniformLike", ["i"], ["y"])], [("i", TensorProto.INT64, [4])],
     "unsupported op ai.onnx.RandomUniformLike of element type i64"),
    ("dynamic_like", [helper.make_node("RandomNormalLike", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["n", 3])],
     "needs an input of static shape"),
    ("infinite_scale", [helper.make_node("RandomNormal", [], ["y"], shape=[2], scale=float("inf"))], [],
     "mean and scale must be finite"),
]
for name, nodes, ins, want in cases:
    m = save(name, nodes, ins, ["y"])
    r = subprocess.run([translate, "--import-onnx", m, "-o", os.path.join(d, name + ".mlir")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and want in r.stderr and not os.path.exists(os.path.join(d, name + ".mlir")),
          f"{name}: exit {r.returncode}, '{r.stderr.strip()[-200:]}'")

print(f"{'FAILED' if failures else 'passed'}: {failures} failures")
sys.exit(1 if failures else 0)
