"""amp-autodiff's gradients against PyTorch autograd in float64.

Each case is an ONNX training graph written here with onnx.helper (fresh
random weights and data every run), imported with amp-translate,
differentiated with `amp-opt --amp-autodiff`, run with amp-run, and
compared with the gradients torch computes for the same graph in double
precision. Every gradient rule amp-autodiff has is on some path from a
parameter to a loss below; the fp32 run must agree to 1e-4 of each
gradient's largest magnitude, the fp16 / bf16 (autocast) runs to a
tolerance of that format's precision (see the notes in run_case and on Relu
below).

    python test_gradients.py AMP_TRANSLATE AMP_OPT AMP_RUN
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
from onnx import TensorProto, helper, numpy_helper

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


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, params, inputs, outputs, opset=18):
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(a, n) for n, a in params.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run_case(name, m, params, inputs, torch_fn, precisions=("fp32", "fp16", "bf16"),
             frozen=(), constants=(), with_outputs=False, half_tol_scale=1.0):
    def reference(outputs):
        # float64 autograd; torch_fn may read our outputs (a dropout mask).
        tp = {n: torch.tensor(a, dtype=torch.float64, requires_grad=n not in frozen)
              for n, a in params.items()}
        ti = {n: torch.tensor(a, dtype=torch.float64 if a.dtype == np.float32 else torch.int64)
              for n, a in inputs.items()}
        loss = torch_fn(tp, ti, outputs) if with_outputs else torch_fn(tp, ti)
        loss.backward()
        return float(loss.detach()), {n: t.grad.numpy() for n, t in tp.items() if n not in frozen}

    with tempfile.TemporaryDirectory() as d:
        onnx.save(m, f"{d}/m.onnx")
        if os.environ.get("KEEP"):
            onnx.save(m, f"{os.environ['KEEP']}/{name}.onnx")
        np.savez(f"{d}/in.npz", **inputs)
        subprocess.run([translate, "--import-onnx", f"{d}/m.onnx", "-o", f"{d}/m.mlir"]
                       + (["--freeze=" + ",".join(constants)] if constants else []),
                       check=True)
        ad = "amp-autodiff" + ("{frozen=" + ",".join(frozen) + "}" if frozen else "")
        # (With the locations: amp-run's autocast reads node names, as the
        # in-process pipeline of amp-compile / amp-run on an ONNX file has.)
        subprocess.run([opt, f"{d}/m.mlir", f"--pass-pipeline=builtin.module({ad})",
                        "--mlir-print-debuginfo", "-o", f"{d}/g.mlir"], check=True)
        for p in precisions:
            r = subprocess.run([run, f"{d}/g.mlir", "--inputs", f"{d}/in.npz", "--outputs",
                                f"{d}/out.npz", "--precision", p], capture_output=True, text=True)
            if r.returncode != 0:
                check(False, f"{name} {p}: amp-run failed: {r.stderr.strip()}")
                continue
            out = np.load(f"{d}/out.npz")
            loss, ref = reference(out)
            ref_rounded = None
            if p != "fp32":
                # The same float64 reference on the parameters and inputs
                # rounded to the run's format (what autocast feeds the
                # products): a model whose gradient turns on which of two
                # near-equal values is smaller (ReduceMin, abs) can move by
                # 0.09 between the two (measured: seed 823186549, while ours
                # was 0.004 from the rounded one). A wrong rule is O(1) from
                # both; the error is the smaller of the two.
                dt = torch.bfloat16 if p == "bf16" else torch.float16
                saved = ({k: v for k, v in params.items()}, {k: v for k, v in inputs.items()})
                for dct in (params, inputs):
                    for k, v in dct.items():
                        if v.dtype == np.float32:
                            dct[k] = torch.tensor(v).to(dt).float().numpy()
                try:
                    _, ref_rounded = reference(out)
                finally:
                    params.update(saved[0])
                    inputs.update(saved[1])
            got = {k[len("grad:"):]: out[k] for k in out.files if k.startswith("grad:")}
            check(set(got) == set(ref), f"{name} {p}: gradients {sorted(got)} != {sorted(ref)}")
            # fp32: every element within 1e-4 of the largest magnitude.
            # fp16 / bf16: the relative error of the whole tensor (a relu
            # whose input rounds across 0 moves single elements by a lot).
            # Measured over 60 fresh draws: up to 6e-3 (fp16) and 6e-2
            # (bf16, 8 significant bits) on gradients that sum signed terms
            # (a Pow exponent, a bias under batch norm).
            tol = {"fp32": 1e-4, "fp16": 1.5e-2 * half_tol_scale,
                   "bf16": 8e-2 * half_tol_scale}[p]
            lv = float(out["loss"])
            check(abs(lv - loss) <= tol * max(1.0, abs(loss)), f"{name} {p}: loss {lv} vs {loss}")
            total = math.sqrt(sum(float(np.sum(g * g)) for g in ref.values()))
            for n, g in ref.items():
                if n not in got:
                    continue
                a = got[n].astype(np.float64)
                if p == "fp32":
                    scale = max(np.abs(g).max(), 1e-12)
                    err = np.abs(a - g).max() / scale
                else:
                    # A gradient that is a sum of nearly cancelling terms is
                    # small against the others and carries their rounding:
                    # it is measured against at least a quarter of the norm
                    # of all the model's gradients together. (A tenth let
                    # a batch norm's bias under global pooling fail in bf16
                    # once in a few hundred draws: 0.0936, where 60 fresh
                    # draws gave a median of 0.0038 and a tail of 0.0625,
                    # 0.045, 0.038; a wrong rule errs by O(1) either way.)
                    scale = max(np.linalg.norm(g), 0.25 * total, 1e-12)
                    err = np.linalg.norm(a - g) / scale
                    if ref_rounded is not None and n in ref_rounded:
                        err = min(err, np.linalg.norm(a - ref_rounded[n]) / scale)
                if os.environ.get("VERBOSE"):
                    print(f"{name} {p} {n}: {err:.3g}")
                ok = a.shape == g.shape and np.isfinite(a).all() and err <= tol
                check(ok, f"{name} {p}: d loss / d {n}: relative error {err:.3g} "
                          f"(tolerance {tol})")


# 1. The MLP of docs/semantics.md section 5: Gemm (trans_b, bias), Relu,
#    SoftmaxCrossEntropyLoss (mean).
N, D, H, C = 64, 32, 48, 10
params = {"w1": randn(H, D, scale=0.2), "b1": randn(H, scale=0.1),
          "w2": randn(C, H, scale=0.2), "b2": randn(C, scale=0.1)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
           helper.make_node("Relu", ["h"], ["r"]),
           helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], transB=1),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"])
# Relu's mask comes from the rounded forward value: in fp16 / bf16 a few
# inputs near 0 land on the other side of it, and each moves one element of
# the gradient by its full size (PyTorch's autocast does the same), so the
# Relu model is compared in fp32 only and the same graph with Tanh in every
# precision.
run_case("mlp", m, params, inputs,
         lambda p, i: F.cross_entropy(F.linear(F.relu(F.linear(i["x"], p["w1"], p["b1"])),
                                               p["w2"], p["b2"]), i["y"]), precisions=("fp32",))
m.graph.node[1].op_type = "Tanh"
run_case("mlp-tanh", m, params, inputs,
         lambda p, i: F.cross_entropy(F.linear(torch.tanh(F.linear(i["x"], p["w1"], p["b1"])),
                                               p["w2"], p["b2"]), i["y"]))

# 2. Batched MatMul, broadcast Add / Mul / Sub / Div, every unary rule,
#    Transpose, Reshape, Flatten, Unsqueeze / Squeeze, Identity, LogSoftmax,
#    Softmax, and a weighted summed loss with an ignored class.
B, T, E, C = 3, 5, 8, 6
params = {"w": randn(E, E, scale=0.3), "b": randn(E, scale=0.1), "s": randn(1, E),
          "v": randn(E, C, scale=0.3), "g": randn(T, 1, scale=0.5) + 2.0,
          "wt": randn(E, C, scale=0.3), "cw": randn(C, C, scale=0.3)}
inputs = {"x": randn(B, T, E), "y": rng.integers(0, C, B * T).astype(np.int64)}
inputs["y"][::4] = 2  # ignored
weights = (rng.random(C) + 0.5).astype(np.float32)
params_const = {"cls_w": weights}
nodes = [
    helper.make_node("MatMul", ["x", "w"], ["h0"]),
    helper.make_node("Add", ["h0", "b"], ["h1"]),
    helper.make_node("Tanh", ["h1"], ["h2"]),
    helper.make_node("Mul", ["h2", "s"], ["h3"]),
    helper.make_node("LeakyRelu", ["h3"], ["h4"], alpha=0.2),
    helper.make_node("Sigmoid", ["h4"], ["h5"]),
    helper.make_node("Mul", ["h5", "h5"], ["h6"]),
    helper.make_node("Add", ["h6", "one"], ["h7"]),
    helper.make_node("Sqrt", ["h7"], ["h8"]),
    helper.make_node("Log", ["h8"], ["h9"]),
    helper.make_node("Erf", ["h9"], ["h10"]),
    helper.make_node("Exp", ["h10"], ["h11"]),
    helper.make_node("Div", ["h11", "g"], ["h12"]),
    helper.make_node("Sub", ["h12", "h1"], ["h13"]),
    helper.make_node("Gelu", ["h13"], ["h14"]),
    helper.make_node("Gelu", ["h14"], ["h15"], approximate="tanh"),
    helper.make_node("Identity", ["h15"], ["h16"]),
    helper.make_node("Transpose", ["h16"], ["t0"], perm=[1, 0, 2]),
    helper.make_node("Unsqueeze", ["t0", "ax0"], ["t1"]),
    helper.make_node("Squeeze", ["t1", "ax0"], ["t2"]),
    helper.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0, 2]),
    helper.make_node("Reshape", ["t3", "shape"], ["t4"]),
    helper.make_node("MatMul", ["t4", "v"], ["z0"]),
    helper.make_node("Softmax", ["z0"], ["p0"], axis=1),
    helper.make_node("MatMul", ["p0", "cw"], ["z1"]),
    helper.make_node("LogSoftmax", ["z1"], ["lp"], axis=1),
    helper.make_node("Flatten", ["t3"], ["f0"], axis=2),
    helper.make_node("Reshape", ["f0", "shape"], ["f1"]),
    helper.make_node("MatMul", ["f1", "wt"], ["z2"]),
    helper.make_node("Add", ["z2", "lp"], ["z"]),
    helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y", "cls_w"], ["loss"],
                     reduction="sum", ignore_index=2),
]
m = model(nodes, params, inputs, ["loss"], opset=20)
for n, a in {**params_const, "one": np.ones((), np.float32),
             "ax0": np.array([0], np.int64),
             "shape": np.array([B * T, E], np.int64)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def zoo(p, i):
    h1 = i["x"] @ p["w"] + p["b"]
    h4 = F.leaky_relu(torch.tanh(h1) * p["s"], 0.2)
    h5 = torch.sigmoid(h4)
    h10 = torch.erf(torch.log(torch.sqrt(h5 * h5 + 1.0)))
    h13 = torch.exp(h10) / p["g"] - h1
    h15 = F.gelu(F.gelu(h13), approximate="tanh")
    t4 = h15.reshape(B * T, E)
    lp = F.log_softmax(torch.softmax(t4 @ p["v"], 1) @ p["cw"], 1)
    z = t4 @ p["wt"] + lp
    return F.cross_entropy(z, i["y"], weight=torch.tensor(weights, dtype=torch.float64),
                           ignore_index=2, reduction="sum")


# cls_w and one are float initializers that are not trained: constants.
run_case("zoo", m, params, inputs, zoo, constants=("cls_w", "one"))

# 3. The MLP with fc1 frozen (amp-autodiff frozen=): no gradient for it,
#    the others as before.
N, D, H, C = 16, 12, 20, 5
params = {"w1": randn(H, D, scale=0.2), "b1": randn(H, scale=0.1),
          "w2": randn(C, H, scale=0.2), "b2": randn(C, scale=0.1)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
           helper.make_node("Sigmoid", ["h"], ["r"]),
           helper.make_node("Gemm", ["w2", "r"], ["zt"], transB=1),
           helper.make_node("Transpose", ["zt"], ["z0"]),
           helper.make_node("Add", ["z0", "b2"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"])
run_case("mlp-frozen", m, params, inputs,
         lambda p, i: F.cross_entropy((p["w2"] @ torch.sigmoid(
             F.linear(i["x"], p["w1"], p["b1"])).T).T + p["b2"], i["y"]),
         frozen=("w1", "b1"))

# 4. Reductions (ReduceSum / ReduceMean, with and without keepdims),
#    GlobalAveragePool, Expand, Where, Concat, Pow and training-mode Dropout
#    (its mask is an output, so the reference applies the same one).
N, C, S = 4, 3, 5
params = {"a": randn(N, C, S, S), "e": randn(1, C, 1, 1, scale=0.3) + 1.5,
          "u": randn(C, 1), "k": randn(2 * C, 4, scale=0.5), "q": randn(N, C, S)}
inputs = {"x": randn(N, C, S, S), "y": rng.integers(0, 4, N).astype(np.int64)}
inputs["cond"] = rng.random((N, C, S)) < 0.5
nodes = [
    helper.make_node("Mul", ["a", "x"], ["m0"]),
    helper.make_node("Abs", ["m0"], ["m0a"]) if False else helper.make_node("Sigmoid", ["m0"], ["m0a"]),
    helper.make_node("Pow", ["m0a", "e"], ["m1"]),
    helper.make_node("Dropout", ["m1", "ratio", "train"], ["m2", "mask"], seed=7),
    helper.make_node("GlobalAveragePool", ["m2"], ["g0"]),              # N C 1 1
    helper.make_node("ReduceSum", ["m2", "ax3"], ["r0"], keepdims=0),  # N C S
    helper.make_node("Where", ["cond", "r0", "q"], ["w0"]),            # N C S
    helper.make_node("ReduceMean", ["w0", "ax2"], ["r1"], keepdims=1),  # N C 1
    helper.make_node("Expand", ["u", "shp"], ["x0"]),                  # N C 1
    helper.make_node("Mul", ["r1", "x0"], ["r2"]),
    helper.make_node("Reshape", ["g0", "shp2"], ["g1"]),               # N C
    helper.make_node("Reshape", ["r2", "shp2"], ["r3"]),               # N C
    helper.make_node("Concat", ["g1", "r3"], ["c0"], axis=1),          # N 2C
    helper.make_node("MatMul", ["c0", "k"], ["z"]),
    helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"]),
]
m = model(nodes, params, inputs, ["loss", "mask"], opset=18)
m.graph.output[1].type.tensor_type.elem_type = TensorProto.BOOL
for n, a in {"ratio": np.array(0.25, np.float32), "train": np.array(True),
             "ax3": np.array([3], np.int64), "ax2": np.array([2], np.int64),
             "shp": np.array([N, C, 1], np.int64), "shp2": np.array([N, C], np.int64)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def reductions(p, i, out):
    mask = torch.tensor(out["mask"].astype(np.float64))
    m2 = torch.sigmoid(p["a"] * i["x"]) ** p["e"] * mask / 0.75
    g0 = m2.mean(dim=(2, 3))
    w0 = torch.where(torch.tensor(inputs["cond"]), m2.sum(3), p["q"])
    r2 = w0.mean(2, keepdim=True) * p["u"].expand(N, C, 1)
    return F.cross_entropy(torch.cat([g0, r2.reshape(N, C)], 1) @ p["k"], i["y"])


run_case("reductions", m, params, {k: v for k, v in inputs.items()}, reductions,
         constants=("ratio",), with_outputs=True)

# 3b. A variational layer (the reparameterisation trick): z = mu + exp(lv / 2)
#     * eps with eps = RandomNormalLike(mu), plus uniform noise
#     (RandomUniformLike), masked by Bernoulli(sigmoid(mu)), whose gradient
#     with respect to its probabilities is zero (torch.bernoulli's). The
#     draws come back as outputs and the reference uses them.
N, D, H, C = 16, 12, 8, 4
params = {"wm": randn(D, H, scale=0.3), "wv": randn(D, H, scale=0.3), "k": randn(H, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "wm"], ["mu"]),
           helper.make_node("MatMul", ["x", "wv"], ["lv"]),
           helper.make_node("Mul", ["lv", "half"], ["lh"]),
           helper.make_node("Exp", ["lh"], ["sd"]),
           helper.make_node("RandomNormalLike", ["mu"], ["eps"]),
           helper.make_node("Mul", ["sd", "eps"], ["se"]),
           helper.make_node("Add", ["mu", "se"], ["z0"]),
           helper.make_node("RandomUniformLike", ["mu"], ["u"], low=-0.1, high=0.1),
           helper.make_node("Add", ["z0", "u"], ["z1"]),
           helper.make_node("Sigmoid", ["mu"], ["pm"]),
           helper.make_node("Bernoulli", ["pm"], ["bm"]),
           helper.make_node("Mul", ["z1", "bm"], ["z2"]),
           helper.make_node("MatMul", ["z2", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss", "eps", "u", "bm"], opset=18)
m.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))


def variational(p, i, out):
    eps, u, bm = (torch.tensor(out[k].astype(np.float64)) for k in ("eps", "u", "bm"))
    mu, lv = i["x"] @ p["wm"], i["x"] @ p["wv"]
    z = (mu + torch.exp(lv * 0.5) * eps + u) * bm
    return F.cross_entropy(z @ p["k"], i["y"])


run_case("variational", m, params, inputs, variational, constants=("half",), with_outputs=True)

# 4a. Max (broadcast), Min of three, Clip (constant bounds): torch.maximum /
#     torch.minimum's gradients, half to each side of a tie (r equals the
#     Max's result at some places, so the Min sees ties), torch.clamp's.
N, D, C = 12, 8, 4
params = {"p": randn(N, D), "q": randn(D, scale=0.5), "r": randn(N, D), "k": randn(D, C, scale=0.5)}
pm = np.maximum(params["p"], params["q"])
tie = rng.random((N, D)) < 0.25
params["r"][tie] = pm[tie]
inputs = {"x": randn(N, D, scale=2.0), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("Max", ["p", "q"], ["m0"]),
           helper.make_node("Min", ["m0", "r", "x"], ["m1"]),
           helper.make_node("Clip", ["m1", "lo", "hi"], ["c"]),
           helper.make_node("MatMul", ["c", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, a in {"lo": np.array(-0.6, np.float32), "hi": np.array(0.7, np.float32)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))
run_case("max-min-clip", m, params, inputs,
         lambda p, i: F.cross_entropy(torch.clamp(torch.minimum(torch.minimum(
             torch.maximum(p["p"], p["q"]), p["r"]), i["x"]), -0.6, 0.7) @ p["k"], i["y"]),
         constants=("lo", "hi"))

# 4a'. Abs, Softplus and Reciprocal (of softplus + 0.5: away from the pole).
#      Abs's gradient is sign(h): x is drawn again until no h lies within
#      0.05 of 0, where bf16's rounding of x and w could flip a sign (seed
#      878139378 had one, 17 % of d w).
params = {"w": randn(D, D, scale=0.5), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
while np.abs(inputs["x"].astype(np.float64) @ params["w"]).min() < 0.05:
    inputs["x"] = randn(N, D)
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Abs", ["h"], ["a"]),
           helper.make_node("Softplus", ["h"], ["sp"]),
           helper.make_node("Add", ["sp", "half"], ["sh"]),
           helper.make_node("Reciprocal", ["sh"], ["r"]),
           helper.make_node("Mul", ["a", "r"], ["ar"]),
           helper.make_node("MatMul", ["ar", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
m.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
run_case("abs-softplus-reciprocal", m, params, inputs,
         lambda p, i: F.cross_entropy(torch.abs(i["x"] @ p["w"]) *
                                      torch.reciprocal(F.softplus(i["x"] @ p["w"]) + 0.5) @ p["k"],
                                      i["y"]),
         constants=("half",))

# 4a'2. Mish (ONNX opset 18): x tanh(softplus(x)) and torch's mish_backward.
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Mish", ["h"], ["a"]),
           helper.make_node("MatMul", ["a", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=18)
run_case("mish", m, params, inputs,
         lambda p, i: F.cross_entropy(F.mish(i["x"] @ p["w"]) @ p["k"], i["y"]))

# 4a2. The activations with parameters (Elu, Celu, Selu, HardSigmoid as
#      torch.nn.Hardsigmoid exports it, HardSwish, Softsign, Sin, Cos,
#      ThresholdedRelu), summed: each one's gradient against torch's.
N, D, C = 12, 8, 4
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
# The kinks (Elu / Selu at 0, ThresholdedRelu's step at 0.2, HardSigmoid /
# HardSwish at +-3): an fp16 / bf16 h rounding across one takes the other
# branch than float64 (seed 756959897: 2.3e-2 on w in fp16), so the data
# keeps every h clear of them by more than the low precision's error.
kinks = np.array([0.0, 0.2, -3.0, 3.0])
while (np.abs((inputs["x"].astype(np.float64) @ params["w"])[..., None] - kinks)
       < 0.03 + 0.02 * np.abs(kinks)).any():
    params["w"], inputs["x"] = randn(D, D, scale=0.8), randn(N, D)
acts = [helper.make_node("Elu", ["h"], ["a0"], alpha=0.7),
        helper.make_node("Celu", ["h"], ["a1"], alpha=1.3),
        helper.make_node("Selu", ["h"], ["a2"]),
        helper.make_node("HardSigmoid", ["h"], ["a3"], alpha=1.0 / 6, beta=0.5),
        helper.make_node("HardSwish", ["h"], ["a4"]),
        helper.make_node("Softsign", ["h"], ["a5"]),
        helper.make_node("Sin", ["h"], ["a6"]),
        helper.make_node("Cos", ["h"], ["a7"]),
        helper.make_node("ThresholdedRelu", ["h"], ["a8"], alpha=0.2)]
sums = [helper.make_node("Add", [f"a{i}" if i == 0 else f"s{i - 1}", f"a{i + 1}"], [f"s{i}"])
        for i in range(len(acts) - 1)]
m = model([helper.make_node("MatMul", ["x", "w"], ["h"])] + acts + sums +
          [helper.make_node("MatMul", [f"s{len(acts) - 2}", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=14)


def activations(p, i):
    h = i["x"] @ p["w"]
    s = (F.elu(h, alpha=0.7) + F.celu(h, alpha=1.3) + F.selu(h) + F.hardsigmoid(h) +
         F.hardswish(h) + F.softsign(h) + torch.sin(h) + torch.cos(h) + F.threshold(h, 0.2, 0.0))
    return F.cross_entropy(s @ p["k"], i["y"])


run_case("activations", m, params, inputs, activations)

# 4a3. Clip with constant bounds on values exactly at the bounds: torch.clamp
#      with scalar bounds passes none of the gradient there (amp.max /
#      amp.min would split it, as torch.clamp does with tensor bounds).
params = {"p": randn(N, D), "k": randn(D, C, scale=0.5)}
at = rng.random((N, D))
params["p"][at < 0.2] = -0.5
params["p"][at > 0.8] = 0.75
m = model([helper.make_node("Clip", ["p", "lo", "hi"], ["c"]),
           helper.make_node("Mul", ["c", "x"], ["cx"]),
           helper.make_node("MatMul", ["cx", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, a in {"lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))
run_case("clip-at-bounds", m, params, inputs,
         lambda p, i: F.cross_entropy((torch.clamp(p["p"], -0.5, 0.75) * i["x"]) @ p["k"], i["y"]),
         constants=("lo", "hi"))

# 4a3'. Every activation with a kink on parameters exactly at it (values
#       exact in fp32, fp16 and bf16): the gradient there is the one torch
#       picks (torch 2.15: LeakyRelu and PRelu the slope at 0, Relu 0,
#       Elu / Selu alpha's side, HardSwish 0 at -3 and 1 at 3, HardSigmoid 0
#       at both corners, ThresholdedRelu 0 at alpha, Shrink 0 at +-lambd,
#       Abs 0). In fp16 an input of exactly 3 is common (3 * b for every b
#       that rounds to 1): a convention off torch's shows in training.
kink_acts = [("LeakyRelu", dict(alpha=0.125), [0.0], lambda t: F.leaky_relu(t, 0.125)),
             ("Relu", {}, [0.0], F.relu),
             ("Elu", dict(alpha=0.75), [0.0], lambda t: F.elu(t, alpha=0.75)),
             ("Celu", dict(alpha=1.5), [0.0], lambda t: F.celu(t, alpha=1.5)),
             ("Selu", {}, [0.0], F.selu),
             ("HardSwish", {}, [-3.0, 3.0], F.hardswish),
             ("HardSigmoid", dict(alpha=1.0 / 6, beta=0.5), [-3.0, 3.0], F.hardsigmoid),
             ("ThresholdedRelu", dict(alpha=0.5), [0.5], lambda t: F.threshold(t, 0.5, 0.0)),
             ("Shrink", dict(lambd=0.5), [-0.5, 0.5], lambda t: F.hardshrink(t, 0.5)),
             ("Abs", {}, [0.0], torch.abs)]
params = {"k": randn(D, C, scale=0.5)}
nodes, terms = [], []
for j, (op, attrs, at, _) in enumerate(kink_acts):
    v = randn(N, D)
    pick = rng.random((N, D))
    for q, point in enumerate(at):  # about 60 % of the elements on a kink
        v[(pick >= q * 0.6 / len(at)) & (pick < (q + 1) * 0.6 / len(at))] = point
    params[f"p{j}"] = v
    nodes.append(helper.make_node(op, [f"p{j}"], [f"a{j}"], **attrs))
    terms.append(f"a{j}")
prelu_v = randn(N, D)
prelu_v[rng.random((N, D)) < 0.6] = 0.0
params["pp"], params["slope"] = prelu_v, np.full((D,), 0.25, np.float32)
nodes.append(helper.make_node("PRelu", ["pp", "slope"], ["ap"]))
terms.append("ap")
for j in range(1, len(terms)):
    nodes.append(helper.make_node("Add", [terms[j - 1] if j == 1 else f"t{j - 1}", terms[j]], [f"t{j}"]))
nodes += [helper.make_node("Mul", [f"t{len(terms) - 1}", "x"], ["tx"]),
          helper.make_node("MatMul", ["tx", "k"], ["z"]),
          helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])]
m = model(nodes, params, inputs, ["loss"], opset=14)


def at_kinks(p, i):
    t = sum(f(p[f"p{j}"]) for j, (_, _, _, f) in enumerate(kink_acts)) + F.prelu(p["pp"], p["slope"])
    return F.cross_entropy((t * i["x"]) @ p["k"], i["y"])


run_case("activations-at-kinks", m, params, inputs, at_kinks)

# 4a4. Floor, Ceil, Round and Sign (gradient 0) times their input: the
#      gradient is theirs (fp32 only: a low-precision input rounding across
#      an integer would move the forward value by 1).
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Floor", ["h"], ["f"]),
           helper.make_node("Ceil", ["h"], ["c"]),
           helper.make_node("Round", ["h"], ["r"]),
           helper.make_node("Sign", ["h"], ["g"]),
           helper.make_node("Add", ["f", "c"], ["fc"]),
           helper.make_node("Add", ["r", "g"], ["rg"]),
           helper.make_node("Add", ["fc", "rg"], ["t"]),
           helper.make_node("Mul", ["t", "h"], ["th"]),
           helper.make_node("MatMul", ["th", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)


def rounding(p, i):
    h = i["x"] @ p["w"]
    t = torch.floor(h) + torch.ceil(h) + torch.round(h) + torch.sign(h)
    return F.cross_entropy((t * h) @ p["k"], i["y"])


run_case("floor-ceil-round-sign", m, params, inputs, rounding, precisions=("fp32",))

# 4a4'. The trigonometric and hyperbolic functions, each on a product
#       squashed into its domain (tanh * 0.9 for asin / acos / atanh,
#       1.1 + softplus for acosh, tanh for tan: away from its poles); the
#       product kept small (cosh grows fast: a saturated softmax would
#       amplify bf16 rounding of s into a different gradient for k).
params = {"w": randn(D, D, scale=0.3), "k": randn(D, C, scale=0.2)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Tanh", ["h"], ["t"]),
           helper.make_node("Mul", ["t", "p9"], ["u"]),
           helper.make_node("Softplus", ["h"], ["sp"]),
           helper.make_node("Add", ["sp", "p11"], ["v"]),
           helper.make_node("Tan", ["t"], ["a1"]),
           helper.make_node("Asin", ["u"], ["a2"]),
           helper.make_node("Acos", ["u"], ["a3"]),
           helper.make_node("Atan", ["h"], ["a4"]),
           helper.make_node("Sinh", ["t"], ["a5"]),
           helper.make_node("Cosh", ["h"], ["a6"]),
           helper.make_node("Asinh", ["h"], ["a7"]),
           helper.make_node("Acosh", ["v"], ["a8"]),
           helper.make_node("Atanh", ["u"], ["a9"]),
           helper.make_node("Sum", [f"a{i}" for i in range(1, 10)], ["s"]),
           helper.make_node("MatMul", ["s", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, a in {"p9": np.array(0.9, np.float32), "p11": np.array(1.1, np.float32)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def trig(p, i):
    h = i["x"] @ p["w"]
    t = torch.tanh(h)
    u, v = t * 0.9, F.softplus(h) + 1.1
    s = (torch.tan(t) + torch.asin(u) + torch.acos(u) + torch.atan(h) + torch.sinh(t) + torch.cosh(h)
         + torch.asinh(h) + torch.acosh(v) + torch.atanh(u))
    return F.cross_entropy(s @ p["k"], i["y"])


run_case("trigonometric", m, params, inputs, trig, constants=("p9", "p11"))

# 4a4''. Mod: fmod = 1 (torch.fmod) and, on floats computed as Python's %,
#        torch.remainder's gradients (dy to a; -dy * trunc / floor(a / b)
#        to b), with a broadcast divisor.
params = {"w": randn(6, 6, scale=0.8), "dv": (rng.uniform(0.5, 1.5, 6) * rng.choice([-1, 1], 6)).astype(np.float32),
          "k": randn(6, 3, scale=0.5)}
inputs = {"x": randn(5, 6), "y": rng.integers(0, 3, 5).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Mod", ["h", "dv"], ["f"], fmod=1),
           helper.make_node("Mul", ["h", "h"], ["h2"]),
           helper.make_node("Mod", ["h2", "dv"], ["f2"], fmod=1),
           helper.make_node("Add", ["f", "f2"], ["t"]),
           helper.make_node("MatMul", ["t", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)


def mods(p, i):
    h = i["x"] @ p["w"]
    t = torch.fmod(h, p["dv"]) + torch.fmod(h * h, p["dv"])
    return F.cross_entropy(t @ p["k"], i["y"])


# fp32 only: a low-precision product rounding across a multiple of the
# divisor jumps the remainder by a whole divisor.
run_case("fmod", m, params, inputs, mods, precisions=("fp32",))

# 4a5. Comparisons and logical ops building masks (no gradient of their
#      own; amp.where carries it): a leaky ReLU written as
#      Where(Greater(h, 0), h, 0.1 h), and the logits of rows whose label
#      id passes a test (every comparison and logical op on int64 ids)
#      replaced by a constant, as a padding mask does.
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64),
          "ids": rng.integers(0, 8, (N, 1)).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Greater", ["h", "zero"], ["pos"]),
           helper.make_node("Mul", ["h", "tenth"], ["h10"]),
           helper.make_node("Where", ["pos", "h", "h10"], ["lr"]),
           helper.make_node("MatMul", ["lr", "k"], ["z"]),
           helper.make_node("Equal", ["ids", "i0"], ["e0"]),
           helper.make_node("GreaterOrEqual", ["ids", "i3"], ["ge3"]),
           helper.make_node("Less", ["ids", "i5"], ["lt5"]),
           helper.make_node("Not", ["lt5"], ["nlt5"]),
           helper.make_node("And", ["ge3", "nlt5"], ["mid"]),
           helper.make_node("LessOrEqual", ["ids", "i6"], ["le6"]),
           helper.make_node("Xor", ["mid", "le6"], ["x1"]),
           helper.make_node("Or", ["e0", "x1"], ["mask"]),
           helper.make_node("Where", ["mask", "fill", "z"], ["zm"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["zm", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
consts = {"zero": np.array(0.0, np.float32), "tenth": np.array(0.1, np.float32),
          "fill": np.array(-2.0, np.float32), "i0": np.array(0, np.int64),
          "i3": np.array(3, np.int64), "i5": np.array(5, np.int64), "i6": np.array(6, np.int64)}
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def masked(p, i):
    h = i["x"] @ p["w"]
    z = torch.where(h > 0, h, h * 0.1) @ p["k"]
    ids = i["ids"]
    mask = (ids == 0) | (((ids >= 3) & ~(ids < 5)) ^ (ids <= 6))
    return F.cross_entropy(torch.where(mask, torch.tensor(-2.0, dtype=z.dtype), z), i["y"])


run_case("compare-logical-masks", m, params, inputs, masked, constants=tuple(consts))

# 4a6. PRelu (a learned slope per column), Tile, Trilu (k = 1, lower), the
#      composed reductions (ReduceL2, ReduceLogSumExp, ReduceMin with ties
#      at the masked zeros, ReduceL1, ReduceSumSquare, ReduceLogSum of a
#      Softplus) and Mean: against torch.prelu, tile, tril, norm, logsumexp,
#      amin (ties shared evenly), ...
params = {"w": randn(D, D, scale=0.8), "slope": randn(D, scale=0.3),
          "k2": randn(2 * D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
red = [("ReduceL2", "r0"), ("ReduceLogSumExp", "r1"), ("ReduceMin", "r2"), ("ReduceL1", "r3"),
       ("ReduceSumSquare", "r4")]
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("PRelu", ["h", "slope"], ["p"]),
           helper.make_node("Tile", ["p", "reps"], ["tl"]),
           helper.make_node("Trilu", ["tl", "one"], ["t"], upper=0),
           helper.make_node("Softplus", ["t"], ["sp"]),
           helper.make_node("ReduceLogSum", ["sp", "ax"], ["r5"], keepdims=1)] +
          [helper.make_node(op, ["t", "ax"], [o], keepdims=1) for op, o in red] +
          [helper.make_node("Mean", ["r0", "r1", "r2", "r3", "r5"], ["mean"]),
           helper.make_node("Mul", ["r4", "hundredth"], ["r4s"]),
           helper.make_node("Add", ["mean", "r4s"], ["s"]),
           helper.make_node("Mul", ["t", "s"], ["ts"]),
           helper.make_node("MatMul", ["ts", "k2"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=18)
consts = {"reps": np.array([1, 2], np.int64), "one": np.array(1, np.int64),
          "ax": np.array([1], np.int64), "hundredth": np.array(0.01, np.float32)}
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def composed(p, i):
    h = i["x"] @ p["w"]
    t = torch.tril(F.prelu(h, p["slope"]).tile(1, 2), 1)
    r = [torch.sqrt((t * t).sum(1, keepdim=True)), torch.logsumexp(t, 1, keepdim=True),
         t.amin(1, keepdim=True), t.abs().sum(1, keepdim=True),
         torch.log(F.softplus(t).sum(1, keepdim=True))]
    s = sum(r) / 5 + (t * t).sum(1, keepdim=True) * 0.01
    return F.cross_entropy((t * s) @ p["k2"], i["y"])


# fp16's slope gradient has a rare tail: AMP_TEST_SEED=2161733750 gives
# 0.0309 (fp16) against 0.0059 (bf16) on the same draw, the same at 0f9615c
# (before the runtime changes of its session), 1 failure in about 25 full
# runs; the other gradients of the case stay below 5e-3. bf16 being 5x
# closer points at fp16's range (small products of the slope's sum going
# subnormal) rather than a tie; still open (see the notes of that session).
# A wrong rule errs by O(1): the tolerance is 2.5x for this case.
run_case("prelu-tile-trilu-reductions", m, params, inputs, composed, constants=tuple(consts),
         half_tol_scale=2.5)

# 4a7. Pad in its modes (constant with a value, edge, reflect, wrap, and
#      negative pads that crop): against torch's F.pad (replicate, reflect,
#      circular on a 4-D view).
params = {"w": randn(D, D, scale=0.8), "k4": randn(D + 4, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
pads = {"pc": ([1, 2, 1, 2], "constant"), "pe": ([2, 1, 0, 3], "edge"),
        "pr": ([0, 3, 2, 1], "reflect"), "pn": ([3, 4, -1, 0], "constant"),
        "pw": ([1, 2, 1, 2], "wrap")}
nodes = [helper.make_node("MatMul", ["x", "w"], ["h"])]
consts = {"half": np.array(0.5, np.float32), "s0": np.array([1], np.int64),
          "s1": np.array([N + 1], np.int64), "s2": np.array([0], np.int64)}
for name, (p, mode) in pads.items():
    consts[name + "_p"] = np.array(p, np.int64)
    ins = ["h", name + "_p"] + (["half"] if name == "pc" else [])
    nodes.append(helper.make_node("Pad", ins, [name], mode=mode))
m = model(nodes + [helper.make_node("Sum", list(pads), ["s"]),
                   helper.make_node("MatMul", ["s", "k4"], ["zz"]),
                   helper.make_node("Slice", ["zz", "s0", "s1", "s2"], ["z"]),
                   helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=19)
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def padded(p, i):
    h = i["x"] @ p["w"]
    h4 = h[None, None]
    s = (F.pad(h, (2, 2, 1, 1), value=0.5) + F.pad(h4, (1, 3, 2, 0), mode="replicate")[0, 0] +
         F.pad(h4, (3, 1, 0, 2), mode="reflect")[0, 0] + F.pad(h, (4, 0, 3, -1)) +
         F.pad(h4, (2, 2, 1, 1), mode="circular")[0, 0])
    return F.cross_entropy((s @ p["k4"])[1:N + 1], i["y"])


run_case("pad-modes", m, params, inputs, padded, constants=tuple(consts))

# 4a8. GatherElements (torch.gather): the log-probability of each label
#      picked from a LogSoftmax (a hand-written NLL loss), and rows of a
#      parameter picked along axis 0 with repeats and negative indices (the
#      gradient sums the repeats).
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5), "t": randn(5, D)}
inputs = {"x": randn(N, D), "lab": rng.integers(0, C, (N, 1)).astype(np.int64),
          "rows": rng.integers(-5, 5, (N, D)).astype(np.int64)}
m = model([helper.make_node("GatherElements", ["t", "rows"], ["tr"], axis=0),
           helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Add", ["h", "tr"], ["ht"]),
           helper.make_node("MatMul", ["ht", "k"], ["z"]),
           helper.make_node("LogSoftmax", ["z"], ["lp"], axis=1),
           helper.make_node("GatherElements", ["lp", "lab"], ["picked"], axis=1),
           helper.make_node("ReduceMean", ["picked"], ["mean"], keepdims=0),
           helper.make_node("Neg", ["mean"], ["loss"])],
          params, inputs, ["loss"], opset=13)


def gathered(p, i):
    rows = i["rows"] % 5
    h = i["x"] @ p["w"] + torch.gather(p["t"], 0, rows)
    lp = F.log_softmax(h @ p["k"], dim=1)
    return -torch.gather(lp, 1, i["lab"]).mean()


run_case("gather-elements", m, params, inputs, gathered)

# 4a8'. Scatters and GatherND: ScatterElements (torch.scatter, unique
#       indices; and scatter_add with repeats), ScatterND (index_put, and
#       with accumulate=True and a repeated row), GatherND (advanced indexing
#       by index tuples, batch_dims 0 and 1). Gradients flow to data and
#       updates alike.
params = {"d1": randn(4, 5), "u1": randn(2, 5), "d2": randn(3, 4), "u2": randn(3, 4),
          "d3": randn(4, 3, 2), "u3": randn(3, 3, 2), "d4": randn(2, 3, 4), "k": randn(5, 3, scale=0.5)}
perm = np.stack([rng.permutation(4)[:2] for _ in range(5)], 1).astype(np.int64)  # [2, 5] unique per column
inputs = {"x": randn(3, 5), "y": rng.integers(0, 3, 3).astype(np.int64)}
consts = {"i1": perm, "i2": rng.integers(0, 4, (3, 4)).astype(np.int64),
          "i3": np.array([[1, 2], [3, 0], [1, 2]], np.int64)[:, :1].copy(),
          "i4": np.array([[[1, 2], [0, 0]], [[-2, 1], [1, -1]]], np.int64),
          "i5": np.array([[[2], [0]], [[1], [2]]], np.int64)}
m = model([helper.make_node("ScatterElements", ["d1", "i1", "u1"], ["s1"], axis=0),
           helper.make_node("ScatterElements", ["d2", "i2", "u2"], ["s2"], axis=1, reduction="add"),
           helper.make_node("ScatterND", ["d3", "i3", "u3"], ["s3"], reduction="add"),
           helper.make_node("GatherND", ["d4", "i4"], ["g4"]),
           helper.make_node("GatherND", ["d4", "i5"], ["g5"], batch_dims=1),
           helper.make_node("MatMul", ["x", "k"], ["h"]),
           helper.make_node("ReduceSum", ["s1"], ["r1"], keepdims=0),
           helper.make_node("ReduceSum", ["s2"], ["r2"], keepdims=0),
           helper.make_node("ReduceSum", ["s3"], ["r3"], keepdims=0),
           helper.make_node("ReduceSum", ["g4"], ["r4"], keepdims=0),
           helper.make_node("ReduceSum", ["g5"], ["r5"], keepdims=0),
           helper.make_node("Sum", ["r1", "r2", "r3", "r4", "r5"], ["r"]),
           # r (a sum of ~130 squares) scaled to ~3: logits of ~100 saturate
           # the softmax, whose gradient then underflows in fp16 (seed
           # 3964722719: d loss / d k all zero in fp16).
           helper.make_node("Mul", ["r", "rscale"], ["rs"]),
           helper.make_node("Mul", ["h", "rs"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=16)
consts["rscale"] = np.array(0.02, np.float32)
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))
# Sum of squares, so that each scattered / gathered position matters.
for node in m.graph.node:
    if node.op_type == "ReduceSum":
        node.op_type = "ReduceSumSquare"


def scatters(p, i):
    t = {k: torch.tensor(v) for k, v in consts.items()}
    s1 = p["d1"].scatter(0, t["i1"], p["u1"])
    s2 = p["d2"].scatter_add(1, t["i2"], p["u2"])
    s3 = p["d3"].index_put((t["i3"][:, 0],), p["u3"], accumulate=True)
    g4 = p["d4"][t["i4"][..., 0], t["i4"][..., 1]]
    g5 = torch.stack([p["d4"][b][t["i5"][b][:, 0]] for b in range(2)])
    r = sum((v * v).sum() for v in (s1, s2, s3, g4, g5))
    return F.cross_entropy((i["x"] @ p["k"]) * (r * 0.02), i["y"])


run_case("scatter-gathernd", m, params, inputs, scatters, constants=("rscale",))

# 4a8''. TopK (torch.topk): the values' gradient goes back to the chosen
#        positions; the largest 3 of each row and the smallest 2 along axis 0.
#        The values are 0.1 apart (a rounding to bf16 moves them by < 0.02):
#        no near-tie can pick other elements than float64 torch does.
params = {"a": (rng.permutation(70).reshape(10, 7) * 0.1 - 3.5).astype(np.float32),
          "k": randn(5, 4, scale=0.5)}
inputs = {"x": randn(10, 7), "y": rng.integers(0, 4, 10).astype(np.int64)}
m = model([helper.make_node("MatMul", ["a", "eye"], ["h0"]),   # in the low precision, exactly
           helper.make_node("Mul", ["h0", "x"], ["h"]),
           helper.make_node("TopK", ["h0", "k3"], ["v", "iv"], axis=1),
           helper.make_node("TopK", ["h0", "k2"], ["s", "is"], axis=0, largest=0),
           helper.make_node("ReduceSum", ["s", "ax0"], ["sr"], keepdims=0),
           helper.make_node("Slice", ["sr", "st", "en"], ["s5"]),
           helper.make_node("Concat", ["v", "v"], ["vv"], axis=1),
           helper.make_node("Slice", ["vv", "st", "en", "one"], ["v5"]),
           helper.make_node("Add", ["v5", "s5"], ["t"]),
           helper.make_node("ReduceSum", ["h", "one"], ["hs"]),
           helper.make_node("Add", ["t", "hs"], ["t2"]),
           helper.make_node("MatMul", ["t2", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, a in {"k3": np.array([3], np.int64), "k2": np.array([2], np.int64), "ax0": np.array([0], np.int64),
             "st": np.array([0], np.int64), "en": np.array([5], np.int64), "one": np.array([1], np.int64),
             "eye": np.eye(7, dtype=np.float32)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def topks(p, i):
    h0 = p["a"]
    v = torch.topk(h0, 3, dim=1).values
    s = torch.topk(h0, 2, dim=0, largest=False).values.sum(0)[:5]
    hs = (h0 * i["x"]).sum(1, keepdim=True)
    return F.cross_entropy((torch.cat([v, v], 1)[:, :5] + s + hs) @ p["k"], i["y"])


run_case("topk", m, params, inputs, topks, constants=("eye",))

# 4a8c. LRN (F.local_response_norm, odd sizes: ONNX and torch pad the
#       channel window alike), MeanVarianceNormalization, Shrink (soft and
#       hard), Compress (index_select), ReverseSequence, MaxUnpool
#       (F.max_unpool2d, ONNX's indices flat over the whole tensor).
params = {"c": randn(2, 6, 3, 4), "m": randn(2, 3, 4, 2), "s": randn(4, 5), "r": randn(4, 3, 2),
          "u": randn(2, 2, 2, 3)}
inputs = {"x": randn(2, 6, 3, 4)}
keep = np.array([1, 0, 1, 1, 0], bool)
lens = np.array([4, 1, 3], np.int64)
upos = np.stack([rng.choice(24, 6, replace=False) for _ in range(4)]).reshape(2, 2, 2, 3)  # in a 4x6 plane
uidx = (upos + (np.arange(4).reshape(2, 2, 1, 1) * 24)).astype(np.int64)               # flat over [2, 2, 4, 6]
mvw = randn(2, 3, 4, 2)  # MVN's output has a fixed norm: weighed by random data
m = model([helper.make_node("LRN", ["c"], ["l1"], size=3, alpha=0.3, beta=0.6, bias=1.5),
           helper.make_node("Mul", ["l1", "x"], ["l2"]),
           helper.make_node("LRN", ["l2"], ["l3"], size=5),
           helper.make_node("MeanVarianceNormalization", ["m"], ["mv0"]),
           helper.make_node("Mul", ["mv0", "mvw"], ["mv"]),
           helper.make_node("Shrink", ["s"], ["sh1"], lambd=0.4, bias=0.4),
           helper.make_node("Shrink", ["s"], ["sh2"], lambd=0.7),
           helper.make_node("Compress", ["sh1", "keep"], ["cp"], axis=1),
           helper.make_node("ReverseSequence", ["r", "lens"], ["rv"], batch_axis=1, time_axis=0),
           helper.make_node("MaxUnpool", ["u", "uidx"], ["up"], kernel_shape=[2, 2], strides=[2, 2]),
           *[helper.make_node("ReduceSumSquare", [v], [f"q{j}"], keepdims=0)
             for j, v in enumerate(["l3", "mv", "sh2", "cp", "rv", "up"])],
           helper.make_node("Sum", ["q0", "q1", "q2", "q3", "q4", "q5"], ["loss"])],
          params, inputs, ["loss"], opset=13)
wts = {"keep": keep, "lens": lens, "uidx": uidx, "mvw": mvw}
for n, a in wts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def misc(p, i):
    l1 = F.local_response_norm(p["c"], 3, alpha=0.3, beta=0.6, k=1.5)
    l3 = F.local_response_norm(l1 * i["x"], 5)
    d = p["m"] - p["m"].mean((0, 2, 3), keepdim=True)
    mv = d / ((d * d).mean((0, 2, 3), keepdim=True).sqrt() + 1e-9) * torch.tensor(mvw, dtype=torch.float64)
    sh1, sh2 = F.softshrink(p["s"], 0.4), F.hardshrink(p["s"], 0.7)
    cp = sh1[:, torch.tensor(np.nonzero(keep)[0])]
    rv = torch.stack([torch.cat([p["r"][:l, b].flip(0), p["r"][l:, b]]) for b, l in enumerate(lens)], 1)
    up = F.max_unpool2d(p["u"], torch.tensor(upos), 2, 2, output_size=(4, 6))
    return sum((v * v).sum() for v in (l3, mv, sh2, cp, rv, up))


run_case("lrn-mvn-shrink-compress-reverse-unpool", m, params, inputs, misc, constants=tuple(wts))

# 4a9. Resize: nearest (x2 scales, asymmetric / floor: torch's nearest),
#      linear (sizes, half_pixel: bilinear, align_corners False) and cubic
#      (sizes, align_corners: bicubic) against F.interpolate.
params = {"w": randn(D, D, scale=0.8), "k16": randn(16, C, scale=0.5)}
inputs = {"x": randn(N, D), "y24": rng.integers(0, C, 24).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Reshape", ["h", "s4"], ["h4"]),
           helper.make_node("Resize", ["h4", "", "sc"], ["un"], mode="nearest",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
           helper.make_node("Resize", ["h4", "", "", "sz"], ["ul"], mode="linear"),
           helper.make_node("Resize", ["h4", "", "", "sz"], ["uc"], mode="cubic",
                            coordinate_transformation_mode="align_corners"),
           helper.make_node("Sum", ["un", "ul", "uc"], ["u"]),
           helper.make_node("Reshape", ["u", "s2"], ["u2"]),
           helper.make_node("MatMul", ["u2", "k16"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y24"], ["loss"])],
          params, inputs, ["loss"], opset=13)
consts = {"s4": np.array([2, 1, 6, 8], np.int64), "sc": np.array([1, 1, 2, 2], np.float32),
          "sz": np.array([2, 1, 12, 16], np.int64), "s2": np.array([24, 16], np.int64)}
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def resized(p, i):
    h4 = (i["x"] @ p["w"]).reshape(2, 1, 6, 8)
    u = (F.interpolate(h4, scale_factor=2, mode="nearest") +
         F.interpolate(h4, size=(12, 16), mode="bilinear", align_corners=False) +
         F.interpolate(h4, size=(12, 16), mode="bicubic", align_corners=True))
    return F.cross_entropy(u.reshape(24, 16) @ p["k16"], i["y24"])


run_case("resize", m, params, inputs, resized, constants=tuple(consts))

# 4a10. CumSum (inclusive forward, exclusive reverse): the gradient is the
#       sum the other way round, against torch.cumsum / flip.
params = {"w": randn(D, D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("CumSum", ["h", "ax1"], ["c1"]),
           helper.make_node("CumSum", ["h", "ax0"], ["c2"], exclusive=1, reverse=1),
           helper.make_node("Add", ["c1", "c2"], ["c"]),
           helper.make_node("MatMul", ["c", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
consts = {"ax1": np.array(1, np.int64), "ax0": np.array(0, np.int64)}
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def cumsums(p, i):
    h = i["x"] @ p["w"]
    rev_ex = torch.flip(torch.cumsum(torch.flip(h, [0]), 0), [0]) - h
    return F.cross_entropy((torch.cumsum(h, 1) + rev_ex) @ p["k"], i["y"])


run_case("cumsum", m, params, inputs, cumsums, constants=tuple(consts))

# 4a11. Negative axes in gradient rules (torch.cat(dim=-1) and index_select
#       on the last dim export so): Concat axis -1 and Gather axis -1 (the
#       gather's gradient was refused, the concat's read a dim out of range).
params = {"w": randn(D, D, scale=0.8), "k2": randn(2 * D - 3, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64),
          "cols": rng.integers(-D, D, D - 3).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Gather", ["h", "cols"], ["g"], axis=-1),
           helper.make_node("Concat", ["h", "g"], ["c"], axis=-1),
           helper.make_node("MatMul", ["c", "k2"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)


def negative_axes(p, i):
    h = i["x"] @ p["w"]
    return F.cross_entropy(torch.cat([h, h[:, i["cols"] % D]], -1) @ p["k2"], i["y"])


run_case("negative-axes", m, params, inputs, negative_axes)

# 4a12. Gathers by distinct indices (attention's q, k, v = qkv[0], qkv[1],
#       qkv[2], and a permutation that leaves a row out): each gradient
#       places dy's blocks at their rows with zeros elsewhere (the runtime's
#       copy path), their sum is qkv's gradient.
params = {"w": randn(D, 3 * D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Reshape", ["h", "shp"], ["qkv"]),             # N 3 D
           helper.make_node("Transpose", ["qkv"], ["t"], perm=[1, 0, 2]),  # 3 N D
           helper.make_node("Gather", ["t", "i0"], ["q"], axis=0),
           helper.make_node("Gather", ["t", "i1"], ["kk"], axis=0),
           helper.make_node("Gather", ["t", "perm"], ["pv"], axis=0),      # 2 N D
           helper.make_node("Mul", ["q", "kk"], ["qk"]),
           helper.make_node("ReduceSum", ["pv", "ax0"], ["vs"], keepdims=0),
           helper.make_node("Mul", ["pv", "pv"], ["p2"]),
           helper.make_node("ReduceSum", ["p2", "ax0"], ["v2"], keepdims=0),
           helper.make_node("Add", ["qk", "vs"], ["s0"]),
           helper.make_node("Add", ["s0", "v2"], ["s"]),
           helper.make_node("MatMul", ["s", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, arr in {"shp": [N, 3, D], "i0": np.array(0), "i1": np.array(-2), "perm": [2, 0],
               "ax0": [0]}.items():
    m.graph.initializer.append(numpy_helper.from_array(np.array(arr, np.int64), n))


def distinct_gathers(p, i):
    t = (i["x"] @ p["w"]).reshape(N, 3, D).transpose(0, 1)
    pv = t[[2, 0]]
    return F.cross_entropy((t[0] * t[1] + pv.sum(0) + (pv * pv).sum(0)) @ p["k"], i["y"])


run_case("distinct-gathers", m, params, inputs, distinct_gathers, constants=("shp", "i0", "i1", "perm", "ax0"))

# 4a13. Gathers of every index once (q, k, v = qkv[0], qkv[1], qkv[-1]): their
#       gradients are one concatenation of the three dy's, not three
#       zero-filled placements and their sum; with a fourth use of qkv (a
#       sum over it) added to that.
params = {"w": randn(D, 3 * D, scale=0.8), "k": randn(D, C, scale=0.5)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Reshape", ["h", "shp"], ["qkv"]),             # N 3 D
           helper.make_node("Transpose", ["qkv"], ["t"], perm=[1, 0, 2]),  # 3 N D
           helper.make_node("Gather", ["t", "i0"], ["q"], axis=0),
           helper.make_node("Gather", ["t", "i2"], ["v"], axis=0),
           helper.make_node("Gather", ["t", "i1"], ["kk"], axis=0),
           helper.make_node("Mul", ["q", "kk"], ["qk"]),
           helper.make_node("Mul", ["v", "v"], ["v2"]),
           helper.make_node("ReduceSum", ["t", "ax0"], ["ts"], keepdims=0),
           helper.make_node("Add", ["qk", "v2"], ["s0"]),
           helper.make_node("Add", ["s0", "ts"], ["s"]),
           helper.make_node("MatMul", ["s", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)
for n, arr in {"shp": [N, 3, D], "i0": np.array(0), "i1": np.array(1), "i2": np.array(-1),
               "ax0": [0]}.items():
    m.graph.initializer.append(numpy_helper.from_array(np.array(arr, np.int64), n))


def every_index_gathered(p, i):
    t = (i["x"] @ p["w"]).reshape(N, 3, D).transpose(0, 1)
    return F.cross_entropy((t[0] * t[1] + t[2] * t[2] + t.sum(0)) @ p["k"], i["y"])


run_case("every-index-gathered", m, params, inputs, every_index_gathered,
         constants=("shp", "i0", "i1", "i2", "ax0"))

# 4b. Gather (an embedding table, indices repeated and negative), Slice
#     (strided, and a negative step) and ReduceMax (ties shared evenly, as
#     torch.amax does). ReduceMax is compared in fp32 only: in fp16 / bf16
#     distinct values can round to a tie, which rightly moves the gradient.
N, T, V, D, L = 4, 3, 7, 5, 6
idx = rng.integers(-V, V, (N, T)).astype(np.int64)
idx[:, 1] = idx[:, 0]  # every row gathers one table row twice: a tie in ReduceMax
for with_max in (False, True):
    params = {"emb": randn(V, D), "a": randn(N, L, D), "w": randn(D, 3, scale=0.5)}
    inputs = {"idx": idx, "y": rng.integers(0, 3, N).astype(np.int64)}
    nodes = [
        helper.make_node("Gather", ["emb", "idx"], ["g"], axis=0),          # N T D
        helper.make_node("Slice", ["a", "st1", "en1", "ax1", "sp1"], ["s1"]),  # N 2 D
        helper.make_node("Slice", ["a", "st2", "en2", "ax2", "sp2"], ["s2"]),  # N 2 D
        helper.make_node("Add", ["s1", "s2"], ["s3"]),
        helper.make_node("Concat", ["g", "s3"], ["c"], axis=1),             # N T+2 D
        helper.make_node("ReduceMax" if with_max else "ReduceSum", ["c", "rax"], ["r"],
                         keepdims=0),                                       # N D
        helper.make_node("MatMul", ["r", "w"], ["z"]),
        helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"]),
    ]
    m = model(nodes, params, inputs, ["loss"])
    for n, arr in {"st1": [1, 0], "en1": [5, 5], "ax1": [1, 2], "sp1": [2, 1],
                   "st2": [4], "en2": [0], "ax2": [1], "sp2": [-2],
                   "rax": [1]}.items():
        m.graph.initializer.append(numpy_helper.from_array(np.array(arr, np.int64), n))

    def gathered(p, i, with_max=with_max):
        g = p["emb"][i["idx"]]
        s3 = p["a"][:, 1:5:2, :] + p["a"][:, [4, 2], :]
        c = torch.cat([g, s3], 1)
        r = c.amax(1) if with_max else c.sum(1)
        return F.cross_entropy(r @ p["w"], i["y"])

    run_case("reduce-max-gather-slice" if with_max else "gather-slice", m, params, inputs,
             gathered, precisions=("fp32",) if with_max else ("fp32", "fp16", "bf16"))

# 4a13. ONNX sequences as torch.export writes torch.split / chunk
#       (SplitToSequence with a scalar size, the last part smaller; with
#       sizes; with neither and keepdims = 0), SequenceAt (negative
#       positions), SequenceConstruct / Insert / Erase / Length,
#       ConcatFromSequence (stacked with new_axis); and an Expand of a
#       weight's folded Shape (torch.export's expand of a dimension list)
#       giving a Reshape's shape.
N, D, C = 6, 7, 4
params = {"w": randn(D, 3 * D, scale=0.8), "k": randn(D, C, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64)}
m = model([helper.make_node("MatMul", ["x", "w"], ["h"]),                      # N 3D
           helper.make_node("SplitToSequence", ["h", "seven"], ["s3"], axis=1),  # 7 7 7
           helper.make_node("SequenceAt", ["s3", "i0"], ["a"]),
           helper.make_node("SequenceAt", ["s3", "im1"], ["b"]),
           helper.make_node("SplitToSequence", ["h", "five"], ["s5"], axis=-1),  # 5 5 5 5 1
           helper.make_node("SequenceAt", ["s5", "im1"], ["last"]),              # N 1
           helper.make_node("SequenceAt", ["s5", "i1"], ["c5"]),                 # N 5
           helper.make_node("ReduceSum", ["c5", "ax1"], ["c5s"], keepdims=1),
           helper.make_node("SplitToSequence", ["h", "sizes"], ["ss"], axis=1),  # 4 10 7
           helper.make_node("SequenceAt", ["ss", "im1"], ["c"]),                 # N 7
           helper.make_node("SequenceAt", ["ss", "im3"], ["f4"]),                # N 4
           helper.make_node("ReduceSum", ["f4", "ax1"], ["f4s"], keepdims=1),
           helper.make_node("Mul", ["a", "b"], ["ab"]),
           helper.make_node("Mul", ["ab", "last"], ["abl"]),
           helper.make_node("SplitToSequence", ["c"], ["cols"], axis=1, keepdims=0),  # 7 x [N]
           helper.make_node("SequenceErase", ["cols", "i0"], ["cols6"]),
           helper.make_node("SequenceAt", ["cols", "i0"], ["col0"]),
           helper.make_node("Neg", ["col0"], ["ncol0"]),
           helper.make_node("SequenceInsert", ["cols6", "ncol0"], ["cols7"]),  # at the back
           helper.make_node("ConcatFromSequence", ["cols7"], ["cstack"], axis=1, new_axis=1),
           helper.make_node("SequenceConstruct", ["abl", "cstack", "ab"], ["trio"]),
           helper.make_node("SequenceLength", ["trio"], ["n3s"]),
           helper.make_node("Unsqueeze", ["n3s", "ax0"], ["n3"]),
           helper.make_node("ConcatFromSequence", ["trio"], ["cat"], axis=0),  # 3N D
           helper.make_node("Shape", ["w"], ["wshape"], start=0, end=1),        # [D]
           helper.make_node("Expand", ["wshape", "one1"], ["dlist"]),            # [D]
           helper.make_node("Concat", ["n3", "nn", "dlist"], ["shp"], axis=0),   # [3, N, D]
           helper.make_node("Reshape", ["cat", "shp"], ["r3"]),
           helper.make_node("ReduceSum", ["r3", "ax0"], ["sum3"], keepdims=0),
           helper.make_node("Add", ["sum3", "c5s"], ["z0"]),
           helper.make_node("Mul", ["z0", "f4s"], ["z1"]),
           helper.make_node("MatMul", ["z1", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=18)
consts = {"seven": np.array(D), "five": np.array(5), "sizes": [4, 10, 7], "i0": np.array(0),
          "im1": np.array(-1), "i1": np.array(1), "im3": np.array(-3), "one1": [1],
          "nn": [N], "ax0": [0], "ax1": [1]}
for n, arr in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(np.array(arr, np.int64), n))


def sequences(p, i):
    h = i["x"] @ p["w"]
    ab = h[:, 0:D] * h[:, 2 * D:]
    c = h[:, 14:]
    cstack = torch.cat([c[:, 1:], -c[:, :1]], 1)
    cat = torch.stack([ab * h[:, 3 * D - 1:], cstack, ab])
    z = (cat.sum(0) + h[:, 5:10].sum(1, keepdim=True)) * h[:, 0:4].sum(1, keepdim=True)
    return F.cross_entropy(z @ p["k"], i["y"])


# (Products of three activations, sums of signed parts and their product:
# a heavy rounding tail in fp16 / bf16. 120 gradients over 60 fresh draws:
# median 6e-4 / 4.7e-3, largest 9.9e-3 / 6.5e-2, and seen in full runs
# 1.8e-2 (fp16, AMP_TEST_SEED=2943360926) and 0.114 (bf16, seed 441490956)
# against the default 1.5e-2 / 8e-2; a wrong rule errs by O(1).)
run_case("sequences", m, params, inputs, sequences, constants=tuple(consts), half_tol_scale=3.0)

# 4b'. ReduceProd (torch.prod): rows with no zero, one zero (its gradient is
#      the product of the others) and two zeros (no gradient), over one axis
#      and, keepdims off, over two.
pa = rng.uniform(0.6, 1.4, (4, 5)).astype(np.float32) * rng.choice([-1, 1], (4, 5)).astype(np.float32)
pa[1, 2] = 0.0
pa[2, 0] = pa[2, 3] = 0.0
params = {"pa": pa, "pb": rng.uniform(0.7, 1.3, (2, 3, 4)).astype(np.float32), "k": randn(4, 3, scale=0.5)}
inputs = {"x": randn(4, 4), "y": rng.integers(0, 3, 4).astype(np.int64)}
m = model([helper.make_node("ReduceProd", ["pa", "ax1"], ["r1"], keepdims=1),
           helper.make_node("ReduceProd", ["pb", "ax01"], ["r2"], keepdims=0),
           helper.make_node("Mul", ["x", "r1"], ["h"]),
           helper.make_node("Add", ["h", "r2"], ["h2"]),
           helper.make_node("MatMul", ["h2", "k"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["ce"]),
           # (r2 also directly: its gradient through the loss alone is a
           # sum over rows that cancels, too small to measure in bf16)
           helper.make_node("Mul", ["r2", "c4"], ["r2c"]),
           helper.make_node("ReduceSum", ["r2c"], ["r2s"], keepdims=0),
           helper.make_node("Add", ["ce", "r2s"], ["loss"])],
          params, inputs, ["loss"], opset=18)
c4 = randn(4)
for n, a in {"ax1": np.array([1], np.int64), "ax01": np.array([0, 1], np.int64), "c4": c4}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def prods(p, i):
    r2 = p["pb"].prod(1).prod(0)
    h = i["x"] * p["pa"].prod(1, keepdim=True) + r2
    return F.cross_entropy(h @ p["k"], i["y"]) + (r2 * torch.tensor(c4, dtype=torch.float64)).sum()


run_case("reduce-prod", m, params, inputs, prods, constants=("c4",))

# 5. Convolutions: padded and strided with a bias, then grouped and dilated
#    without one (its input gradient flows back through Tanh).
N, C, S, M = 2, 4, 9, 6
params = {"cw1": randn(M, C, 3, 3, scale=0.3), "cb1": randn(M, scale=0.1),
          "cw2": randn(M, M // 2, 3, 3, scale=0.3), "fw": randn(3, M, scale=0.5)}
inputs = {"x": randn(N, C, S, S), "y": rng.integers(0, 3, N).astype(np.int64)}
m = model([helper.make_node("Conv", ["x", "cw1", "cb1"], ["c1"], pads=[1, 1, 1, 1],
                            strides=[2, 2]),
           helper.make_node("Tanh", ["c1"], ["t1"]),
           helper.make_node("Conv", ["t1", "cw2"], ["c2"], group=2, dilations=[2, 1],
                            pads=[2, 0, 1, 1]),
           helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
           helper.make_node("Flatten", ["g"], ["f"]),
           helper.make_node("Gemm", ["f", "fw"], ["z"], transB=1),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"])


def convnet(p, i):
    t1 = torch.tanh(F.conv2d(i["x"], p["cw1"], p["cb1"], stride=2, padding=1))
    c2 = F.conv2d(F.pad(t1, (0, 1, 2, 1)), p["cw2"], groups=2, dilation=(2, 1))
    return F.cross_entropy(c2.mean(dim=(2, 3)) @ p["fw"].T, i["y"])


run_case("conv", m, params, inputs, convnet)

# 5a. ConvTranspose (torch's conv_transpose): 2-D grouped, strided and
#     dilated with a bias, asymmetric pads (a crop of torch's full output)
#     and output_padding, through Tanh into a 1-D one whose output_shape
#     asks for one row more than its natural size (output padding 1).
N, C, M = 2, 4, 6
params = {"tw1": randn(C, M // 2, 3, 3, scale=0.3), "tb1": randn(M, scale=0.1),
          "tw2": randn(M, 2, 4, scale=0.3), "fw": randn(3, 2, scale=0.5)}
inputs = {"x": randn(N, C, 5, 6), "y": rng.integers(0, 3, N).astype(np.int64)}
m = model([helper.make_node("ConvTranspose", ["x", "tw1", "tb1"], ["c1"], group=2,
                            strides=[2, 2], dilations=[1, 2], pads=[1, 0, 1, 1],
                            output_padding=[1, 0]),
           helper.make_node("Tanh", ["c1"], ["t1"]),
           helper.make_node("Reshape", ["t1", "shp"], ["r1"]),
           helper.make_node("ConvTranspose", ["r1", "tw2"], ["c2"], strides=[3],
                            output_shape=[3 * (10 * 14 - 1) + 4 + 1]),
           helper.make_node("ReduceMean", ["c2", "ax"], ["g"], keepdims=0),
           helper.make_node("Gemm", ["g", "fw"], ["z"], transB=1),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"])
for n, a in {"shp": np.array([N, M, 10 * 14], np.int64), "ax": np.array([2], np.int64)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def deconvnet(p, i):
    c1 = F.conv_transpose2d(i["x"], p["tw1"], p["tb1"], stride=2, dilation=(1, 2), groups=2,
                            output_padding=(1, 0))[:, :, 1:-1, 0:-1]
    r1 = torch.tanh(c1).reshape(N, M, 10 * 14)
    c2 = F.conv_transpose1d(r1, p["tw2"], stride=3, output_padding=1)
    return F.cross_entropy(c2.mean(2) @ p["fw"].T, i["y"])


run_case("conv-transpose", m, params, inputs, deconvnet)

# 5b. Einsum (torch.einsum): attention scores against a transposed operand,
#     a weighted sum with a broadcast ellipsis, a diagonal, a chain of three
#     operands with an outer product, a full contraction.
B, Hh, T, D = 2, 2, 4, 3
params = {"wq": randn(D, D, scale=0.5), "sq": randn(Hh, T, T, scale=0.5),
          "u": randn(T, 3, scale=0.5), "v": randn(3, 2, scale=0.5), "fw": randn(3, 2, scale=0.5)}
inputs = {"x": randn(B, Hh, T, D), "y": rng.integers(0, 3, B).astype(np.int64)}
m = model([helper.make_node("Einsum", ["x", "wq"], ["q"], equation="bhtd,de->bhte"),
           helper.make_node("Einsum", ["q", "x"], ["s"], equation="bhqd,bhkd->bhqk"),
           helper.make_node("Tanh", ["s"], ["a"]),
           helper.make_node("Einsum", ["a", "sq"], ["w"], equation="...qk,...kq->...q"),
           helper.make_node("Einsum", ["sq"], ["dg"], equation="hii->hi"),
           helper.make_node("Add", ["w", "dg"], ["wd"]),
           helper.make_node("Einsum", ["wd", "u", "v"], ["z0"], equation="bht,tc,cj->bj"),
           helper.make_node("Einsum", ["z0", "fw"], ["z"], equation="bj,cj"),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=13)


def einsums(p, i):
    q = torch.einsum("bhtd,de->bhte", i["x"], p["wq"])
    a = torch.tanh(torch.einsum("bhqd,bhkd->bhqk", q, i["x"]))
    w = torch.einsum("...qk,...kq->...q", a, p["sq"]) + torch.einsum("hii->hi", p["sq"])
    z0 = torch.einsum("bht,tc,cj->bj", w, p["u"], p["v"])
    return F.cross_entropy(torch.einsum("bj,cj", z0, p["fw"]), i["y"])


run_case("einsum", m, params, inputs, einsums)

# 5c. LSTM, GRU and RNN by the ONNX equations, written out step by step in
#     torch (float64): a bidirectional LSTM with peepholes, initial states
#     and variable sequence_lens (0, 2 and 4 of 4 steps: the state is kept
#     and Y is 0 past each end, a reverse pass starts at its last step, an
#     empty sequence ends in state 0 as in onnxruntime);
#     a reverse, batch-first GRU (linear_before_reset 0, clip 4: beyond most
#     pre-activations, since a low-precision value rounding across the bound
#     moves its gradient by its full size, as at a kink; onnxruntime checks
#     clipping: recurrent-vs-onnxruntime) with a
#     sequence of lengths 3 and 1; a forward RNN with Relu.
#     The loss weighs every output (Y, Y_h, Y_c) by fixed random tensors.
T, Bt, I, Hs = 4, 3, 3, 2
lens = np.array([4, 0, 2], np.int32)
params = {"lw": randn(2, 4 * Hs, I, scale=0.5), "lr": randn(2, 4 * Hs, Hs, scale=0.5),
          "lb": randn(2, 8 * Hs, scale=0.3), "lp": randn(2, 3 * Hs, scale=0.5),
          "lh0": randn(2, Bt, Hs, scale=0.5), "lc0": randn(2, Bt, Hs, scale=0.5),
          "gw": randn(1, 3 * Hs, I, scale=0.8), "gr": randn(1, 3 * Hs, Hs, scale=0.8),
          "gb": randn(1, 6 * Hs, scale=0.3),
          "rw": randn(1, Hs, I, scale=0.5), "rr": randn(1, Hs, Hs, scale=0.5)}
inputs = {"x": randn(T, Bt, I), "lens": lens, "glens": np.array([3, 1, 3], np.int32)}
weights = {"k1": randn(T, 2, Bt, Hs), "k2": randn(2, Bt, Hs), "k3": randn(2, Bt, Hs),
           "k4": randn(Bt, T, 1, Hs), "k5": randn(Bt, 1, Hs), "k6": randn(T, 1, Bt, Hs)}
nodes = [helper.make_node("LSTM", ["x", "lw", "lr", "lb", "lens", "lh0", "lc0", "lp"],
                          ["y1", "yh1", "yc1"], hidden_size=Hs, direction="bidirectional"),
         helper.make_node("Transpose", ["x"], ["xb"], perm=[1, 0, 2]),
         helper.make_node("GRU", ["xb", "gw", "gr", "gb", "glens"], ["y2", "yh2"], hidden_size=Hs,
                          direction="reverse", layout=1, clip=4.0),
         helper.make_node("RNN", ["x", "rw", "rr"], ["y3"], hidden_size=Hs, activations=["Relu"])]
terms = []
for k, y in [("k1", "y1"), ("k2", "yh1"), ("k3", "yc1"), ("k4", "y2"), ("k5", "yh2"), ("k6", "y3")]:
    nodes += [helper.make_node("Mul", [y, k], [f"m{k}"]),
              helper.make_node("ReduceSum", [f"m{k}"], [f"s{k}"], keepdims=0)]
    terms.append(f"s{k}")
nodes.append(helper.make_node("Sum", terms, ["loss"]))
m = model(nodes, params, inputs, ["loss"], opset=14)
for n, a in weights.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def recurrent(p, i):
    sig, th = torch.sigmoid, torch.tanh
    x, zero = i["x"], torch.zeros(Hs, dtype=torch.float64)
    Y1 = [[[zero] * Bt for _ in range(2)] for _ in range(T)]
    Yh1, Yc1 = [[None] * Bt for _ in range(2)], [[None] * Bt for _ in range(2)]
    for d in range(2):
        W, R, Bb, P = p["lw"][d], p["lr"][d], p["lb"][d], p["lp"][d]
        for b in range(Bt):
            H, C = p["lh0"][d, b], p["lc0"][d, b]
            steps = range(int(lens[b]))
            for t in (reversed(steps) if d else steps):
                g = W @ x[t, b] + Bb[:4 * Hs] + R @ H + Bb[4 * Hs:]
                gi, go, gf, gc = g.split(Hs)
                it, ft = sig(gi + P[:Hs] * C), sig(gf + P[2 * Hs:] * C)
                C = ft * C + it * th(gc)
                H = sig(go + P[Hs:2 * Hs] * C) * th(C)
                Y1[t][d][b] = H
            # an empty sequence's final state is 0 (as onnxruntime's)
            Yh1[d][b], Yc1[d][b] = (H, C) if lens[b] else (zero, zero)
    W, R, Bb = p["gw"][0], p["gr"][0], p["gb"][0]
    Y2 = [[zero] * T for _ in range(Bt)]
    Yh2 = []
    for b in range(Bt):
        H = zero
        for t in reversed(range(int(i["glens"][b]))):
            xw = W @ x[t, b] + Bb[:3 * Hs]
            zr = (xw[:2 * Hs] + R[:2 * Hs] @ H + Bb[3 * Hs:5 * Hs]).clamp(-4.0, 4.0)
            z, r = sig(zr[:Hs]), sig(zr[Hs:])
            hh = th((xw[2 * Hs:] + R[2 * Hs:] @ (r * H) + Bb[5 * Hs:]).clamp(-4.0, 4.0))
            H = (1 - z) * hh + z * H
            Y2[b][t] = H
        Yh2.append(H)
    H = torch.zeros(Bt, Hs, dtype=torch.float64)
    Y3 = []
    for t in range(T):
        H = torch.relu(x[t] @ p["rw"][0].T + H @ p["rr"][0].T)
        Y3.append(H)
    outs = {"k1": torch.stack([torch.stack([torch.stack(v) for v in row]) for row in Y1]),
            "k2": torch.stack([torch.stack(v) for v in Yh1]),
            "k3": torch.stack([torch.stack(v) for v in Yc1]),
            "k4": torch.stack([torch.stack(v) for v in Y2]).unsqueeze(2),
            "k5": torch.stack(Yh2).unsqueeze(1), "k6": torch.stack(Y3).unsqueeze(1)}
    return sum((o * torch.tensor(weights[k], dtype=torch.float64)).sum() for k, o in outs.items())


run_case("recurrent", m, params, inputs, recurrent, constants=tuple(weights))

# 5c'. DFT (torch.fft.fft / ifft, a real signal zero-padded to dft_length,
#      a complex one inverted, a onesided transform along another axis) and
#      STFT (torch.stft without centring, a learned window): every output
#      weighed by a fixed random tensor.
params = {"sr": randn(2, 6, 3, 1), "sc": randn(2, 5, 2), "sw": randn(2, 20, 1), "win": randn(8, scale=0.5) + 1.0}
inputs = {"x": randn(2, 3)}
fw = {"w1": randn(2, 8, 3, 2), "w2": randn(2, 5, 2), "w3": randn(2, 6, 2, 2), "w4": randn(2, 4, 5, 2)}
m = model([helper.make_node("DFT", ["sr", "len8"], ["d1"], axis=1),
           helper.make_node("DFT", ["sc"], ["d2"], axis=1, inverse=1),
           helper.make_node("DFT", ["sr"], ["d3"], axis=2, onesided=1),
           helper.make_node("STFT", ["sw", "step", "win"], ["d4"]),
           *[helper.make_node("Mul", [f"d{j}", f"w{j}"], [f"p{j}"]) for j in range(1, 5)],
           *[helper.make_node("ReduceSum", [f"p{j}"], [f"q{j}"], keepdims=0) for j in range(1, 5)],
           helper.make_node("Sum", ["q1", "q2", "q3", "q4"], ["q"]),
           helper.make_node("ReduceSum", ["x"], ["xs"], keepdims=0),
           helper.make_node("Mul", ["q", "xs"], ["loss"])],
          params, inputs, ["loss"], opset=17)
consts = dict(fw, len8=np.array(8, np.int64), step=np.array(4, np.int64))
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def dfts(p, i):
    w = {k: torch.tensor(v, dtype=torch.float64) for k, v in fw.items()}
    d1 = torch.view_as_real(torch.fft.fft(p["sr"][..., 0], n=8, dim=1))
    d2 = torch.view_as_real(torch.fft.ifft(torch.view_as_complex(p["sc"].contiguous()), dim=1))
    d3 = torch.view_as_real(torch.fft.rfft(p["sr"][..., 0], dim=2))
    st = torch.stft(p["sw"][..., 0], n_fft=8, hop_length=4, window=p["win"], center=False,
                    onesided=True, return_complex=True)                   # [B, bins, frames]
    d4 = torch.view_as_real(st).permute(0, 2, 1, 3)
    q = sum((d * w[f"w{j}"]).sum() for j, d in enumerate((d1, d2, d3, d4), 1))
    return q * i["x"].sum()


run_case("dft-stft", m, params, inputs, dfts, constants=tuple(consts))

# 6. A transformer block: LayerNormalization (with and without bias, over
#    the last one and last two dims), single-head attention (batched MatMul
#    against a transposed operand, scaled Softmax), residual Adds, Gelu.
B, T, E, C = 2, 6, 8, 5
params = {"ln1s": randn(E, scale=0.3) + 1.0, "ln1b": randn(E, scale=0.1),
          "wq": randn(E, E, scale=0.3), "wk": randn(E, E, scale=0.3), "wv": randn(E, E, scale=0.3),
          "ln2s": randn(T, E, scale=0.3) + 1.0, "wo": randn(E, C, scale=0.3)}
inputs = {"x": randn(B, T, E), "y": rng.integers(0, C, B * T).astype(np.int64)}
m = model([helper.make_node("LayerNormalization", ["x", "ln1s", "ln1b"], ["h"], axis=-1),
           helper.make_node("MatMul", ["h", "wq"], ["q"]),
           helper.make_node("MatMul", ["h", "wk"], ["k"]),
           helper.make_node("MatMul", ["h", "wv"], ["v"]),
           helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
           helper.make_node("MatMul", ["q", "kt"], ["s0"]),
           helper.make_node("Mul", ["s0", "scl"], ["s1"]),
           helper.make_node("Softmax", ["s1"], ["a"], axis=-1),
           helper.make_node("MatMul", ["a", "v"], ["o"]),
           helper.make_node("Add", ["o", "x"], ["r"]),
           helper.make_node("LayerNormalization", ["r", "ln2s"], ["h2"], axis=1),
           helper.make_node("Gelu", ["h2"], ["g"]),
           helper.make_node("Add", ["g", "r"], ["r2"]),
           helper.make_node("MatMul", ["r2", "wo"], ["z0"]),
           helper.make_node("Reshape", ["z0", "shp"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=20)
for n, a in {"scl": np.array(E ** -0.5, np.float32), "shp": np.array([B * T, C], np.int64)}.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def block(p, i):
    h = F.layer_norm(i["x"], (E,), p["ln1s"], p["ln1b"])
    s = (h @ p["wq"]) @ (h @ p["wk"]).transpose(1, 2) * E ** -0.5
    r = torch.softmax(s, -1) @ (h @ p["wv"]) + i["x"]
    r2 = F.gelu(F.layer_norm(r, (T, E), p["ln2s"])) + r
    return F.cross_entropy((r2 @ p["wo"]).reshape(B * T, C), i["y"])


run_case("transformer", m, params, inputs, block, constants=("scl",))

# 7. The example CNN's ops: Conv, training-mode BatchNormalization, Relu,
#    MaxPool, AveragePool (padded, count_include_pad), GlobalAveragePool,
#    Gemm. MaxPool's argmax (like Relu's mask) moves when inputs round in
#    fp16 / bf16, so this model is compared in fp32; the same model with
#    Tanh and AveragePool only, in every precision.
N, C, S, M = 4, 3, 8, 5
params = {"cw": randn(M, C, 3, 3, scale=0.3), "bs": randn(M, scale=0.2) + 1.0,
          "bb": randn(M, scale=0.1), "fw": randn(4, M, scale=0.5)}
inputs = {"x": randn(N, C, S, S), "y": rng.integers(0, 4, N).astype(np.int64)}


rm = randn(M, scale=0.2)
rv = (rng.random(M) + 0.5).astype(np.float32)


def cnn_model(act, maxpool, training=1):
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bs", "bb", "rm", "rv"],
                              ["n", "nrm", "nrv"], training_mode=training, epsilon=1e-5,
                              momentum=0.9),
             helper.make_node(act, ["n"], ["a"])]
    if maxpool:
        nodes.append(helper.make_node("MaxPool", ["a"], ["p0"], kernel_shape=[2, 2],
                                      strides=[2, 2]))
    else:
        nodes.append(helper.make_node("Identity", ["a"], ["p0"]))
    nodes += [helper.make_node("AveragePool", ["p0"], ["p1"], kernel_shape=[3, 3],
                               pads=[1, 1, 1, 1], count_include_pad=1),
              helper.make_node("GlobalAveragePool", ["p1"], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw"], ["z"], transB=1),
              helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])]
    mm = model(nodes, params, inputs, ["loss", "nrm"], opset=15)
    if not training:
        del mm.graph.node[1].output[1:]
        del mm.graph.output[1]
    for n, a in {"rm": rm, "rv": rv}.items():
        mm.graph.initializer.append(numpy_helper.from_array(a, n))
    return mm


def cnn_ref(act, maxpool, training=True):
    def f(p, i):
        c = F.conv2d(i["x"], p["cw"], padding=1)
        stats = (None, None) if training else (torch.tensor(rm, dtype=torch.float64),
                                               torch.tensor(rv, dtype=torch.float64))
        a = act(F.batch_norm(c, *stats, p["bs"], p["bb"], training=training, eps=1e-5))
        if maxpool:
            a = F.max_pool2d(a, 2, 2)
        a = F.avg_pool2d(a, 3, 1, padding=1, count_include_pad=True)
        return F.cross_entropy(a.mean(dim=(2, 3)) @ p["fw"].T, i["y"])
    return f


run_case("cnn", cnn_model("Relu", True), params, inputs, cnn_ref(F.relu, True),
         precisions=("fp32",), constants=("rm", "rv"))
run_case("cnn-smooth", cnn_model("Tanh", False), params, inputs, cnn_ref(torch.tanh, False),
         constants=("rm", "rv"))
# Inference-mode (frozen) batch norm, as torch.onnx.export writes a model in
# eval mode: the running statistics are imported as parameters but are
# buffers, so they get no gradient.
run_case("cnn-eval-bn", cnn_model("Tanh", False, training=0), params, inputs,
         cnn_ref(torch.tanh, False, training=False))

# 8. NegativeLogLikelihoodLoss after LogSoftmax: weighted mean with an
#    ignored class, plus an unreduced one summed by ReduceSum (N, C, D form).
N, D, C, K = 6, 5, 4, 3
params = {"w": randn(D, C, scale=0.4), "u": randn(N, C, K, scale=0.5)}
inputs = {"x": randn(N, D), "y": rng.integers(0, C, N).astype(np.int64),
          "y2": rng.integers(0, C, (N, K)).astype(np.int64)}
inputs["y"][0] = 1
nw = (rng.random(C) + 0.5).astype(np.float32)
m = model([helper.make_node("MatMul", ["x", "w"], ["z"]),
           helper.make_node("LogSoftmax", ["z"], ["lp"], axis=1),
           helper.make_node("NegativeLogLikelihoodLoss", ["lp", "y", "nw"], ["l1"],
                            reduction="mean", ignore_index=1),
           helper.make_node("LogSoftmax", ["u"], ["lu"], axis=1),
           helper.make_node("NegativeLogLikelihoodLoss", ["lu", "y2"], ["l2v"], reduction="none"),
           helper.make_node("ReduceSum", ["l2v"], ["l2"], keepdims=0),
           helper.make_node("Add", ["l1", "l2"], ["loss"])],
          params, inputs, ["loss"])
m.graph.initializer.append(numpy_helper.from_array(nw, "nw"))
run_case("nll", m, params, inputs,
         lambda p, i: F.nll_loss(F.log_softmax(i["x"] @ p["w"], 1), i["y"],
                                 weight=torch.tensor(nw, dtype=torch.float64), ignore_index=1)
         + F.nll_loss(F.log_softmax(p["u"], 1), i["y2"], reduction="none").sum(),
         constants=("nw",))

# 9. Causal attention masked as transformers and nn.Transformer mask it:
#    Where(causal, 0, finfo(float32).min) from constants alone, and a folded
#    mask of -inf above the diagonal, added to the scaled scores before the
#    softmax; ReduceLogSumExp over the -inf-masked scores. In fp16 / bf16
#    finfo.min is -inf, and a -inf made the runtime's softmax row NaN: both
#    masks must give torch's probabilities (0 where masked) in every
#    precision.
B, T, E, C = 2, 6, 8, 5
params = {"wq": randn(E, E, scale=0.5), "wk": randn(E, E, scale=0.5),
          "wv": randn(E, E, scale=0.5), "wo": randn(E, C, scale=0.5)}
inputs = {"x": randn(B, T, E), "y": rng.integers(0, C, B * T).astype(np.int64)}
causal = np.tril(np.ones((T, T), bool))
lowest = np.float32(np.finfo(np.float32).min)
inf_mask = np.where(causal, 0.0, -np.inf).astype(np.float32)
consts = {"causal": causal, "zero": np.array(0.0, np.float32), "lowest": np.array(lowest),
          "inf_mask": inf_mask, "scale": np.array(1 / math.sqrt(E), np.float32),
          "perm_shape": np.array([B * T, E], np.int64), "last": np.array([-1], np.int64),
          "tiny": np.array(0.01, np.float32)}
m = model([helper.make_node("MatMul", ["x", "wq"], ["q"]),
           helper.make_node("MatMul", ["x", "wk"], ["k"]),
           helper.make_node("MatMul", ["x", "wv"], ["v"]),
           helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
           helper.make_node("MatMul", ["q", "kt"], ["s0"]),
           helper.make_node("Mul", ["s0", "scale"], ["s"]),
           helper.make_node("Where", ["causal", "zero", "lowest"], ["mask"]),
           helper.make_node("Add", ["s", "mask"], ["a1"]),
           helper.make_node("Softmax", ["a1"], ["p1"], axis=-1),
           helper.make_node("MatMul", ["p1", "v"], ["h1"]),
           helper.make_node("Add", ["s", "inf_mask"], ["a2"]),
           helper.make_node("Softmax", ["a2"], ["p2"], axis=-1),
           helper.make_node("MatMul", ["p2", "v"], ["h2"]),
           helper.make_node("ReduceLogSumExp", ["a2", "last"], ["lse"], keepdims=1),
           helper.make_node("Mul", ["lse", "tiny"], ["lse_s"]),
           helper.make_node("Add", ["h1", "h2"], ["h12"]),
           helper.make_node("Add", ["h12", "lse_s"], ["h"]),
           helper.make_node("Reshape", ["h", "perm_shape"], ["hf"]),
           helper.make_node("MatMul", ["hf", "wo"], ["z"]),
           helper.make_node("SoftmaxCrossEntropyLoss", ["z", "y"], ["loss"])],
          params, inputs, ["loss"], opset=18)
for n, a in consts.items():
    m.graph.initializer.append(numpy_helper.from_array(a, n))


def causal_attention(p, i):
    x = i["x"]
    s = (x @ p["wq"]) @ (x @ p["wk"]).transpose(1, 2) / math.sqrt(E)
    v = x @ p["wv"]
    c = torch.tensor(causal)
    a1 = s + torch.where(c, 0.0, float(lowest)).to(torch.float64)
    a2 = s + torch.tensor(inf_mask, dtype=torch.float64)
    h = torch.softmax(a1, -1) @ v + torch.softmax(a2, -1) @ v \
        + torch.logsumexp(a2, -1, keepdim=True) * 0.01
    return F.cross_entropy(h.reshape(B * T, E) @ p["wo"], i["y"])


run_case("causal-attention-masks", m, params, inputs, causal_attention, constants=tuple(consts))

# 9b. Rows masked throughout, forward only: softmax / log-softmax are NaN
#     there (torch's), ReduceLogSumExp is -inf (torch.logsumexp), the other
#     rows are exact; in every precision, on the CPU runtime.
x = randn(4, 7, scale=3.0)
x[1, :] = -np.inf
x[2, ::2] = -np.inf
x[3, 3] = np.float32(np.finfo(np.float32).min)
m = model([helper.make_node("Softmax", ["x"], ["sm"], axis=-1),
           helper.make_node("LogSoftmax", ["x"], ["lsm"], axis=-1),
           helper.make_node("ReduceLogSumExp", ["x", "last"], ["lse"], keepdims=0)],
          {}, {"x": x}, ["sm", "lsm", "lse"], opset=18)
m.graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "last"))
xt = torch.tensor(x, dtype=torch.float64)
want = {"sm": torch.softmax(xt, -1).numpy(), "lsm": torch.log_softmax(xt, -1).numpy(),
        "lse": torch.logsumexp(xt, -1).numpy()}
with tempfile.TemporaryDirectory() as d:
    onnx.save(m, f"{d}/m.onnx")
    np.savez(f"{d}/in.npz", x=x)
    for prec in ("fp32", "fp16", "bf16"):
        r = subprocess.run([run, f"{d}/m.onnx", "--inputs", f"{d}/in.npz", "--outputs",
                            f"{d}/out.npz", "--precision", prec, "--nan-check", "off"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"masked rows {prec}: amp-run failed: {r.stderr.strip()}")
            continue
        out = np.load(f"{d}/out.npz")
        for k, ref in want.items():
            got = out[k].astype(np.float64)
            same_nan = np.array_equal(np.isnan(got), np.isnan(ref))
            same_inf = np.array_equal(np.isinf(got) & (got < 0), np.isinf(ref) & (ref < 0))
            fin = np.isfinite(ref) & np.isfinite(got)
            # Softmax and log-softmax in f32 (the policy's fp32 class), the
            # result rounded once to the run's type at most.
            tol = {"fp32": 1e-6, "fp16": 2e-3, "bf16": 1.6e-2}[prec]
            err = float(np.max(np.abs(got[fin] - ref[fin]) / np.maximum(np.abs(ref[fin]), 1.0),
                               initial=0.0))
            check(same_nan and same_inf and err <= tol,
                  f"masked rows {prec} {k}: got {got.tolist()}, torch {ref.tolist()}")

# 9c. What real exports write on integers and doubles, forward only, against
#     onnx's reference evaluator: int64 ScatterND (T5 / BART shift the labels
#     into the decoder inputs), int64 ScatterElements, Min / Max / Abs / Neg
#     of int64 constants (T5's relative-position buckets), a DOUBLE constant
#     through Sqrt / Div / Cast (transformers' sdpa scale), CastLike of a
#     float constant to int64 (torch.export's arange bounds).
from onnx.reference import ReferenceEvaluator  # noqa: E402

ids = rng.integers(0, 1000, (3, 6)).astype(np.int64)
xf = randn(3, 6)
c1 = rng.integers(-9, 9, (4, 4)).astype(np.int64)
c2 = rng.integers(-9, 9, (4, 4)).astype(np.int64)
nodes = [
    # shifted[:, 1:] = ids[:, :-1]; shifted[:, 0] = 7, as shift_tokens_right
    helper.make_node("Slice", ["ids", "s0", "e0", "ax1"], ["head"]),
    helper.make_node("ScatterND", ["zeros", "where", "head"], ["shifted0"]),
    helper.make_node("ScatterND", ["shifted0", "first", "sevens"], ["shifted"]),
    helper.make_node("ScatterElements", ["ids", "cols", "upd"], ["scattered"], axis=1),
    helper.make_node("Min", ["c1", "c2"], ["mn"]),
    helper.make_node("Max", ["c1", "c2", "c3"], ["mx"]),
    helper.make_node("Neg", ["mn"], ["neg"]),
    helper.make_node("Abs", ["neg"], ["ab"]),
    helper.make_node("Add", ["mx", "ab"], ["ints"]),
    helper.make_node("Sqrt", ["d"], ["dsq"]),
    helper.make_node("Div", ["one_d", "dsq"], ["dinv"]),
    helper.make_node("Cast", ["dinv"], ["scale"], to=TensorProto.FLOAT),
    helper.make_node("Mul", ["x", "scale"], ["scaled"]),
    helper.make_node("Constant", [], ["fzero"], value=numpy_helper.from_array(np.array(0.0, np.float32))),
    helper.make_node("Constant", [], ["fsix"], value=numpy_helper.from_array(np.array(6.0, np.float32))),
    helper.make_node("CastLike", ["fzero", "ids"], ["izero"]),
    helper.make_node("CastLike", ["fsix", "ids"], ["isix"]),
    helper.make_node("Range", ["izero", "isix", "ione"], ["ar"]),
    helper.make_node("Add", ["shifted", "ar"], ["shifted_ar"]),
]
where = np.array([[[i, j + 1] for j in range(5)] for i in range(3)], np.int64)
consts = {"zeros": np.zeros((3, 6), np.int64), "where": where,
          "s0": np.array([0], np.int64), "e0": np.array([5], np.int64),
          "ax1": np.array([1], np.int64),
          "first": np.array([[0, 0], [1, 0], [2, 0]], np.int64),
          "sevens": np.array([7, 7, 7], np.int64),
          "cols": np.array([[5, 0], [2, 3], [1, 4]], np.int64),
          "upd": rng.integers(-50, 50, (3, 2)).astype(np.int64),
          "c1": c1, "c2": c2, "c3": np.array([[-3], [0], [2], [5]], np.int64),
          "d": np.array(8.0, np.float64), "one_d": np.array(1.0, np.float64),
          "ione": np.array(1, np.int64)}
outs = ["shifted_ar", "scattered", "ints", "scaled"]
g = helper.make_graph(
    nodes, "g",
    [helper.make_tensor_value_info("ids", TensorProto.INT64, ids.shape),
     helper.make_tensor_value_info("x", TensorProto.FLOAT, xf.shape)],
    [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    [numpy_helper.from_array(a, k) for k, a in consts.items()])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
want = dict(zip(outs, ReferenceEvaluator(m).run(None, {"ids": ids, "x": xf})))
with tempfile.TemporaryDirectory() as d:
    onnx.save(m, f"{d}/m.onnx")
    np.savez(f"{d}/in.npz", ids=ids, x=xf)
    r = subprocess.run([run, f"{d}/m.onnx", "--inputs", f"{d}/in.npz", "--outputs",
                        f"{d}/out.npz"], capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"integer / double exports: amp-run failed: {r.stderr.strip()}")
    else:
        out = np.load(f"{d}/out.npz")
        for k in outs:
            same = out[k].dtype == want[k].dtype and (
                np.array_equal(out[k], want[k]) if k != "scaled"
                else np.allclose(out[k], want[k], rtol=1e-7, atol=0))
            check(same, f"integer / double exports: {k}: got {out[k].tolist()} ({out[k].dtype}), "
                        f"reference {want[k].tolist()} ({want[k].dtype})")

print(f"{passed} passed, {failed} failed" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
sys.exit(1 if failed or passed == 0 else 0)
