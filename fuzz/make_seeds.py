"""Seed corpora for the fuzzers in fuzz/ (scripts/fuzz.sh runs this once
per build folder):

  python make_seeds.py OUT_DIR [ORT_PYTHON]

OUT_DIR/<fuzzer>/ gets small valid inputs, so that libFuzzer starts from
files that reach deep into each reader instead of from nothing:
  (each also gets the reproducers in test/fuzz-findings)
  onnx-import    the ONNX backend test models (Debian's libonnx-testdata),
                 models built here for the ops with size arithmetic (Resize,
                 Range, Reshape, Tile, OneHot, MelWeightMatrix, integer
                 folds), one with a training graph, and the test suite's
                 models when a build folder holds them
  mlir-parse     the lit tests' .mlir files
  npz            np.save / np.savez / np.savez_compressed of every dtype
  safetensors    the safetensors package's files, with metadata
  ort-checkpoint onnxruntime-training's checkpoints (generate_artifacts),
                 when ORT_PYTHON (the .venv-ort python) is given
"""
import glob
import io
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
ORT_PY = sys.argv[2] if len(sys.argv) > 2 else None
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rng = np.random.default_rng(0)


def out(fuzzer, name, data):
    d = os.path.join(OUT, fuzzer)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def copy_small(fuzzer, paths, limit, prefix):
    for i, p in enumerate(sorted(paths)):
        if os.path.isfile(p) and os.path.getsize(p) <= limit:
            with open(p, "rb") as f:
                out(fuzzer, f"{prefix}-{i:04d}", f.read())


# --- ONNX ------------------------------------------------------------------
FINDINGS = os.path.join(ROOT, "test", "fuzz-findings")
copy_small("onnx-import", glob.glob(os.path.join(FINDINGS, "*.onnx")), 64 << 10, "finding")
copy_small("npz", glob.glob(os.path.join(FINDINGS, "*.npz")), 64 << 10, "finding")
copy_small("ort-checkpoint", glob.glob(os.path.join(FINDINGS, "*.ckpt")), 64 << 10, "finding")
copy_small("onnx-import", glob.glob("/usr/share/libonnx-testdata/data/node/*/model.onnx"),
           64 << 10, "backend")
copy_small("onnx-import", glob.glob(os.path.join(ROOT, "build", "test", "**", "*.onnx"),
                                    recursive=True), 256 << 10, "suite")


def model(nodes, inputs, outputs, inits=(), opset=17, name="m"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


F = TensorProto.FLOAT
out("onnx-import", "resize", model(
    [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")],
    [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)],
    [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")]))
out("onnx-import", "range-fold", model(
    [helper.make_node("Range", ["a", "b", "c"], ["r"]),
     helper.make_node("Mul", ["r", "k"], ["m"]),
     helper.make_node("Div", ["m", "k"], ["d"]),
     helper.make_node("Mod", ["d", "k"], ["o"]),
     helper.make_node("Reshape", ["x", "shape"], ["y"]),
     helper.make_node("Tile", ["y", "reps"], ["z"])],
    [vi("x", F, [2, 3])], [vi("z", F, None), vi("o", TensorProto.INT64, None)],
    [i64("a", 0), i64("b", 6), i64("c", 1), i64("k", [3] * 6),
     i64("shape", [3, 2]), i64("reps", [2, 2])]))
out("onnx-import", "onehot", model(
    [helper.make_node("OneHot", ["i", "depth", "v"], ["y"])],
    [vi("i", TensorProto.INT64, [4])], [vi("y", F, None)],
    [numpy_helper.from_array(np.array(5.0, np.float32), "depth"),
     numpy_helper.from_array(np.array([0, 1], np.float32), "v")]))
out("onnx-import", "melweights", model(
    [helper.make_node("MelWeightMatrix", ["m", "l", "r", "lo", "hi"], ["y"])],
    [], [vi("y", F, None)],
    [i64("m", 8), i64("l", 64), i64("r", 8000),
     numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
     numpy_helper.from_array(np.array(4000.0, np.float32), "hi")]))
w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
out("onnx-import", "mlp", model(
    [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
     helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
    [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], [w]))

# --- .mlir -------------------------------------------------------------------
copy_small("mlir-parse", glob.glob(os.path.join(ROOT, "test", "**", "*.mlir"), recursive=True),
           64 << 10, "lit")

# --- .npz / .npy ---------------------------------------------------------------
arrays = {
    "f32": rng.standard_normal((3, 4)).astype(np.float32),
    "f16": rng.standard_normal((5,)).astype(np.float16),
    "b": rng.random((2, 2)) > 0.5,
    "i64": rng.integers(-9, 9, (2, 3)).astype(np.int64),
    "u8": rng.integers(0, 255, (4,)).astype(np.uint8),
    "scalar": np.array(1.5, np.float32),
    "empty": np.zeros((0, 3), np.float32),
}
for k, (name, a) in enumerate(arrays.items()):
    b = io.BytesIO()
    np.save(b, a)
    out("npz", f"npy-{name}", b.getvalue())
for compressed in (False, True):
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    out("npz", f"npz-{'deflate' if compressed else 'stored'}", b.getvalue())
b = io.BytesIO()
np.savez(b)
out("npz", "npz-none", b.getvalue())
copy_small("npz", glob.glob(os.path.join(ROOT, "build", "test", "**", "*.npz"), recursive=True),
           64 << 10, "suite")

# --- safetensors -------------------------------------------------------------------
from safetensors.numpy import save as st_save  # noqa: E402

st = {k: v for k, v in arrays.items() if v.dtype != np.bool_}
out("safetensors", "all", st_save(st, metadata={"amp.signature": "param w f32 3x4", "step": "7"}))
out("safetensors", "one", st_save({"w": arrays["f32"]}))
out("safetensors", "none", st_save({}))
copy_small("safetensors", glob.glob(os.path.join(ROOT, "build", "test", "**", "*.weights"),
                                    recursive=True), 64 << 10, "suite")

# --- ORT checkpoints -----------------------------------------------------------------
if ORT_PY:
    side = os.path.join(ROOT, "test", "ort-training", "ort_side.py")
    for name in ("mlp", "mlp_frozen", "cnn", "block"):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([ORT_PY, side, "gen", name, d, "1"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"make_seeds: onnxruntime-training's generate_artifacts failed:\n"
                         f"{r.stderr[-2000:]}")
            with open(os.path.join(d, "checkpoint"), "rb") as f:
                out("ort-checkpoint", name, f.read())
for f in sorted(os.listdir(OUT)):
    if os.path.isdir(os.path.join(OUT, f)):
        print(f"make_seeds: {f}: {len(os.listdir(os.path.join(OUT, f)))} inputs")
