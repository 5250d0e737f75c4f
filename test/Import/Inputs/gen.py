"""Writes the small ONNX models the import tests read.

    python gen.py NAME OUT.onnx

Each generator builds a model with onnx.helper the way exporters write
them (field by field, so that old IR versions, typed data fields and
external data can be exercised), without running onnx.checker: some are
meant to be wrong.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper as H, numpy_helper as NH

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))


def model(nodes, inputs, outputs, inits=(), opset=17, ir=8, value_info=(), domains=None):
    g = H.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    ops = domains if domains is not None else [H.make_opsetid("", opset)]
    m = H.make_model(g, opset_imports=ops, producer_name="gen.py")
    m.ir_version = ir
    return m


def vi(name, dtype, shape):
    return H.make_tensor_value_info(name, dtype, shape)


def rnd(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def mlp():
    from amp_mlir.examples import mlp as make
    return make(batch=4)


def elementwise():
    n = [H.make_node("Add", ["a", "b"], ["s"], name="add"),
         H.make_node("Sub", ["s", "b"], ["d"], name="sub"),
         H.make_node("Mul", ["d", "a"], ["m"], name="mul"),
         H.make_node("Div", ["m", "b"], ["q"], name="div"),
         H.make_node("Pow", ["q", "e"], ["p"], name="pow"),
         H.make_node("Sqrt", ["p"], ["r"], name="sqrt"),
         H.make_node("Exp", ["r"], ["x"], name="exp"),
         H.make_node("Log", ["x"], ["l"], name="log"),
         H.make_node("Erf", ["l"], ["f"], name="erf"),
         H.make_node("Tanh", ["f"], ["t"], name="tanh"),
         H.make_node("Sigmoid", ["t"], ["g"], name="sigmoid"),
         H.make_node("Relu", ["g"], ["u"], name="relu"),
         H.make_node("LeakyRelu", ["u"], ["k"], name="leaky", alpha=0.2),
         H.make_node("Where", ["c", "k", "a"], ["w"], name="where"),
         H.make_node("Identity", ["w"], ["y"], name="identity")]
    return model(n, [vi("a", TP.FLOAT, [2, 3]), vi("b", TP.FLOAT, [3]),
                     vi("e", TP.INT64, [1]), vi("c", TP.BOOL, [2, 1])],
                 [vi("y", TP.FLOAT, [2, 3])])


def cnn():
    from amp_mlir.examples import cnn as make
    return make(batch=2)


def transformer():
    from amp_mlir.examples import transformer_block as make
    return make(batch=2, seq=4, dim=8, heads=2)


def matmul_bias():
    """MatMul + Add of an [N] bias (fuses); the product read twice, and a
    2-D addend (neither fuses)."""
    N = H.make_node
    inits = [NH.from_array(rnd(4, 5), "w"), NH.from_array(rnd(5), "b"),
             NH.from_array(rnd(3, 5), "b2")]
    nodes = [N("MatMul", ["x", "w"], ["p"]), N("Add", ["p", "b"], ["y"]),
             N("MatMul", ["x", "w"], ["q"]), N("Add", ["q", "b"], ["q1"]),
             N("Add", ["q1", "q"], ["z"]),
             N("MatMul", ["x", "w"], ["r"]), N("Add", ["b2", "r"], ["u"])]
    return model(nodes, [vi("x", TP.FLOAT, [2, 3, 4])],
                 [vi(n, TP.FLOAT, [2, 3, 5]) for n in ("y", "z", "u")], inits)


def gelu_chains():
    """GELU written out four ways: a (x * P) * 0.5 with x / sqrt 2 and b
    (x * 0.5) * P with x * (1 / sqrt 2) fuse; c (1.5 instead of 1) and d
    (erf read twice) do not."""
    N = H.make_node

    def c(name, v):  # Constant nodes, as exporters write scalars
        return N("Constant", [], [name], value=NH.from_array(np.array(v, np.float32), name))
    nodes = [c("sqrt2", 1.4142135), c("rsqrt2", 0.70710677), c("one", 1.0), c("half", 0.5),
             c("one_half", 1.5),
             N("Div", ["x", "sqrt2"], ["a_t"]), N("Erf", ["a_t"], ["a_e"]),
             N("Add", ["a_e", "one"], ["a_p"]), N("Mul", ["x", "a_p"], ["a_m"]),
             N("Mul", ["a_m", "half"], ["a"]),
             N("Mul", ["rsqrt2", "x"], ["b_t"]), N("Erf", ["b_t"], ["b_e"]),
             N("Add", ["one", "b_e"], ["b_p"]), N("Mul", ["x", "half"], ["b_h"]),
             N("Mul", ["b_h", "b_p"], ["b"]),
             N("Div", ["x", "sqrt2"], ["c_t"]), N("Erf", ["c_t"], ["c_e"]),
             N("Add", ["c_e", "one_half"], ["c_p"]), N("Mul", ["x", "c_p"], ["c_m"]),
             N("Mul", ["c_m", "half"], ["cc"]),
             N("Div", ["x", "sqrt2"], ["d_t"]), N("Erf", ["d_t"], ["d_e"]),
             N("Add", ["d_e", "one"], ["d_p"]), N("Mul", ["x", "d_p"], ["d_m"]),
             N("Mul", ["d_m", "half"], ["d"]), N("Add", ["d", "d_e"], ["dd"])]
    return model(nodes, [vi("x", TP.FLOAT, [2, 3])],
                 [vi(n, TP.FLOAT, [2, 3]) for n in ("a", "b", "cc", "dd")])


def shapes():
    """Reshape with a constant shape, Slice (opset 13 inputs), Squeeze /
    Unsqueeze with axes inputs, Transpose, Concat, Gather, Expand, and a
    Shape -> Gather -> Unsqueeze -> Concat chain that folds to a constant."""
    inits = [NH.from_array(np.array([0, -1], np.int64), "shape2"),
             NH.from_array(np.array([1], np.int64), "starts"),
             NH.from_array(np.array([9223372036854775807], np.int64), "ends"),
             NH.from_array(np.array([-1], np.int64), "axes_last"),
             NH.from_array(np.array([0], np.int64), "axes0"),
             NH.from_array(np.array([1], np.int64), "idx1"),
             NH.from_array(np.array([-1], np.int64), "minus1"),
             NH.from_array(np.array([3, 1, 1], np.int64), "expand_to"),
             NH.from_array(np.array([2, 0], np.int64), "gidx")]
    n = [H.make_node("Reshape", ["x", "shape2"], ["r"], name="reshape"),
         H.make_node("Slice", ["r", "starts", "ends", "axes_last"], ["s"], name="slice"),
         H.make_node("Unsqueeze", ["s", "axes0"], ["u"], name="unsqueeze"),
         H.make_node("Squeeze", ["u", "axes0"], ["q"], name="squeeze"),
         H.make_node("Transpose", ["q"], ["t"], name="transpose", perm=[1, 0]),
         H.make_node("Concat", ["t", "t"], ["c"], name="concat", axis=1),
         H.make_node("Gather", ["c", "gidx"], ["g"], name="gather", axis=0),
         H.make_node("Shape", ["x"], ["shp"], name="shape"),
         H.make_node("Gather", ["shp", "idx1"], ["d1"], name="shape_gather"),
         H.make_node("Concat", ["minus1", "d1"], ["newshape"], name="shape_concat", axis=0),
         H.make_node("Reshape", ["x", "newshape"], ["y2"], name="reshape_folded"),
         H.make_node("Expand", ["b", "expand_to"], ["y3"], name="expand")]
    return model(n, [vi("x", TP.FLOAT, [2, 3, 4]), vi("b", TP.FLOAT, [4])],
                 [vi("g", TP.FLOAT, [2, 4]), vi("y2", TP.FLOAT, [8, 3]),
                  vi("y3", TP.FLOAT, [3, 1, 4])], inits, opset=13)


def old_opsets():
    """Opset 9 forms: Slice and Squeeze/Unsqueeze take attributes;
    Softmax on axis 1 of a 3-D input coerces to 2-D."""
    n = [H.make_node("Slice", ["x"], ["s"], name="slice9", starts=[0], ends=[2], axes=[2]),
         H.make_node("Unsqueeze", ["s"], ["u"], name="unsqueeze9", axes=[0]),
         H.make_node("Squeeze", ["u"], ["q"], name="squeeze9", axes=[0]),
         H.make_node("Softmax", ["q"], ["y"], name="softmax9", axis=1),
         H.make_node("ReduceSum", ["y"], ["z"], name="reducesum9", axes=[1], keepdims=0)]
    return model(n, [vi("x", TP.FLOAT, [2, 3, 4])], [vi("y", TP.FLOAT, [2, 3, 2]),
                                                    vi("z", TP.FLOAT, [2, 2])], opset=9)


def reductions():
    inits = [NH.from_array(np.array([1], np.int64), "axes")]
    n = [H.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum", keepdims=1),
         H.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[0, 2], keepdims=0),
         H.make_node("ReduceMax", ["x"], ["mx"], name="max"),
         H.make_node("Softmax", ["x"], ["sm"], name="softmax", axis=1),
         H.make_node("LogSoftmax", ["x"], ["lsm"], name="logsoftmax")]
    return model(n, [vi("x", TP.FLOAT, [2, 3, 4])],
                 [vi("s", TP.FLOAT, [2, 1, 4]), vi("m", TP.FLOAT, [3]),
                  vi("mx", TP.FLOAT, [1, 1, 1]), vi("sm", TP.FLOAT, [2, 3, 4]),
                  vi("lsm", TP.FLOAT, [2, 3, 4])], inits, opset=13)


def losses():
    n = [H.make_node("SoftmaxCrossEntropyLoss", ["x", "y", "w"], ["l", "lp"], name="sce",
                     reduction="sum", ignore_index=2),
         H.make_node("NegativeLogLikelihoodLoss", ["lp", "y"], ["n"], name="nll", reduction="none"),
         H.make_node("LayerNormalization", ["x", "g"], ["ln"], name="ln", axis=1, epsilon=1e-3),
         H.make_node("Dropout", ["ln"], ["d", "mask"], name="dropout", seed=3)]
    return model(n, [vi("x", TP.FLOAT, [4, 5]), vi("y", TP.INT64, [4]), vi("w", TP.FLOAT, [5]),
                     vi("g", TP.FLOAT, [5])],
                 [vi("l", TP.FLOAT, []), vi("n", TP.FLOAT, [4]), vi("d", TP.FLOAT, [4, 5]),
                  vi("mask", TP.BOOL, [4, 5])], opset=17)


def constants():
    """Every tensor encoding: typed float_data, raw f16, bf16 in int32_data,
    int64_data, bool, and Constant nodes with value / value_floats / value_ints."""
    f16 = np.array([1.0, -2.5, 65504.0], np.float16)
    t_f16 = H.make_tensor("c_f16", TP.FLOAT16, [3], f16.tobytes(), raw=True)
    bf16_bits = [0x3F80, 0xC020, 0x7F7F]  # 1.0, -2.5, max bf16
    t_bf16 = onnx.TensorProto(name="c_bf16", data_type=TP.BFLOAT16, dims=[3])
    t_bf16.int32_data.extend(bf16_bits)
    t_f32 = H.make_tensor("c_f32", TP.FLOAT, [3], [0.5, 1.5, 2.5])
    t_i64 = onnx.TensorProto(name="c_i64", data_type=TP.INT64, dims=[2])
    t_i64.int64_data.extend([7, -9])
    t_bool = H.make_tensor("c_bool", TP.BOOL, [3], [1, 0, 1])
    n = [H.make_node("Constant", [], ["k1"], name="const_floats", value_floats=[1.0, 2.0, 3.0]),
         H.make_node("Constant", [], ["k2"], name="const_tensor",
                     value=H.make_tensor("v", TP.FLOAT, [3], [4.0, 5.0, 6.0])),
         H.make_node("Add", ["k1", "k2"], ["k3"], name="add_consts"),
         H.make_node("Add", ["x", "k3"], ["y"], name="add"),
         H.make_node("Add", ["h", "c_f16"], ["yh"], name="add_f16"),
         H.make_node("Add", ["bh", "c_bf16"], ["yb"], name="add_bf16"),
         H.make_node("Mul", ["x", "c_f32"], ["yf"], name="mul_f32"),
         H.make_node("Add", ["i", "c_i64"], ["yi"], name="add_i64"),
         H.make_node("Where", ["c_bool", "x", "yf"], ["yw"], name="where_bool"),
         H.make_node("Cast", ["x"], ["xc"], name="cast_bf16", to=TP.BFLOAT16)]
    return model(n, [vi("x", TP.FLOAT, [3]), vi("h", TP.FLOAT16, [3]), vi("bh", TP.BFLOAT16, [3]),
                     vi("i", TP.INT64, [2])],
                 [vi("y", TP.FLOAT, [3]), vi("yh", TP.FLOAT16, [3]), vi("yb", TP.BFLOAT16, [3]),
                  vi("yi", TP.INT64, [2]), vi("yw", TP.FLOAT, [3]), vi("xc", TP.BFLOAT16, [3])],
                 [t_f16, t_bf16, t_f32, t_i64, t_bool], opset=13)


def symbolic():
    n = [H.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    return model(n, [vi("x", TP.FLOAT, ["batch", "seq", 8])], [vi("y", TP.FLOAT, ["batch", "seq", 4])],
                 [NH.from_array(rnd(8, 4), "w")])


def ir3():
    """IR 3: initializers are also listed as graph inputs."""
    w = NH.from_array(rnd(3, 2), "w")
    n = [H.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    return model(n, [vi("x", TP.FLOAT, [1, 3]), vi("w", TP.FLOAT, [3, 2])],
                 [vi("y", TP.FLOAT, [1, 2])], [w], opset=7, ir=3)


def no_default_domain():
    """Like ONNX's test_adam: only ai.onnx.preview.training is imported."""
    n = [H.make_node("Adam", ["r", "t", "x", "g", "v", "h"], ["x2", "v2", "h2"], name="adam",
                     domain="ai.onnx.preview.training", alpha=0.9)]
    ins = [vi("r", TP.FLOAT, []), vi("t", TP.INT64, []), vi("x", TP.FLOAT, [2]),
           vi("g", TP.FLOAT, [2]), vi("v", TP.FLOAT, [2]), vi("h", TP.FLOAT, [2])]
    return model(n, ins, [vi("x2", TP.FLOAT, [2]), vi("v2", TP.FLOAT, [2]), vi("h2", TP.FLOAT, [2])],
                 domains=[H.make_opsetid("ai.onnx.preview.training", 1)])


def gradient():
    """Gradient of d = (a + b) * a for a and b (ONNX's simple test), with the
    default domain imported too."""
    n = [H.make_node("Add", ["a", "b"], ["c"], name="add"),
         H.make_node("Mul", ["c", "a"], ["d"], name="mul"),
         H.make_node("Gradient", ["a", "b"], ["da", "db"], name="grad",
                     domain="ai.onnx.preview.training", xs=["a", "b"], y="d")]
    ins = [vi("a", TP.FLOAT, [3]), vi("b", TP.FLOAT, [3])]
    return model(n, ins, [vi("d", TP.FLOAT, [3]), vi("da", TP.FLOAT, [3]), vi("db", TP.FLOAT, [3])],
                 domains=[H.make_opsetid("", 17), H.make_opsetid("ai.onnx.preview.training", 1)])


def gradient_fed():
    """Gradient whose input is another value than its xs names: unsupported."""
    m = gradient()
    m.graph.node[2].input[1] = "c"
    return m


def _external(location, data=None, length=None, offset=None):
    """A Gemm whose weight lives in an external file next to the model."""
    w = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[4, 3])
    w.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = w.external_data.add()
            e.key, e.value = k, str(v)
    n = [H.make_node("Gemm", ["x", "w"], ["y"], name="gemm_ext")]
    return model(n, [vi("x", TP.FLOAT, [2, 4])], [vi("y", TP.FLOAT, [2, 3])], [w])


def external_ok():
    return _external("weights.bin", offset=0, length=48)


def external_traversal():
    return _external("../outside.bin", offset=0, length=48)


def external_absolute():
    return _external("/etc/passwd")


def external_missing():
    return _external("missing.bin")


def external_short():
    return _external("short.bin")


def external_link():
    return _external("link.bin")


def unknown_ops():
    n = [H.make_node("FooBar", ["x"], ["a"], name="first_unknown"),
         H.make_node("Relu", ["a"], ["b"], name="relu"),
         H.make_node("Bogus", ["b"], ["y"], name="second_unknown", domain="com.example")]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])],
                 domains=[H.make_opsetid("", 17), H.make_opsetid("com.example", 1)])


def shape_contradiction():
    """value_info claims a shape the Gemm rule cannot give."""
    w = NH.from_array(rnd(4, 3), "w")
    n = [H.make_node("Gemm", ["x", "w"], ["h"], name="gemm"),
         H.make_node("Relu", ["h"], ["y"], name="relu")]
    return model(n, [vi("x", TP.FLOAT, [2, 4])], [vi("y", TP.FLOAT, [2, 3])], [w],
                 value_info=[vi("h", TP.FLOAT, [5, 5])])


def rule_violation():
    """MatMul of [4, 3] by [4, 5]: contracted dims differ."""
    n = [H.make_node("MatMul", ["a", "b"], ["y"], name="bad_matmul")]
    return model(n, [vi("a", TP.FLOAT, [4, 3]), vi("b", TP.FLOAT, [4, 5])], [vi("y", TP.FLOAT, [4, 5])])


def duplicate_names():
    n = [H.make_node("Relu", ["x"], ["y"], name="relu1"),
         H.make_node("Sigmoid", ["x"], ["y"], name="sigmoid_same_output")]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])])


def duplicate_initializers():
    a = NH.from_array(rnd(2), "w")
    b = NH.from_array(rnd(2), "w")
    n = [H.make_node("Add", ["x", "w"], ["y"], name="add")]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])], [a, b])


def cycle():
    n = [H.make_node("Relu", ["b"], ["a"], name="node_a"),
         H.make_node("Relu", ["a"], ["b"], name="node_b"),
         H.make_node("Add", ["x", "b"], ["y"], name="add")]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])])


def dangling():
    n = [H.make_node("Add", ["x", "nowhere"], ["y"], name="add_dangling")]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])])


def bad_raw_data():
    w = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[4, 3], raw_data=b"\0" * 20)
    n = [H.make_node("Gemm", ["x", "w"], ["y"], name="gemm")]
    return model(n, [vi("x", TP.FLOAT, [2, 4])], [vi("y", TP.FLOAT, [2, 3])], [w])


def bad_attribute():
    n = [H.make_node("Softmax", ["x"], ["y"], name="softmax_float_axis", axis=1.5)]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3])], opset=13)


def bad_auto_pad():
    w = NH.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    n = [H.make_node("Conv", ["x", "w"], ["y"], name="conv_same", auto_pad="SAME")]
    return model(n, [vi("x", TP.FLOAT, [1, 3, 8, 8])], [vi("y", TP.FLOAT, [1, 2, 8, 8])], [w],
                 opset=17)


def bad_reduction():
    n = [H.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["y"], name="sce_avg", reduction="avg")]
    return model(n, [vi("s", TP.FLOAT, [4, 5]), vi("l", TP.INT64, [4])], [vi("y", TP.FLOAT, [])],
                 opset=17)


def bad_gelu_approximation():
    n = [H.make_node("Gelu", ["x"], ["y"], name="gelu_fast", approximate="fast")]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3])], opset=20)


def unknown_attribute():
    n = [H.make_node("Relu", ["x"], ["y"], name="relu_extra", frobnicate=3)]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3])], opset=13)


def axes_input_too_early():
    """ReduceMean with axes as an input at opset 17 (an input only since 18)."""
    inits = [NH.from_array(np.array([1], np.int64), "axes")]
    n = [H.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean17", keepdims=1)]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 1])], inits, opset=17)


def extra_input():
    """Gemm with a fourth input: no Gemm takes one; it must not be ignored."""
    w, b = NH.from_array(rnd(3, 4), "w"), NH.from_array(rnd(4), "b")
    n = [H.make_node("Gemm", ["x", "w", "b", "b"], ["y"], name="gemm4")]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 4])], [w, b])


def extra_output():
    """Relu with a second output that is a graph output: no Relu has one."""
    n = [H.make_node("Relu", ["x"], ["y", "z"], name="relu2out")]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3]), vi("z", TP.FLOAT, [2, 3])])


def double_input():
    n = [H.make_node("Relu", ["x"], ["y"], name="relu")]
    return model(n, [vi("x", TP.DOUBLE, [2])], [vi("y", TP.DOUBLE, [2])])


def negative_dim():
    t = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[-4, 3])
    n = [H.make_node("Add", ["x", "w"], ["y"], name="add")]
    return model(n, [vi("x", TP.FLOAT, [3])], [vi("y", TP.FLOAT, [3])], [t])


def reshape_runtime_shape():
    n = [H.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return model(n, [vi("x", TP.FLOAT, [2, 3, 4]), vi("shape", TP.INT64, [2])],
                 [vi("y", TP.FLOAT, [6, 4])])


def activations():
    """The activations with parameters, the rounding ops, and Clip with
    constant bounds (amp.clip), one bound (the other infinite) and a bound
    computed at run time (amp.max / amp.min)."""
    n = [H.make_node("Elu", ["x"], ["e"], alpha=0.5),
         H.make_node("Celu", ["e"], ["c"]),
         H.make_node("Selu", ["c"], ["s"]),
         H.make_node("HardSigmoid", ["s"], ["h"], alpha=0.25),
         H.make_node("HardSwish", ["h"], ["w"]),
         H.make_node("Softsign", ["w"], ["g"]),
         H.make_node("ThresholdedRelu", ["g"], ["t"], alpha=0.125),
         H.make_node("Sin", ["t"], ["si"]),
         H.make_node("Cos", ["si"], ["co"]),
         H.make_node("Floor", ["co"], ["fl"]),
         H.make_node("Ceil", ["fl"], ["ce"]),
         H.make_node("Round", ["ce"], ["ro"]),
         H.make_node("Sign", ["ro"], ["sg"]),
         H.make_node("Clip", ["sg", "lo", "hi"], ["c1"]),
         H.make_node("Clip", ["c1", "", "hi"], ["c2"]),
         H.make_node("Clip", ["c2", "r"], ["y"])]
    n = [H.make_node("Constant", [], ["lo"], value=H.make_tensor("lo", TP.FLOAT, [], [-0.5])),
         H.make_node("Constant", [], ["hi"], value=H.make_tensor("hi", TP.FLOAT, [], [0.75]))] + n
    return model(n, [vi("x", TP.FLOAT, [2, 3]), vi("r", TP.FLOAT, [])],
                 [vi("y", TP.FLOAT, [2, 3])], opset=14)


def mish():
    """ONNX Mish (opset 18)."""
    n = [H.make_node("Mish", ["x"], ["y"])]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3])], opset=18)


def mish_opset17():
    """Mish where the model's opset has no Mish yet."""
    n = [H.make_node("Mish", ["x"], ["y"], name="mish")]
    return model(n, [vi("x", TP.FLOAT, [2, 3])], [vi("y", TP.FLOAT, [2, 3])], opset=17)


def split(opset=13, sizes=(2, 4), outputs=2, num_outputs=None, dim=6, axis=1, attr=False):
    ins = ["x"]
    extra = {}
    inits = []
    if sizes is not None and (attr or opset < 13):
        extra["split"] = list(sizes)
    elif sizes is not None:
        ins.append("sizes")
        inits.append(H.make_tensor("sizes", TP.INT64, [len(sizes)], list(sizes)))
    if num_outputs is not None:
        extra["num_outputs"] = num_outputs
    outs = [f"y{i}" for i in range(outputs)]
    n = [H.make_node("Split", ins, outs, name="split", axis=axis, **extra)]
    return model(n, [vi("x", TP.FLOAT, [3, dim])], [vi(o, TP.FLOAT, None) for o in outs],
                 inits=inits, opset=opset)


def split_sizes():
    return split()


def split_equal():
    return split(opset=11, sizes=None, outputs=3, axis=-1)


def split_num_outputs():
    return split(opset=18, sizes=None, outputs=4, num_outputs=4, dim=7)


def split_bad_sum():
    return split(sizes=(2, 3))


def split_uneven():
    return split(opset=11, sizes=None, outputs=4)


def split_count():
    return split(sizes=(1, 2, 3))


def split_both():
    return split(opset=18, num_outputs=2)


def split_bad_axis():
    return split(axis=2)


def celu_zero():
    n = [H.make_node("Celu", ["x"], ["y"], alpha=0.0)]
    return model(n, [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])], opset=13)


def masks():
    """Comparisons and logical ops (Not as xor with true), IsNaN, Trilu
    (constant mask), Range of constants (folded), Tile, CastLike, PRelu."""
    c = lambda name, v, t=TP.INT64: H.make_node(  # noqa: E731
        "Constant", [], [name], value=H.make_tensor(name, t, [], [v]))
    n = [c("k", 1), c("r0", 0), c("r1", 6), c("r2", 2),
         H.make_node("Constant", [], ["reps"], value=H.make_tensor("reps", TP.INT64, [2], [2, 1])),
         H.make_node("Greater", ["a", "b"], ["g"]),
         H.make_node("Equal", ["ids", "ids"], ["e"]),
         H.make_node("Not", ["g"], ["ng"]),
         H.make_node("And", ["ng", "e"], ["m"]),
         H.make_node("IsNaN", ["a"], ["nan"]),
         H.make_node("Or", ["m", "nan"], ["mask"]),
         H.make_node("Where", ["mask", "a", "b"], ["w"]),
         H.make_node("Trilu", ["w", "k"], ["tri"]),
         H.make_node("Range", ["r0", "r1", "r2"], ["rng"]),
         H.make_node("CastLike", ["rng", "a"], ["rf"]),
         H.make_node("Tile", ["tri", "reps"], ["tiled"]),
         H.make_node("PRelu", ["tiled", "slope"], ["pr"]),
         H.make_node("Add", ["pr", "rf"], ["y"])]
    return model(n, [vi("a", TP.FLOAT, [2, 3]), vi("b", TP.FLOAT, [2, 3]), vi("ids", TP.INT64, [2, 3]),
                     vi("slope", TP.FLOAT, [3])],
                 [vi("y", TP.FLOAT, [4, 3])], opset=15)


def range_runtime():
    n = [H.make_node("Range", ["s", "l", "d"], ["y"], name="range")]
    return model(n, [vi("s", TP.INT64, []), vi("l", TP.INT64, []), vi("d", TP.INT64, [])],
                 [vi("y", TP.INT64, None)], opset=13)


def prelu_bad_slope():
    n = [H.make_node("PRelu", ["x", "s"], ["y"], name="prelu")]
    return model(n, [vi("x", TP.FLOAT, [2, 3]), vi("s", TP.FLOAT, [4, 3])],
                 [vi("y", TP.FLOAT, None)], opset=13)


def pad(mode="reflect", pads=(1, -1, 2, 1), opset=13, value=None):
    """Pad of x [3, 4] with constant pads (and a constant value)."""
    c = [H.make_node("Constant", [], ["pads"],
                     value=H.make_tensor("pads", TP.INT64, [len(pads)], list(pads)))]
    ins = ["x", "pads"]
    if value is not None:
        c.append(H.make_node("Constant", [], ["v"], value=H.make_tensor("v", TP.FLOAT, [], [value])))
        ins.append("v")
    n = c + [H.make_node("Pad", ins, ["y"], name="pad", mode=mode)]
    return model(n, [vi("x", TP.FLOAT, [3, 4])], [vi("y", TP.FLOAT, None)], opset=opset)


def pad_reflect():
    return pad()


def pad_constant():
    return pad("constant", (0, 2, 1, 0), value=0.5)


def pad_reflect_too_far():
    return pad(pads=(3, 0, 0, 0))


def pad_unknown_mode():
    return pad("mirror")


def pad_crop_too_much():
    return pad("edge", (-2, 0, -2, 0))


def gather_elements_norm():
    """GatherElements (axis -1) and InstanceNormalization."""
    n = [H.make_node("GatherElements", ["x", "i"], ["g"], axis=-1),
         H.make_node("InstanceNormalization", ["img", "s", "b"], ["y"], epsilon=1e-3)]
    return model(n, [vi("x", TP.FLOAT, [2, 5]), vi("i", TP.INT64, [2, 3]),
                     vi("img", TP.FLOAT, [2, 3, 4, 4]), vi("s", TP.FLOAT, [3]), vi("b", TP.FLOAT, [3])],
                 [vi("g", TP.FLOAT, [2, 3]), vi("y", TP.FLOAT, [2, 3, 4, 4])], opset=13)


def gather_elements_too_big():
    n = [H.make_node("GatherElements", ["x", "i"], ["g"], name="ge", axis=1)]
    return model(n, [vi("x", TP.FLOAT, [2, 5]), vi("i", TP.INT64, [3, 3])],
                 [vi("g", TP.FLOAT, None)], opset=13)


def resize(mode="nearest", coord="asymmetric", sizes=None, scales=(1.0, 1.0, 2.0, 1.5)):
    c = []
    ins = ["x", ""]
    if sizes is None:
        c.append(H.make_node("Constant", [], ["sc"], value=H.make_tensor("sc", TP.FLOAT, [4], list(scales))))
        ins.append("sc")
    else:
        c.append(H.make_node("Constant", [], ["sz"], value=H.make_tensor("sz", TP.INT64, [4], list(sizes))))
        ins += ["", "sz"]
    n = c + [H.make_node("Resize", ins, ["y"], name="resize", mode=mode,
                         coordinate_transformation_mode=coord, nearest_mode="floor")]
    return model(n, [vi("x", TP.FLOAT, [1, 1, 2, 2])], [vi("y", TP.FLOAT, None)], opset=13)


def resize_nearest():
    return resize()


def resize_linear():
    return resize("linear", "align_corners", sizes=(1, 1, 3, 2))


def resize_crop():
    return resize("linear", "tf_crop_and_resize")


def argmax():
    n = [H.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
         H.make_node("ArgMin", ["x"], ["b"], axis=-1, select_last_index=1)]
    return model(n, [vi("x", TP.FLOAT, [2, 3, 4])], [vi("a", TP.INT64, None), vi("b", TP.INT64, None)],
                 opset=13)



def conv_transpose(x=(1, 2, 3, 3), w=(2, 3, 3, 3), bias=True, **attrs):
    """ConvTranspose of x by the weights w (and a bias)."""
    ins = ["x", "w"] + (["b"] if bias else [])
    inits = [NH.from_array(rnd(*w), "w")] + ([NH.from_array(rnd(w[1] * attrs.get("group", 1)), "b")]
                                            if bias else [])
    n = [H.make_node("ConvTranspose", ins, ["y"], name="deconv", **attrs)]
    return model(n, [vi("x", TP.FLOAT, list(x))], [vi("y", TP.FLOAT, None)], inits, opset=17)


def conv_transpose_same():
    return conv_transpose(strides=[2, 2], auto_pad="SAME_UPPER")


def conv_transpose_output_shape():
    return conv_transpose(strides=[3, 2], output_shape=[10, 8], bias=False)


def conv_transpose_big_output_padding():
    return conv_transpose(strides=[2, 2], output_padding=[2, 0])


def conv_transpose_output_shape_too_big():
    return conv_transpose(strides=[2, 2], output_shape=[10, 7])



def einsum(eq="bhqd,bhkd->bhqk", shapes=((2, 3, 4, 5), (2, 3, 6, 5))):
    names = [f"x{i}" for i in range(len(shapes))]
    n = [H.make_node("Einsum", names, ["y"], name="ein", equation=eq)]
    return model(n, [vi(nm, TP.FLOAT, list(s)) for nm, s in zip(names, shapes)],
                 [vi("y", TP.FLOAT, None)], opset=13)


def einsum_attention():
    return einsum()


def einsum_diagonal():
    return einsum("...ii->...i", ((3, 5, 5),))


def einsum_bad_size():
    return einsum("ij,jk", ((2, 3), (4, 4)))


def einsum_bad_label():
    return einsum("ij,jk->iz", ((2, 3), (3, 4)))



def recurrent(op="LSTM", gates=4, hidden=2, wshape=None, **attrs):
    """An RNN / GRU / LSTM over x [3, 2, 4] (steps, batch, features)."""
    w = NH.from_array(rnd(*(wshape or (1, gates * hidden, 4))), "w")
    r = NH.from_array(rnd(1, gates * hidden, hidden), "r")
    n = [H.make_node(op, ["x", "w", "r"], ["y", "yh"], name="rec", hidden_size=hidden, **attrs)]
    return model(n, [vi("x", TP.FLOAT, [3, 2, 4])], [vi("y", TP.FLOAT, None), vi("yh", TP.FLOAT, None)],
                 [w, r], opset=14)


def rnn_relu():
    return recurrent("RNN", 1, activations=["Relu"])


def lstm_bad_activation():
    return recurrent(activations=["Sigmoid", "Gelu", "Tanh"])


def gru_bad_w():
    return recurrent("GRU", 3, wshape=(1, 5, 4))



def gathernd():
    """GatherND of data [3, 4] by index pairs given at run time."""
    n = [H.make_node("GatherND", ["x", "i"], ["y"], name="gnd")]
    return model(n, [vi("x", TP.FLOAT, [3, 4]), vi("i", TP.INT64, [2, 2])], [vi("y", TP.FLOAT, None)],
                 opset=13)


def scatternd_mul():
    n = [H.make_node("ScatterND", ["x", "i", "u"], ["y"], name="snd", reduction="mul")]
    return model(n, [vi("x", TP.FLOAT, [3, 4]), vi("i", TP.INT64, [2, 1]), vi("u", TP.FLOAT, [2, 4])],
                 [vi("y", TP.FLOAT, None)], opset=16)



def topk(dtype=TP.FLOAT):
    """TopK of x [4, 9, 3] along axis 1 (k 4), largest and smallest (after
    a Cast to dtype)."""
    k = NH.from_array(np.array([4], np.int64), "k")
    n = [H.make_node("Cast", ["x"], ["xc"], to=dtype),
         H.make_node("TopK", ["xc", "k"], ["v", "i"], name="top", axis=1),
         H.make_node("TopK", ["xc", "k"], ["sv", "si"], name="bottom", axis=-2, largest=0)]
    outs = [vi(o, TP.INT64 if o.endswith("i") else dtype, None) for o in ("v", "i", "sv", "si")]
    return model(n, [vi("x", TP.FLOAT, [4, 9, 3])], outs, [k], opset=13)


def topk_f16():
    return topk(TP.FLOAT16)


def topk_bf16():
    return topk(TP.BFLOAT16)



def legacy_add(shape_b=(3,), **attrs):
    """Add at opset 6 of a [2, 3, 4] and b."""
    n = [H.make_node("Add", ["a", "b"], ["y"], name="add", **attrs)]
    return model(n, [vi("a", TP.FLOAT, [2, 3, 4]), vi("b", TP.FLOAT, list(shape_b))], [vi("y", TP.FLOAT, None)],
                 opset=6)


def legacy_add_axis():
    return legacy_add(broadcast=1, axis=1)


def legacy_add_nobroadcast():
    return legacy_add()


def legacy_add_misfit():
    return legacy_add(broadcast=1, axis=2)



def dft_big():
    """A DFT whose cos / sin tables would be too large (4096 x 4096)."""
    n = [H.make_node("DFT", ["x"], ["y"], name="big", axis=1)]
    return model(n, [vi("x", TP.FLOAT, [1, 4096, 1])], [vi("y", TP.FLOAT, None)], opset=17)


def expand_minus_one():
    """torch's x.expand(3, -1, -1) as the TorchScript exporter writes it: the
    target shape [3, -1, -1] turned into [3, 1, 1] by Equal / Where on
    constants (ConstantOfShape of Shape, Mul), then Expand; and an And / Not /
    Less of constant masks selecting between two shapes."""
    c = lambda name, v: H.make_node("Constant", [], [name], value=NH.from_array(np.array(v, np.int64), name))
    n = [c("target", [3, -1, -1]), c("minus", -1),
         H.make_node("Shape", ["target"], ["tshape"]),
         H.make_node("ConstantOfShape", ["tshape"], ["ones"], value=NH.from_array(np.array([1], np.int64))),
         H.make_node("Mul", ["ones", "minus"], ["neg"]),
         H.make_node("Equal", ["target", "neg"], ["is_neg"]),
         H.make_node("Where", ["is_neg", "ones", "target"], ["shape"]),
         H.make_node("Expand", ["x", "shape"], ["y"], name="expand"),
         c("a", [2, 8]), c("b", [4, 4]),
         H.make_node("Less", ["a", "b"], ["lt"]),
         H.make_node("Not", ["lt"], ["ge"]),
         H.make_node("And", ["ge", "lt"], ["never"]),
         H.make_node("Or", ["never", "lt"], ["pick"]),
         H.make_node("Where", ["pick", "a", "b"], ["shape2"]),  # [2, 4]
         H.make_node("Reshape", ["z", "shape2"], ["w"], name="reshape")]
    return model(n, [vi("x", TP.FLOAT, [1, 2, 4]), vi("z", TP.FLOAT, [8])],
                 [vi("y", TP.FLOAT, None), vi("w", TP.FLOAT, None)], opset=17)


def _ints(name, v):
    return H.make_node("Constant", [], [name], value=NH.from_array(np.array(v, np.int64), name))


def sequences():
    """torch.export's torch.split: SplitToSequence (a scalar size: parts of
    3, 3 and 2) read by SequenceAt, and a weight's folded Shape expanded into
    a Reshape's shape."""
    n = [_ints("three", 3), _ints("last", -1), _ints("one", [1]), _ints("four", [4]),
         H.make_node("SplitToSequence", ["x", "three"], ["parts"], name="split", axis=1),
         H.make_node("SequenceAt", ["parts", "last"], ["y"], name="at"),
         H.make_node("Shape", ["x"], ["xs"], start=0, end=1),
         H.make_node("Expand", ["xs", "one"], ["xs1"], name="expand_shape"),
         H.make_node("Concat", ["xs1", "four"], ["shp"], axis=0),
         H.make_node("Reshape", ["z", "shp"], ["w"], name="reshape")]
    return model(n, [vi("x", TP.FLOAT, [2, 8]), vi("z", TP.FLOAT, [8])],
                 [vi("y", TP.FLOAT, None), vi("w", TP.FLOAT, None)], opset=18)


def sequence_bad_position():
    """SequenceAt at 3 of a sequence of 3 tensors; and SequenceAt of a tensor."""
    n = [_ints("three", 3), _ints("p", 3), _ints("z0", 0),
         H.make_node("SplitToSequence", ["x", "three"], ["parts"], name="split", axis=1),
         H.make_node("SequenceAt", ["parts", "p"], ["y"], name="at"),
         H.make_node("SequenceAt", ["x", "z0"], ["y2"], name="at_tensor")]
    return model(n, [vi("x", TP.FLOAT, [2, 9])],
                 [vi("y", TP.FLOAT, None), vi("y2", TP.FLOAT, None)], opset=18)


def random_ops():
    """RandomNormal / RandomUniform and their Like forms, Bernoulli (f32 and
    with an INT64 dtype), as the exporters write them."""
    n = [H.make_node("RandomNormalLike", ["x"], ["n"], name="noise", mean=0.5, scale=2.0),
         H.make_node("RandomUniform", [], ["u"], name="uni", low=-1.0, high=1.0, shape=[2, 3], seed=4.0),
         H.make_node("RandomNormal", [], ["h"], name="half", shape=[5], dtype=TP.FLOAT16),
         H.make_node("RandomUniformLike", ["x"], ["ub"], name="unib", dtype=TP.BFLOAT16),
         H.make_node("Sigmoid", ["x"], ["p"], name="sig"),
         H.make_node("Bernoulli", ["p"], ["b"], name="coin"),
         H.make_node("Bernoulli", ["p"], ["bi"], name="coin64", dtype=TP.INT64)]
    outs = [vi(o, TP.UNDEFINED, None) for o in ("n", "u", "h", "ub", "b", "bi")]
    return model(n, [vi("x", TP.FLOAT, [4, 6])], outs, opset=18)


def main():
    name, out = sys.argv[1], sys.argv[2]
    m = globals()[name]()
    folder = os.path.dirname(os.path.abspath(out))
    if name == "external_ok":
        rnd(4, 3).tofile(os.path.join(folder, "weights.bin"))
    if name == "external_short":
        np.zeros(5, np.float32).tofile(os.path.join(folder, "short.bin"))
    if name == "external_link":
        target = os.path.join(os.path.dirname(folder), "outside_target.bin")
        rnd(4, 3).tofile(target)
        link = os.path.join(folder, "link.bin")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


if __name__ == "__main__":
    main()
