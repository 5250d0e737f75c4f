"""The example models of the project, written as ONNX training-ready graphs.

Each model is what ``torch.onnx.export`` gives for the PyTorch module named in
its docstring (Linear layers as ``Gemm`` with ``transB=1``, weights as
initializers named like the module's parameters), with its loss as a graph
output named ``loss``. Parameters are initialised like PyTorch's defaults,
from a seeded generator, so every run writes the same files.

    python -m amp_mlir.examples --out DIR [--batch N]
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _linear_init(rng: np.random.Generator, out_f: int, in_f: int):
    """nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias."""
    bound = 1.0 / math.sqrt(in_f)
    w = rng.uniform(-bound, bound, size=(out_f, in_f)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(out_f,)).astype(np.float32)
    return w, b


def _conv_init(rng, out_c, in_c, k):
    bound = 1.0 / math.sqrt(in_c * k * k)
    w = rng.uniform(-bound, bound, size=(out_c, in_c, k, k)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(out_c,)).astype(np.float32)
    return w, b


def _model(nodes, inputs, outputs, inits, name):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="amp-mlir-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(batch: int = 256, seed: int = 42) -> onnx.ModelProto:
    """Linear(64,128) -> ReLU -> Linear(128,10), cross entropy
    (docs/semantics.md section 5)."""
    rng = np.random.default_rng(seed)
    w1, b1 = _linear_init(rng, 128, 64)
    w2, b2 = _linear_init(rng, 10, 128)
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="/fc1/Gemm", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="/relu/Relu"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], name="/fc2/Gemm", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                         name="/loss/SoftmaxCrossEntropyLoss", reduction="mean"),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 64]),
              helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])]
    inits = {"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2, "fc2.bias": b2}
    return _model(nodes, inputs, outputs, inits, "mlp")


def cnn(batch: int = 32, seed: int = 42) -> onnx.ModelProto:
    """Conv(3,16,3,pad 1) -> BatchNorm -> ReLU -> MaxPool(2) -> Conv(16,32,3,pad 1)
    -> ReLU -> GlobalAvgPool -> Flatten -> Linear(32,10), cross entropy."""
    rng = np.random.default_rng(seed)
    c1w, c1b = _conv_init(rng, 16, 3, 3)
    c2w, c2b = _conv_init(rng, 32, 16, 3)
    fw, fb = _linear_init(rng, 10, 32)
    inits = {
        "conv1.weight": c1w, "conv1.bias": c1b,
        "bn1.weight": np.ones(16, np.float32), "bn1.bias": np.zeros(16, np.float32),
        "bn1.running_mean": np.zeros(16, np.float32), "bn1.running_var": np.ones(16, np.float32),
        "conv2.weight": c2w, "conv2.bias": c2b,
        "fc.weight": fw, "fc.bias": fb,
    }
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c1"], name="/conv1/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization",
                         ["c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"],
                         ["n1"], name="/bn1/BatchNormalization", epsilon=1e-5, momentum=0.9),
        helper.make_node("Relu", ["n1"], ["r1"], name="/relu1/Relu"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="/conv2/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="/relu2/Relu"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="/gap/GlobalAveragePool"),
        helper.make_node("Flatten", ["g"], ["f"], name="/flatten/Flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                         name="/loss/SoftmaxCrossEntropyLoss", reduction="mean"),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 32, 32]),
              helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return _model(nodes, inputs, outputs, inits, "cnn")


def transformer_block(batch: int = 8, seq: int = 16, dim: int = 64, heads: int = 4,
                      classes: int = 10, seed: int = 42) -> onnx.ModelProto:
    """Pre-norm encoder block (LayerNorm, 4-head self-attention, residual,
    LayerNorm, MLP with erf GELU, residual), mean over tokens, Linear head,
    cross entropy. GELU is spelled with Erf as torch exports it at opset 17."""
    rng = np.random.default_rng(seed)
    dh = dim // heads
    inits = {}
    for name, (o, i) in {"attn.q": (dim, dim), "attn.k": (dim, dim), "attn.v": (dim, dim),
                         "attn.out": (dim, dim), "mlp.fc1": (4 * dim, dim),
                         "mlp.fc2": (dim, 4 * dim), "head": (classes, dim)}.items():
        w, b = _linear_init(rng, o, i)
        # MatMul-style layers store W^T ([in, out]) as torch exports them.
        inits[name + ".weight"] = w if name == "head" else np.ascontiguousarray(w.T)
        inits[name + ".bias"] = b
    for ln in ("ln1", "ln2"):
        inits[ln + ".weight"] = np.ones(dim, np.float32)
        inits[ln + ".bias"] = np.zeros(dim, np.float32)
    inits["shape_heads"] = np.array([batch, seq, heads, dh], np.int64)
    inits["shape_model"] = np.array([batch, seq, dim], np.int64)
    # Scalars are Constant nodes, as torch.onnx.export writes them: they are
    # not parameters.
    consts = {"scale": 1.0 / math.sqrt(dh), "sqrt2": math.sqrt(2.0), "one": 1.0, "half": 0.5}

    def lin(x, name, out):
        return [helper.make_node("MatMul", [x, name + ".weight"], [out + "_mm"], name=f"/{name}/MatMul"),
                helper.make_node("Add", [out + "_mm", name + ".bias"], [out], name=f"/{name}/Add")]

    n = [helper.make_node("Constant", [], [k], name=f"/Constant_{k}",
                          value=numpy_helper.from_array(np.array(v, np.float32), k))
         for k, v in consts.items()]
    n.append(helper.make_node("LayerNormalization", ["input", "ln1.weight", "ln1.bias"], ["x1"],
                              name="/ln1/LayerNormalization", axis=-1, epsilon=1e-5))
    for p in ("q", "k", "v"):
        n += lin("x1", f"attn.{p}", p)
        n.append(helper.make_node("Reshape", [p, "shape_heads"], [p + "_h"], name=f"/attn/{p}/Reshape"))
        perm = [0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]
        n.append(helper.make_node("Transpose", [p + "_h"], [p + "_t"], name=f"/attn/{p}/Transpose", perm=perm))
    n += [
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"], name="/attn/scores/MatMul"),
        helper.make_node("Mul", ["scores", "scale"], ["scores_s"], name="/attn/scale/Mul"),
        helper.make_node("Softmax", ["scores_s"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v_t"], ["ctx"], name="/attn/ctx/MatMul"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], name="/attn/ctx/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "shape_model"], ["ctx_m"], name="/attn/ctx/Reshape"),
    ]
    n += lin("ctx_m", "attn.out", "attn_o")
    n.append(helper.make_node("Add", ["input", "attn_o"], ["res1"], name="/res1/Add"))
    n.append(helper.make_node("LayerNormalization", ["res1", "ln2.weight", "ln2.bias"], ["x2"],
                              name="/ln2/LayerNormalization", axis=-1, epsilon=1e-5))
    n += lin("x2", "mlp.fc1", "h")
    n += [
        helper.make_node("Div", ["h", "sqrt2"], ["h_d"], name="/mlp/gelu/Div"),
        helper.make_node("Erf", ["h_d"], ["h_e"], name="/mlp/gelu/Erf"),
        helper.make_node("Add", ["h_e", "one"], ["h_a"], name="/mlp/gelu/Add"),
        helper.make_node("Mul", ["h", "h_a"], ["h_m"], name="/mlp/gelu/Mul"),
        helper.make_node("Mul", ["h_m", "half"], ["g"], name="/mlp/gelu/Mul_1"),
    ]
    n += lin("g", "mlp.fc2", "m")
    n.append(helper.make_node("Add", ["res1", "m"], ["res2"], name="/res2/Add"))
    n.append(helper.make_node("ReduceMean", ["res2"], ["pooled"], name="/pool/ReduceMean", axes=[1], keepdims=0))
    n.append(helper.make_node("Gemm", ["pooled", "head.weight", "head.bias"], ["logits"], name="/head/Gemm", transB=1))
    n.append(helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                              name="/loss/SoftmaxCrossEntropyLoss", reduction="mean"))
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, seq, dim]),
              helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return _model(n, inputs, outputs, inits, "transformer_block")


MODELS = {"mlp": mlp, "cnn": cnn, "transformer_block": transformer_block}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write <name>.onnx into")
    ap.add_argument("--only", choices=sorted(MODELS), help="write one model")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name, make in MODELS.items():
        if args.only and name != args.only:
            continue
        path = os.path.join(args.out, name + ".onnx")
        tmp = path + ".tmp"
        onnx.save(make(), tmp)
        os.replace(tmp, path)
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
