"""The onnxruntime-training side of test_ort_artifacts.py, run in .venv-ort
(onnxruntime-training 1.19.2 and the onnx it was built with; torch, which
its training package imports, comes from the project venv through a .pth).

  ort_side.py gen MODEL DIR SEED      forward model + generate_artifacts
  ort_side.py patch-adamw DIR MODE WEIGHT_DECAY
  ort_side.py train DIR DATA.npz LR STEPS OUT.npz [SAVE_AFTER CK]
      ORT's own loop (module(batch); optimizer.step(); lazy_reset_grad())
      over full batches in order; the losses, the trainable parameters
      before ("init:NAME") and after ("param:NAME") go to OUT.npz. With SAVE_AFTER
      the checkpoint (optimizer state included) is saved after that many
      steps.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(rng):
    b, d, h, c = 8, 16, 32, 5
    inits = [numpy_helper.from_array((rng.standard_normal((d, h)) * 0.3).astype(np.float32), "fc1.weight"),
             numpy_helper.from_array((rng.standard_normal(h) * 0.1).astype(np.float32), "fc1.bias"),
             numpy_helper.from_array((rng.standard_normal((h, c)) * 0.3).astype(np.float32), "fc2.weight"),
             numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "fc2.bias")]
    nodes = [helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"]),
             helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"]),
             helper.make_node("Add", ["h3", "fc2.bias"], ["logits"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, d])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, c])], inits)
    return g, [i.name for i in inits], [], "adamw"


def mlp_frozen(rng):
    """The MLP with its first layer frozen (frozen_params: checkpoint
    entries that are graph inputs but get no gradient)."""
    g, trainable, _, optim = mlp(rng)
    return g, [n for n in trainable if not n.startswith("fc1.")], ["fc1.weight", "fc1.bias"], optim


def cnn(rng):
    b, ci, hw, co, c = 4, 3, 8, 6, 10
    f = co * (hw // 2) * (hw // 2)
    def P(n, s, k=0.3):
        return numpy_helper.from_array((rng.standard_normal(s) * k).astype(np.float32), n)
    inits = [P("conv.weight", (co, ci, 3, 3)), P("conv.bias", (co,), 0.1),
             P("bn.weight", (co,), 0.1), P("bn.bias", (co,), 0.1),
             numpy_helper.from_array(np.zeros(co, np.float32), "bn.running_mean"),
             numpy_helper.from_array(np.ones(co, np.float32), "bn.running_var"),
             numpy_helper.from_array(np.array([b, f], np.int64), "flat_shape"),
             P("fc.weight", (f, c), 0.1), P("fc.bias", (c,), 0.1)]
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean",
                                                     "bn.running_var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "flat_shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, ci, hw, hw])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, c])], inits)
    trainable = ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    return g, trainable, [], "sgd"


def block(rng):
    """Embedding, layer norm, one attention head, a GELU MLP, mean pooling."""
    b, s, v, d, c = 4, 6, 20, 16, 3
    def P(n, sh, k=0.3):
        return numpy_helper.from_array((rng.standard_normal(sh) * k).astype(np.float32), n)
    inits = [P("emb", (v, d)), P("ln.weight", (d,), 0.1), P("ln.bias", (d,), 0.1),
             P("wq", (d, d)), P("wk", (d, d)), P("wv", (d, d)), P("w1", (d, 2 * d)), P("w2", (2 * d, d)),
             P("head.weight", (d, c)), P("head.bias", (c,), 0.1),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(d), np.float32), "inv_sqrt_d"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(2.0), np.float32), "inv_sqrt2")]
    N = helper.make_node
    nodes = [N("Gather", ["emb", "tokens"], ["e"]),
             N("LayerNormalization", ["e", "ln.weight", "ln.bias"], ["h", "ln_mean", "ln_inv_std"], axis=-1),
             N("MatMul", ["h", "wq"], ["q"]), N("MatMul", ["h", "wk"], ["k"]), N("MatMul", ["h", "wv"], ["vv"]),
             N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             N("MatMul", ["q", "kt"], ["qk"]), N("Mul", ["qk", "inv_sqrt_d"], ["sc"]),
             N("Softmax", ["sc"], ["att"], axis=-1),
             N("MatMul", ["att", "vv"], ["ctx"]), N("Add", ["ctx", "h"], ["r1"]),
             N("MatMul", ["r1", "w1"], ["u"]),
             # GELU written out: 0.5 u (1 + erf(u / sqrt 2))
             N("Mul", ["u", "inv_sqrt2"], ["us"]), N("Erf", ["us"], ["ue"]), N("Add", ["ue", "one"], ["u1"]),
             N("Mul", ["u", "u1"], ["u2"]), N("Mul", ["u2", "half"], ["g"]),
             N("MatMul", ["g", "w2"], ["m"]), N("Add", ["m", "r1"], ["r2"]),
             N("ReduceMean", ["r2"], ["pooled"], axes=[1], keepdims=0),
             N("Gemm", ["pooled", "head.weight", "head.bias"], ["logits"])]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("tokens", TensorProto.INT64, [b, s])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, c])], inits)
    trainable = ["emb", "ln.weight", "ln.bias", "wq", "wk", "wv", "w1", "w2", "head.weight", "head.bias"]
    return g, trainable, [], "adamw"


def gen(name, out, seed):
    from onnxruntime.training import artifacts
    rng = np.random.default_rng(seed)
    g, trainable, frozen, optim = {"mlp": mlp, "mlp_frozen": mlp_frozen, "cnn": cnn,
                                   "block": block}[name](rng)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9  # onnxruntime-training 1.19 reads IR <= 10
    os.makedirs(out, exist_ok=True)
    artifacts.generate_artifacts(
        m, requires_grad=trainable, frozen_params=frozen, loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW if optim == "adamw" else artifacts.OptimType.SGD,
        artifact_directory=out)


def trainable_names(d):
    m = onnx.load(os.path.join(d, "training_model.onnx"))
    suffix = "_grad.accumulation.buffer"
    return [i.name[:-len(suffix)] for i in m.graph.input if i.name.endswith(suffix)]


def patch_adamw(d, mode, wd):
    """Sets AdamWOptimizer's adam_mode and weight_decay (generate_artifacts
    writes Hugging Face's form without decay)."""
    p = os.path.join(d, "optimizer_model.onnx")
    m = onnx.load(p)
    for a in m.graph.node[0].attribute:
        if a.name == "adam_mode":
            a.i = mode
        if a.name == "weight_decay":
            a.f = wd
    onnx.save(m, p)


def train(d, data, lr, steps, out, save_after=None, ck=None):
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    z = np.load(data)
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = Module(os.path.join(d, "training_model.onnx"), state, os.path.join(d, "eval_model.onnx"))
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    opt.set_learning_rate(lr)
    init = {"init:" + n: np.array(state.parameters[n].data) for n in trainable_names(d)}
    module.train()
    # The batch input (x or tokens) and the labels, fed in full batches of
    # the training model's batch size, in order.
    xname = [n for n in z.files if n != "labels"][0]
    x, y = z[xname], z["labels"]
    m = onnx.load(os.path.join(d, "training_model.onnx"))
    bsz = next(i.type.tensor_type.shape.dim[0].dim_value for i in m.graph.input if i.name == xname)
    losses = []
    for k in range(steps):
        lo = (k * bsz) % x.shape[0]
        loss = module(x[lo:lo + bsz], y[lo:lo + bsz])
        opt.step()
        module.lazy_reset_grad()
        losses.append(float(loss))
        if save_after is not None and k + 1 == save_after:
            CheckpointState.save_checkpoint(state, ck, include_optimizer_state=True)
    final = {"param:" + n: state.parameters[n].data for n in trainable_names(d)}
    np.savez(out, losses=np.array(losses, np.float64), **init, **final)


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "patch-adamw":
        patch_adamw(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1] == "train":
        a = sys.argv[2:]
        train(a[0], a[1], float(a[2]), int(a[3]), a[4],
              int(a[5]) if len(a) > 5 else None, a[6] if len(a) > 6 else None)
    else:
        sys.exit("usage: ort_side.py gen|train ...")
