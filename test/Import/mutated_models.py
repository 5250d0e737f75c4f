"""Mutated models through every tool: each of gen.py's models (and a copy
with its float inputs made parameters) is changed at the protobuf level
(attribute values, dims, wiring, op types, constant contents, initializer
shapes) and pushed through amp-translate, amp-opt (loss, autodiff,
autocast, optimizer, loss scaling, lowering), amp-run in fp32 and bf16 and,
for some, amp-compile and three steps of ./train. A mutated model may be
valid or not, so only the outcome's form is checked: exit 0, or exit 1 with
a message (never a signal, a crash report or a silent failure).

    python mutated_models.py BIN_DIR WORKDIR [COUNT] [SEED]
"""

import copy
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, numpy_helper as NH

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import gen  # noqa: E402

bindir, work = sys.argv[1], sys.argv[2]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 60
seed = int(sys.argv[4]) if len(sys.argv) > 4 else random.randrange(1 << 30)
rng = random.Random(seed)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
tool = {t: os.path.join(bindir, t) for t in ("amp-translate", "amp-opt", "amp-run", "amp-compile")}

BASES = ["mlp", "elementwise", "cnn", "transformer", "matmul_bias", "gelu_chains", "shapes",
         "old_opsets", "reductions", "losses", "constants", "activations", "masks", "pad_reflect",
         "pad_constant", "gather_elements_norm", "resize_nearest", "resize_linear", "argmax",
         "conv_transpose", "einsum_attention", "rnn_relu", "gathernd", "scatternd_mul", "topk",
         "legacy_add", "expand_minus_one", "random_ops", "split_sizes", "einsum_diagonal"]


def with_params(m):
    """The model with its float graph inputs (all but the first of several)
    turned into initializers: parameters, so that it trains."""
    g = m.graph
    inits = {t.name for t in g.initializer}
    fl = [v for v in g.input if v.name not in inits and v.type.tensor_type.elem_type == TP.FLOAT]
    for v in fl[1:] if len(fl) > 1 else fl:
        shape = [d.dim_value if d.dim_value > 0 else 2 for d in v.type.tensor_type.shape.dim]
        g.initializer.append(NH.from_array(
            np.random.default_rng(2).standard_normal(shape).astype(np.float32), v.name))
    return m


bases = {}
for n in BASES:
    bases[n] = getattr(gen, n)()
    bases[n + " (params)"] = with_params(copy.deepcopy(bases[n]))

INTS = [-3, -2, -1, 0, 1, 2, 3, 4, 7, 100, 2**31 - 1, -2**31, 2**40]
SAME_ARITY = [["Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Max", "Min", "Equal", "Less"],
              ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Softmax",
               "LogSoftmax", "Transpose", "Identity", "Flatten", "Erf", "Reciprocal"],
              ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2"]]


def mutate(m):
    """One random change; a description, or None when the pick did not apply."""
    g = m.graph
    nodes = list(g.node)
    kind = rng.randrange(8)
    if kind == 0 and nodes:  # an attribute's value
        n = rng.choice(nodes)
        ats = [a for a in n.attribute if a.type in (onnx.AttributeProto.INT,
                                                    onnx.AttributeProto.INTS,
                                                    onnx.AttributeProto.FLOAT)]
        if ats:
            a = rng.choice(ats)
            if a.type == onnx.AttributeProto.INT:
                a.i = rng.choice(INTS)
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e30, 0.5])
            elif len(a.ints) and rng.random() < 0.7:
                a.ints[rng.randrange(len(a.ints))] = rng.choice(INTS)
            elif len(a.ints) and rng.random() < 0.5:
                del a.ints[rng.randrange(len(a.ints))]
            else:
                a.ints.append(rng.choice(INTS))
            return f"attribute {n.name}.{a.name}"
    if kind == 1:  # a declared dim of a graph input or output
        vs = list(g.input) + list(g.output)
        v = rng.choice(vs)
        d = v.type.tensor_type.shape.dim
        if len(d):
            i = rng.randrange(len(d))
            d[i].dim_value = rng.choice([0, 1, 2, 3, 5, 8])
            return f"dim {v.name}[{i}]"
    if kind == 2 and nodes:  # two inputs of a node swapped
        n = rng.choice(nodes)
        if len(n.input) >= 2:
            i, j = rng.sample(range(len(n.input)), 2)
            n.input[i], n.input[j] = n.input[j], n.input[i]
            return f"swapped inputs of {n.name}"
    if kind == 3 and nodes:  # an input rewired to another defined value
        defined = ([i.name for i in g.input] + [t.name for t in g.initializer]
                   + [o for nn in nodes for o in nn.output])
        n = rng.choice(nodes)
        if len(n.input):
            n.input[rng.randrange(len(n.input))] = rng.choice(defined)
            return f"rewired {n.name}"
    if kind == 4 and nodes:  # an attribute dropped
        n = rng.choice(nodes)
        if len(n.attribute):
            del n.attribute[rng.randrange(len(n.attribute))]
            return f"dropped an attribute of {n.name}"
    if kind == 5 and len(g.initializer):  # an int64 constant (shape, axes, k)
        t = rng.choice(list(g.initializer))
        if t.data_type == TP.INT64:
            a = NH.to_array(t).copy()
            if a.size:
                a.flat[rng.randrange(a.size)] = rng.choice(INTS[:-1])
                t.CopyFrom(NH.from_array(a, t.name))
                return f"constant {t.name}"
    if kind == 6 and nodes:  # an op type changed within its arity
        n = rng.choice(nodes)
        for group in SAME_ARITY:
            if n.op_type in group:
                n.op_type = rng.choice(group)
                return f"{n.name} became {n.op_type}"
    if kind == 7 and len(g.initializer):  # an initializer's shape (data to match)
        t = rng.choice(list(g.initializer))
        if t.data_type == TP.FLOAT and len(t.dims):
            shape = list(t.dims)
            shape[rng.randrange(len(shape))] = rng.choice([1, 2, 3, 4, 6])
            t.CopyFrom(NH.from_array(
                np.random.default_rng(1).standard_normal(shape).astype(np.float32), t.name))
            return f"reshaped {t.name}"
    return None


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout after 120 s", ""


def arrays(signature_mlir, batches, salt):
    """Random arrays for the amp.input arguments of the printed function
    (`batches` batches of each)."""
    out = {}
    r = np.random.default_rng(salt)
    for ty, name in re.findall(r'%arg\d+: tensor<([^>]*)> \{amp.input = "([^"]+)"\}', signature_mlir):
        parts = ty.split("x")
        el, shape = parts[-1], [int(p) for p in parts[:-1] if p.isdigit()]
        if len(shape) != len(parts) - 1:
            return None  # a dynamic dim
        if shape:
            shape[0] *= batches
        if el in ("i64", "i32"):
            out[name] = r.integers(0, 2, shape).astype(np.int64 if el == "i64" else np.int32)
        elif el == "i1":
            out[name] = r.random(shape) < 0.5
        elif el in ("f32", "f16"):
            out[name] = r.standard_normal(shape).astype(np.float32 if el == "f32" else np.float16)
        else:
            return None
    return out


print(f"seed {seed}, {count} mutated models", flush=True)
failed = 0
outcomes = {}
for it in range(count):
    name = rng.choice(list(bases))
    m = copy.deepcopy(bases[name])
    what = [w for w in (mutate(m) for _ in range(rng.randint(1, 3))) if w] or ["unchanged"]
    path = os.path.join(work, f"m{it}.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    mlir, step = path + ".mlir", path + ".step.mlir"
    stages = []
    rc, err = run([tool["amp-translate"], "--import-onnx", path, "-o", mlir])
    stages.append(("amp-translate", rc, err))
    if rc == 0:
        text = open(mlir).read()
        has_loss = 'amp.output = "loss"' in text
        out0 = m.graph.output[0].name
        add_loss = [] if has_loss else [f"--amp-add-loss=kind=mse output={out0}"]
        rc, err = run([tool["amp-opt"], mlir] + add_loss + [
            "--amp-autodiff", "--amp-autocast=target=bf16", "--amp-optimizer=optimizer=sgd lr=0.01",
            "--amp-loss-scaling", "--amp-fold-casts", "--amp-fold-transposes", "--amp-plan-memory",
            "--amp-lower-to-runtime", "-o", step])
        stages.append(("amp-opt (training step, lowered)", rc, err))
        feeds = arrays(text, 1, it)
        if feeds is not None:
            np.savez(path + ".in.npz", **feeds)
            for prec in ("fp32", "bf16"):
                rc2, err2 = run([tool["amp-run"], path, "--inputs", path + ".in.npz", "--outputs",
                                 path + ".out.npz", "--precision", prec])
                stages.append((f"amp-run --precision {prec}", rc2, err2))
        if rc == 0 and rng.random() < 0.4:
            prec = rng.choice(["fp16", "bf16", "fp32"])
            loss = [] if has_loss else ["--loss-fn", "mse", "--loss-of", out0]
            prog = path + ".train"
            rc, err = run([tool["amp-compile"], path, "-o", prog, "--precision", prec,
                           "--optimizer", rng.choice(["sgd", "adam"])] + loss)
            stages.append((f"amp-compile --precision {prec}", rc, err))
            # The step's inputs (with the mse label, of the output's shape:
            # amp-add-loss's signature).
            sig = text
            if rc == 0 and add_loss:
                p = subprocess.run([tool["amp-opt"], mlir] + add_loss, capture_output=True, text=True)
                sig = p.stdout
            data = arrays(sig, 2, it)
            if rc == 0 and data:
                np.savez(path + ".data.npz", **data)
                rc, err = run([prog, "--data", path + ".data.npz", "--steps", "3"])
                stages.append(("./train --steps 3", rc, err))
    for stage, rc, err in stages:
        key = f"{stage}: {'exit ' + str(rc) if rc in (0, 1) else 'BAD'}"
        outcomes[key] = outcomes.get(key, 0) + 1
        crashed = ("Stack dump" in err or "PLEASE submit" in err or "Assertion" in err
                   or "Segmentation" in err)
        if rc not in (0, 1) or crashed or (rc == 1 and not err.strip()):
            failed += 1
            keep = os.path.join(work, f"FAILED{failed}.onnx")
            shutil.copy(path, keep)
            # The random inputs too, so the failure reproduces without the seed.
            if os.path.exists(path + ".in.npz"):
                shutil.copy(path + ".in.npz", keep + ".in.npz")
            print(f"FAIL {name} ({'; '.join(what)}): {stage} ended with {rc}"
                  f"{' and no message' if rc == 1 and not err.strip() else ''} (kept as {keep}"
                  f"{', its inputs as ' + keep + '.in.npz' if os.path.exists(keep + '.in.npz') else ''})\n"
                  f"  {err.strip()[-600:]}", flush=True)
            break
for k in sorted(outcomes):
    print(f"  {k}: {outcomes[k]}")
print(f"{count - failed} passed, {failed} failed (seed {seed})")
sys.exit(1 if failed else 0)
