"""Random convolution chains through amp-run (fp32, fp16, bf16) against
torch in float64: the shapes, windows and readers that decide where
amp-lower-to-runtime keeps values channel-blocked and where a ReLU runs
inside a convolution's call.

Each case draws: input channels 3 or 16, a convolution to 16, 32 or 48
channels (kernel 1-3, stride 1-2, padding, dilation, with or without bias,
sometimes depthwise), optionally an inference batch norm, an activation
(ReLU, LeakyReLU, Sigmoid, Tanh or none), optionally a max pool (kernel
2-3, stride 1-2, padding, ceil mode), optionally a second convolution and
activation, and an ending that reads the chain (global average pool,
ReduceMean over H and W with or without keepdims, the feature map itself,
or an Add that needs the plain layout). In fp32 every element of the
output must agree to 1e-5 of the larger of the output's scale and the
largest rms of a convolution's or batch norm's output in the chain (at most
4 times the output's scale; f32 arithmetic, other summation orders); fp16 / bf16 to 16 eps of it (worst seen over a few
runs: 2.4 / 5 eps). A fresh seed each run (printed; AMP_TEST_SEED repeats one).

    python blocked_chains.py AMP_RUN WORKDIR [--device cuda]

With --device cuda (and AMPRT_CUDA_EMULATE=1 where there is no GPU) the
chains run on the CUDA executor, which reads the blocked-layout flags the
lowering wrote for the CPU as plain NCHW: the same outputs are expected.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

run, work = sys.argv[1], sys.argv[2]
device = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--device" else "cpu"
os.makedirs(work, exist_ok=True)
SEED = int(os.environ.get("AMP_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
rng = np.random.default_rng(SEED)
F = torch.nn.functional
CASES = 16
passed = failed = 0


def out_len(n, k, s, p, d, ceil=False):
    span = n + 2 * p - ((k - 1) * d + 1)
    return (-(-span // s) if ceil else span // s) + 1


def case(i):
    """One random chain: (onnx model, input, float64 reference)."""
    nodes, inits = [], []
    n = int(rng.choice([1, 3]))
    cin = int(rng.choice([3, 16]))
    h, w = int(rng.integers(7, 15)), int(rng.integers(7, 15))
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    t = torch.from_numpy(x.astype(np.float64))
    cur, c, desc = "x", cin, []
    # The largest root-mean-square of a convolution's or batch norm's output:
    # a sum's rounding error is relative to its terms (about its rms), and an
    # activation after it (tanh near 0) passes that on however small its
    # own output.
    peak = [0.0]

    def init(name, a):
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return torch.from_numpy(a.astype(np.float32).astype(np.float64))

    def conv(k, t, cur, c, cout):
        ks = int(rng.integers(1, 4))
        s, d = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        p = int(rng.integers(0, ks))
        if out_len(t.shape[2], ks, s, p, d) < 1 or out_len(t.shape[3], ks, s, p, d) < 1:
            s, d, p = 1, 1, ks // 2
        group = c if (c == cout and rng.random() < 0.25) else 1
        wt = init(f"w{k}", rng.standard_normal((cout, c // group, ks, ks)) * 0.3)
        ins = [cur, f"w{k}"]
        bt = None
        if rng.random() < 0.7:
            bt = init(f"b{k}", rng.standard_normal(cout) * 0.1)
            ins.append(f"b{k}")
        nodes.append(helper.make_node("Conv", ins, [f"c{k}"], kernel_shape=[ks, ks],
                                      strides=[s, s], pads=[p] * 4, dilations=[d, d],
                                      group=group))
        desc.append(f"conv{k}({c}->{cout} k{ks} s{s} p{p} d{d} g{group}{' b' if bt is not None else ''})")
        y = F.conv2d(t, wt, bt, stride=s, padding=p, dilation=d, groups=group)
        peak[0] = max(peak[0], float(y.pow(2).mean().sqrt()))
        return y, f"c{k}", cout

    def act(k, t, cur):
        kind = str(rng.choice(["Relu", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "none"]))
        if kind == "none":
            return t, cur
        attrs = {"alpha": 0.1} if kind == "LeakyRelu" else {}
        nodes.append(helper.make_node(kind, [cur], [f"a{k}"], **attrs))
        desc.append(kind)
        y = {"Relu": F.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
             "LeakyRelu": lambda v: F.leaky_relu(v, 0.1)}[kind](t)
        return y, f"a{k}"

    t, cur, c = conv(1, t, cur, c, int(rng.choice([16, 32, 48])))
    if rng.random() < 0.4:
        sc, sh = rng.uniform(0.5, 1.5, c), rng.standard_normal(c) * 0.1
        mu, var = rng.standard_normal(c) * 0.1, rng.uniform(0.5, 1.5, c)
        st, bt, mt, vt = (init(f"bn_{k}", a) for k, a in
                          (("s", sc), ("b", sh), ("m", mu), ("v", var)))
        nodes.append(helper.make_node("BatchNormalization",
                                      [cur, "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"],
                                      epsilon=1e-5))
        desc.append("bn")
        t, cur = F.batch_norm(t, mt, vt, st, bt, training=False, eps=1e-5), "bn"
        peak[0] = max(peak[0], float(t.pow(2).mean().sqrt()))
    t, cur = act(1, t, cur)
    if rng.random() < 0.6:
        for _ in range(20):
            k, s = int(rng.integers(2, 4)), int(rng.integers(1, 3))
            p = int(rng.integers(0, k // 2 + 1))
            ceil = bool(rng.random() < 0.3)
            oh, ow = (out_len(t.shape[j], k, s, p, 1, ceil) for j in (2, 3))
            try:
                ref = F.max_pool2d(t, k, s, p, ceil_mode=ceil)
            except RuntimeError:
                continue
            # The window within the padded input (the dialect refuses a
            # larger one, with a message, where torch still pools).
            fits = all(t.shape[j] + 2 * p >= k for j in (2, 3))
            if fits and oh >= 1 and ow >= 1 and tuple(ref.shape[2:]) == (oh, ow):
                break
        else:
            k, s, p, ceil = 1, 1, 0, False
            ref = F.max_pool2d(t, k, s, p)
        nodes.append(helper.make_node("MaxPool", [cur], ["mp"], kernel_shape=[k, k],
                                      strides=[s, s], pads=[p] * 4, ceil_mode=int(ceil)))
        desc.append(f"maxpool(k{k} s{s} p{p}{' ceil' if ceil else ''})")
        t, cur = ref, "mp"
    if rng.random() < 0.6:
        t, cur, c = conv(2, t, cur, c, int(rng.choice([16, 32])))
        t, cur = act(2, t, cur)
    end = str(rng.choice(["gap", "mean_keep", "mean_drop", "map", "add"]))
    if end == "gap":
        nodes.append(helper.make_node("GlobalAveragePool", [cur], ["y"]))
        t = t.mean(dim=(2, 3), keepdim=True)
    elif end.startswith("mean"):
        keep = int(end == "mean_keep")
        nodes.append(helper.make_node("ReduceMean", [cur], ["y"], axes=[2, 3], keepdims=keep))
        t = t.mean(dim=(2, 3), keepdim=bool(keep))
    elif end == "add":
        z = init("z", rng.standard_normal(tuple(t.shape)))
        nodes.append(helper.make_node("Add", [cur, "z"], ["y"]))
        t = t + z
    else:
        nodes.append(helper.make_node("Identity", [cur], ["y"]))
    desc.append(end)
    graph = helper.make_graph(nodes, f"chain{i}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(t.shape))],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, x, t.numpy(), " -> ".join(desc), peak[0]


# fp16 / bf16 (amp-autocast: convolutions on rounded operands, f32
# accumulation, rounded results; the ReLU in the call): a tolerance from the
# format's epsilon, as run_examples.py, times 2 for the two convolutions and
# the pool / activations between them.
TOL = {"fp32": 1e-5, "fp16": 16 * 2.0 ** -10, "bf16": 16 * 2.0 ** -7}
for i in range(CASES):
    model, x, want, desc, peak = case(i)
    path = os.path.join(work, f"chain{i}.onnx")
    onnx.save(model, path)
    np.savez(os.path.join(work, f"chain{i}.in.npz"), x=x)
    for precision, rel in TOL.items():
        out = os.path.join(work, f"chain{i}.{precision}.npz")
        p = subprocess.run([run, path, "--inputs", os.path.join(work, f"chain{i}.in.npz"),
                            "--outputs", out, "--precision", precision, "--device", device],
                           capture_output=True, text=True)
        if p.returncode:
            failed += 1
            print(f"FAIL chain {i} {precision} [{desc}]: {p.stderr.strip()}")
            continue
        got = np.load(out)["y"].astype(np.float64)
        # Relative to the output, or to the largest intermediate rms (a tanh
        # of a long sum: seed 3485114499 had 1.27e-5 on an output of 1), at
        # most 4 times the output's scale, so that an error the size of the
        # output still fails in every precision.
        out_scale = np.abs(want).max()
        scale = max(out_scale, min(peak, 4 * out_scale), 1e-30)
        err = np.abs(got - want.reshape(got.shape)).max() if got.size == want.size else np.inf
        ok = got.size == want.size and np.isfinite(got).all() and err <= rel * scale
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} chain {i} {precision} [{desc}]: max error {err:.3g} "
              f"(tolerance {rel * scale:.3g})")
print(f"{passed} passed, {failed} failed (seed {SEED})")
sys.exit(1 if failed else 0)
