"""amp-run on the example MLP, CNN and transformer block against a float64
numpy / torch reference (torch in double precision), in fp32, fp16 and bf16.

fp32 must agree to 1e-5 relative (f32 arithmetic, different summation
order); fp16 / bf16 to a tolerance from the format's epsilon: the low
precision rounds every matrix product input and output, so the error of an
output is a few eps times the scale of its values (checked: 8 eps).

    python run_examples.py AMP_RUN WORKDIR
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import examples  # noqa: E402

run, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng()
EPS = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
passed = failed = 0


def reference(model, feeds):
    """Evaluates the graph in float64 with torch, node by node."""
    env = {i.name: torch.from_numpy(numpy_helper.to_array(i).astype(np.float64)
                                    if numpy_helper.to_array(i).dtype.kind == "f"
                                    else numpy_helper.to_array(i))
           for i in model.graph.initializer}
    env.update({k: torch.from_numpy(v.astype(np.float64) if v.dtype.kind == "f" else v)
                for k, v in feeds.items()})
    F = torch.nn.functional
    for n in model.graph.node:
        a = {x.name: x for x in n.attribute}
        i = [env[x] for x in n.input]
        t = n.op_type
        if t == "Gemm":
            y = i[0] @ (i[1].T if a.get("transB") and a["transB"].i else i[1]) + i[2]
        elif t == "MatMul": y = i[0] @ i[1]
        elif t == "Relu": y = F.relu(i[0])
        elif t == "Add": y = i[0] + i[1]
        elif t == "Mul": y = i[0] * i[1]
        elif t == "Div": y = i[0] / i[1]
        elif t == "Erf": y = torch.erf(i[0])
        elif t == "Softmax": y = torch.softmax(i[0], dim=a["axis"].i)
        elif t == "Constant": y = torch.from_numpy(numpy_helper.to_array(a["value"].t).astype(np.float64))
        elif t == "Reshape": y = i[0].reshape(tuple(i[1].tolist()))
        elif t == "Transpose": y = i[0].permute(*a["perm"].ints)
        elif t == "ReduceMean": y = i[0].mean(dim=tuple(a["axes"].ints), keepdim=bool(a["keepdims"].i))
        elif t == "LayerNormalization":
            y = F.layer_norm(i[0], i[0].shape[-1:], i[1], i[2], eps=a["epsilon"].f)
        elif t == "Conv":
            y = F.conv2d(i[0], i[1], i[2], stride=tuple(a["strides"].ints), padding=tuple(a["pads"].ints[:2]))
        elif t == "BatchNormalization":
            y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], training=False, eps=a["epsilon"].f)
        elif t == "MaxPool": y = F.max_pool2d(i[0], tuple(a["kernel_shape"].ints), tuple(a["strides"].ints))
        elif t == "GlobalAveragePool": y = i[0].mean(dim=(2, 3), keepdim=True)
        elif t == "Flatten": y = i[0].flatten(1)
        elif t == "SoftmaxCrossEntropyLoss": y = F.cross_entropy(i[0], i[1])
        else:
            raise SystemExit(f"reference: no rule for {t}")
        env[n.output[0]] = y
    return {o.name: env[o.name].numpy() for o in model.graph.output}


def cnn_features():
    """The CNN up to its global average pool, whose [N, 32, 1, 1] features
    are the output: every element checked, so a channel mixed up by the
    blocked layouts between conv -> relu -> max pool -> conv -> relu -> pool
    shows (the loss alone averages it away)."""
    m = examples.cnn()
    g = m.graph
    keep = []
    for n in g.node:
        keep.append(n)
        if n.op_type == "GlobalAveragePool":
            break
    del g.node[:]
    g.node.extend(keep)
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info(keep[-1].output[0],
                                                       onnx.TensorProto.FLOAT, None))
    kept_in = [i for i in g.input if i.name != "labels"]
    del g.input[:]
    g.input.extend(kept_in)
    return m


for name, make in list(examples.MODELS.items()) + [("cnn_features", cnn_features)]:
    model = make()
    path = os.path.join(work, name + ".onnx")
    onnx.save(model, path)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    np.savez(os.path.join(work, name + ".in.npz"), **feeds)
    ref = reference(model, feeds)
    for precision in ("fp32", "fp16", "bf16"):
        out = os.path.join(work, f"{name}.{precision}.npz")
        p = subprocess.run([run, path, "--inputs", os.path.join(work, name + ".in.npz"),
                            "--outputs", out, "--precision", precision], capture_output=True, text=True)
        if p.returncode:
            failed += 1
            print(f"FAIL {name}/{precision}: {p.stderr.strip()}")
            continue
        got = np.load(out)
        for k, want in ref.items():
            g = got[k].astype(np.float64)
            scale = max(np.abs(want).max(), 1e-30)
            tol = 1e-5 * scale if precision == "fp32" else 8 * EPS[precision] * scale
            err = np.abs(g - want).max()
            ok = np.isfinite(g).all() and err <= tol
            passed += ok
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}/{precision} {k}: max error {err:.3g} "
                  f"(tolerance {tol:.3g})")
# A NaN pixel in one image must reach that image's features (and only
# that image's): the ReLU inside the convolutions' calls keeps NaN as the
# element-wise ReLU does (oneDNN's own ReLU would turn it into 0).
path = os.path.join(work, "cnn_features.onnx")
x = rng.standard_normal((32, 3, 32, 32)).astype(np.float32)
x[5, 1, 7, 9] = np.nan
np.savez(os.path.join(work, "nan.in.npz"), input=x)
out = os.path.join(work, "nan.out.npz")
p = subprocess.run([run, path, "--inputs", os.path.join(work, "nan.in.npz"), "--outputs", out,
                    "--nan-check", "off"], capture_output=True, text=True)
if p.returncode:
    failed += 1
    print(f"FAIL nan propagation: {p.stderr.strip()}")
else:
    g = np.load(out)[cnn_features().graph.output[0].name].reshape(32, -1)
    ok = np.isnan(g[5]).any() and np.isfinite(np.delete(g, 5, axis=0)).all()
    passed += ok
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} cnn_features: a NaN pixel of image 5 reaches its features "
          f"({int(np.isnan(g[5]).sum())} NaN) and no other image's")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
