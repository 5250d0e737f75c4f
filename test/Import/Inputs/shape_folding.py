"""Integer shape arithmetic folded at import (Mod, Reshape, Slice, Div with
a broadcast scalar, Neg, ConstantOfShape of a constant shape): what torch.onnx.export writes for attention's head
split. `gen OUT.onnx` writes the model (random values each run, negative
ones included); `check MODEL OUT.npz` compares amp-run's outputs with numpy.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper as H, numpy_helper as NH


def values(model):
    return {i.name: NH.to_array(i) for i in model.graph.initializer}


def gen(path):
    r = np.random.default_rng()
    a = r.integers(-50, 50, 8).astype(np.int64)
    b = r.integers(1, 9, 8).astype(np.int64) * r.choice([-1, 1], 8)
    v = r.integers(-100, 100, 6).astype(np.int64)
    inits = {"a": a, "b": b, "v": v, "two": np.array(2, np.int64), "rs": np.array([-1, 3], np.int64),
             "s0": np.array([-2], np.int64), "e0": np.array([-100], np.int64), "st": np.array([-2], np.int64),
             "s1": np.array([1], np.int64), "e1": np.array([100], np.int64), "z": np.array([0, -1], np.int64)}
    n = [H.make_node("Mod", ["a", "b"], ["mod0"]), H.make_node("Mod", ["a", "b"], ["mod1"], fmod=1),
         H.make_node("Mod", ["v", "two"], ["modb"]), H.make_node("Reshape", ["v", "rs"], ["resh"]),
         H.make_node("Reshape", ["resh", "z"], ["resh0"]),
         H.make_node("Slice", ["v", "s0", "e0", "", "st"], ["slc"]),
         H.make_node("Slice", ["v", "s1", "e1"], ["slc2"]), H.make_node("Div", ["a", "two"], ["div"]),
         H.make_node("Neg", ["a"], ["neg"]),
         H.make_node("ConstantOfShape", ["rs2"], ["cos"],
                     value=NH.from_array(np.array([int(v[0])], np.int64), "fill"))]
    inits["rs2"] = np.array([2, 3], np.int64)
    outs = ["mod0", "mod1", "modb", "resh", "resh0", "slc", "slc2", "div", "neg", "cos"]
    g = H.make_graph(n, "fold", [], [H.make_tensor_value_info(o, TP.INT64, None) for o in outs],
                     [NH.from_array(v, k) for k, v in inits.items()])
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]), path)


def check(model, out):
    x = values(onnx.load(model))
    a, b, v = x["a"], x["b"], x["v"]
    want = {"mod0": np.mod(a, b), "mod1": np.fmod(a, b), "modb": np.mod(v, 2),
            "resh": v.reshape(-1, 3), "resh0": v.reshape(2, 3), "slc": v[-2:-100:-2], "slc2": v[1:100],
            "div": np.trunc(a / 2).astype(np.int64), "neg": -a, "cos": np.full((2, 3), v[0], np.int64)}
    got = np.load(out)
    bad = [k for k, w in want.items() if k not in got.files or got[k].shape != w.shape
           or not np.array_equal(got[k], w)]
    for k in bad:
        print(f"FAIL {k}: got {got[k].tolist() if k in got.files else None}, numpy {want[k].tolist()}")
    print(f"{len(want) - len(bad)} of {len(want)} folded values as numpy computes them")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    gen(sys.argv[2]) if sys.argv[1] == "gen" else check(sys.argv[2], sys.argv[3])
