"""Hostile and broken ONNX files: each must end with exit code 1 (never a
signal), a message naming the problem, and no output file.

    python hostile.py /path/to/amp-translate WORKDIR
"""

import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import gen  # noqa: E402

tool, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

good = gen.mlp().SerializeToString()
rng = random.Random()  # fresh bytes each run


def write(name, data):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def from_gen(name, sub=None):
    folder = os.path.join(work, sub) if sub else work
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".onnx")
    old = sys.argv
    sys.argv = ["gen.py", name, path]
    try:
        gen.main()
    finally:
        sys.argv = old
    return path


cases = [
    ("empty file", write("empty.onnx", b""), ["the file is empty"]),
    ("truncated file", write("truncated.onnx", good[: len(good) // 2]),
     ["protobuf is malformed or truncated"]),
    ("random bytes", write("random.onnx", bytes(rng.getrandbits(8) for _ in range(4096))),
     ["not"]),
    ("text file", write("text.onnx", b"this is not a model\n" * 10), ["not"]),
    ("missing file", os.path.join(work, "does-not-exist.onnx"), ["cannot read the file"]),
    ("unknown ops, all listed", from_gen("unknown_ops"),
     ["node 'first_unknown' (FooBar, domain ai.onnx, opset 17): unsupported op ai.onnx.FooBar",
      "node 'second_unknown' (Bogus, domain com.example, opset 1): unsupported op com.example.Bogus"]),
    ("path traversal", from_gen("external_traversal", "m1"),
     ["tensor 'w': external data location '../outside.bin' contains '..'"]),
    ("absolute path", from_gen("external_absolute", "m2"),
     ["external data location '/etc/passwd' is an absolute path"]),
    ("link out of the folder", from_gen("external_link", "m3"),
     ["external data file 'link.bin' resolves to", "outside the model's folder"]),
    ("missing external file", from_gen("external_missing", "m4"),
     ["tensor 'w': external data file", "missing.bin' cannot be opened"]),
    ("short external file", from_gen("external_short", "m5"),
     ["tensor 'w': external data holds 20 bytes, the tensor's shape and type need 48"]),
    ("value_info contradiction", from_gen("shape_contradiction"),
     ["node 'gemm' (Gemm, domain ai.onnx, opset 17): output 'h' is declared (value_info)",
      "tensor<2x3xf32>"]),
    ("op rule violated", from_gen("rule_violation"),
     ["node 'bad_matmul' (MatMul, domain ai.onnx, opset 17): 'amp.matmul' op contracted dims differ"]),
    ("duplicate output names", from_gen("duplicate_names"),
     ["the name 'y' is defined twice: by node 'relu1' (Relu) and by node 'sigmoid_same_output' (Sigmoid)"]),
    ("duplicate initializers", from_gen("duplicate_initializers"),
     ["the name 'w' is defined twice: by two initializers"]),
    ("cycle", from_gen("cycle"), ["the graph has a cycle through node(s) 'node_a', 'node_b'"]),
    ("dangling input", from_gen("dangling"),
     ["node 'add_dangling' (Add) reads 'nowhere', which no node, input or initializer defines"]),
    ("raw_data size", from_gen("bad_raw_data"),
     ["tensor 'w' has 20 bytes of raw_data but its shape and type need 48"]),
    ("attribute of the wrong type", from_gen("bad_attribute"),
     ["node 'softmax_float_axis' (Softmax, domain ai.onnx, opset 13): attribute 'axis' must be INT, got FLOAT"]),
    ("auto_pad not one of ONNX's", from_gen("bad_auto_pad"),
     ["node 'conv_same' (Conv, domain ai.onnx, opset 17): auto_pad 'SAME' is not one of NOTSET, "
      "SAME_UPPER, SAME_LOWER, VALID"]),
    ("unknown loss reduction", from_gen("bad_reduction"),
     ["node 'sce_avg' (SoftmaxCrossEntropyLoss, domain ai.onnx, opset 17): reduction 'avg' is not "
      "one of none, sum, mean"]),
    ("unknown Gelu approximation", from_gen("bad_gelu_approximation"),
     ["node 'gelu_fast' (Gelu, domain ai.onnx, opset 20): approximate 'fast' is not one of none, "
      "tanh"]),
    ("unknown attribute", from_gen("unknown_attribute"),
     ["node 'relu_extra' (Relu, domain ai.onnx, opset 13): attribute 'frobnicate' is not supported"]),
    ("axes as an input before its opset", from_gen("axes_input_too_early"),
     ["node 'mean17' (ReduceMean, domain ai.onnx, opset 17): has a second input, but 'axes' is an input only "
      "since opset 18 (this model imports opset 17): use the 'axes' attribute"]),
    ("an input the op does not take", from_gen("extra_input"),
     ["node 'gemm4' (Gemm, domain ai.onnx, opset 17): input 3 ('b') is not one this op takes at opset 17 "
      "(the node has 4 inputs)"]),
    ("an output the op does not produce", from_gen("extra_output"),
     ["node 'relu2out' (Relu, domain ai.onnx, opset 17): output 1 ('z') is not one this op produces at "
      "opset 17 (the node has 2 outputs)"]),
    ("unsupported element type", from_gen("double_input"),
     ["graph input 'x' has element type DOUBLE"]),
    ("negative dimension", from_gen("negative_dim"), ["tensor 'w' has a negative dimension -4"]),
    ("no default-domain opset for a default-domain node", write(
        "nodomain.onnx", gen.model([gen.H.make_node("Relu", ["x"], ["y"], name="r")],
                                   [gen.vi("x", gen.TP.FLOAT, [2])], [gen.vi("y", gen.TP.FLOAT, [2])],
                                   domains=[gen.H.make_opsetid("com.example", 1)]).SerializeToString()),
     ["node 'r' (Relu, domain ai.onnx): the model imports no opset for domain ai.onnx"]),
]


def max_unpool(name, **attrs):
    node = gen.H.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2],
                           **attrs)
    return write(name, gen.model([node], [gen.vi("x", gen.TP.FLOAT, [1, 1, 2, 2]),
                                          gen.vi("i", gen.TP.INT64, [1, 1, 2, 2])],
                                 [gen.vi("y", gen.TP.FLOAT, [1, 1, 4, 4])]).SerializeToString())


# MaxUnpool's strides / pads of the wrong length (read out of bounds before:
# found by fuzz-onnx-import under ASan), and pads larger than the window.
cases += [
    ("MaxUnpool strides of one entry", max_unpool("unpool_strides.onnx", strides=[2]),
     ["node 'unpool' (MaxUnpool, domain ai.onnx, opset 17): strides must have one entry per "
      "spatial dim, got 1"]),
    ("MaxUnpool pads of two entries", max_unpool("unpool_pads.onnx", pads=[0, 0]),
     ["node 'unpool' (MaxUnpool, domain ai.onnx, opset 17): pads must have two entries per "
      "spatial dim, got 2"]),
    ("MaxUnpool pads past the window", max_unpool("unpool_big_pads.onnx", pads=[3, 3, 3, 3]),
     ["node 'unpool' (MaxUnpool, domain ai.onnx, opset 17): the output's dim 2 would be -3"]),
]

# Random corruptions of a good file: flipped bytes must never crash the
# importer (a corrupted file may still be a valid model, so only the exit
# status is checked).
fuzz = []
for i in range(40):
    data = bytearray(good)
    for _ in range(rng.randint(1, 20)):
        data[rng.randrange(len(data))] = rng.getrandbits(8)
    fuzz.append(write(f"fuzz{i}.onnx", bytes(data)))

passed = failed = 0


def run(path):
    out = path + ".mlir"
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([tool, "--import-onnx", path, "-o", out], capture_output=True, text=True,
                       errors="replace", timeout=60)
    return p, out


for name, path, expect in cases:
    p, out = run(path)
    problems = []
    if p.returncode != 1:
        problems.append(f"exit code {p.returncode}, expected 1")
    for e in expect:
        if e not in p.stderr:
            problems.append(f"message lacks {e!r}")
    if "Stack dump" in p.stderr or "PLEASE submit" in p.stderr:
        problems.append("crash report in stderr")
    if os.path.exists(out):
        problems.append("an output file was written")
    if problems:
        failed += 1
        print(f"FAIL {name}: " + "; ".join(problems) + "\n  stderr: " + p.stderr.strip()[:800])
    else:
        passed += 1
        print(f"ok   {name}: {p.stderr.strip().splitlines()[0][:200]}")

for path in fuzz:
    p, out = run(path)
    if any(ord(c) < 0x20 and c not in "\n\t" for c in p.stderr):
        failed += 1
        print(f"FAIL fuzz {path}: control characters reach the terminal")
    elif p.returncode not in (0, 1) or "Stack dump" in p.stderr:
        failed += 1
        print(f"FAIL fuzz {path}: exit {p.returncode}\n{p.stderr[:800]}")
    elif p.returncode == 1 and os.path.exists(out):
        failed += 1
        print(f"FAIL fuzz {path}: failed but wrote output")
    else:
        passed += 1

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
