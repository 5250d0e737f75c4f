"""AveragePool and MaxPool as amp-run computes them against onnxruntime's
CPU kernels: 1-D, 2-D and 3-D windows, strides, dilations, symmetric and
asymmetric pads with count_include_pad on and off (the divisor counts the
end padding a window covers, not the begin padding's width), ceil mode,
and MaxPool's indices in both storage orders. Fresh random inputs each run
(AMP_TEST_SEED repeats one).

Where the two definitions part, the case is left out, not loosened: in ceil
mode onnxruntime's kernel adds a last window that starts in the end padding
(its own shape inference says otherwise, and PyTorch drops it), and counts
the positions of a ceil-mode window past the padded input in the divisor
(PyTorch does not; neither do we).

usage: pooling_vs_onnxruntime.py AMP_RUN [--device cuda]   (run by a Python
with onnxruntime: .venv-ort's; --device cuda with AMPRT_CUDA_EMULATE=1 where
there is no GPU)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP, helper as H

SEED = int(os.environ.get("AMP_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
rng = np.random.default_rng(SEED)
AMP_RUN = sys.argv[1]
DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
passed = failed = 0


def case(op, shape, **attrs):
    global passed, failed
    outs = ["Y", "I"] if op == "MaxPool" else ["Y"]
    node = H.make_node(op, ["X"], outs, **attrs)
    g = H.make_graph([node], "g", [H.make_tensor_value_info("X", TP.FLOAT, shape)],
                     [H.make_tensor_value_info("Y", TP.FLOAT, None)]
                     + ([H.make_tensor_value_info("I", TP.INT64, None)] if op == "MaxPool" else []))
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 19)])
    m.ir_version = 9
    x = rng.standard_normal(shape).astype(np.float32)
    label = f"{op} {list(shape)} {attrs}"
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(m, f"{tmp}/m.onnx")
        want = dict(zip(outs, ort.InferenceSession(f"{tmp}/m.onnx").run(None, {"X": x})))
        np.savez(f"{tmp}/in.npz", X=x)
        r = subprocess.run([AMP_RUN, f"{tmp}/m.onnx", "--inputs", f"{tmp}/in.npz", "--outputs",
                            f"{tmp}/out.npz", "--device", DEVICE], capture_output=True, text=True)
        if r.returncode:
            failed += 1
            print(f"FAIL {label}: amp-run: {r.stderr.strip()[-300:]}")
            return
        got = np.load(f"{tmp}/out.npz")
        ok = all(got[o].shape == want[o].shape for o in outs)
        err = float("inf")
        if ok:
            y, w = got["Y"].astype(np.float64), want["Y"].astype(np.float64)
            err = float(np.abs(y - w).max() / max(1.0, np.abs(w).max())) if w.size else 0.0
            ok = np.isfinite(y).all() and err <= 1e-6 and np.count_nonzero(w) > w.size // 2
            if op == "MaxPool":
                ok = ok and np.array_equal(got["I"], want["I"])
        passed += ok
        failed += not ok
        shapes = " ".join(f"{o} {got[o].shape} vs {want[o].shape}" for o in outs)
        print(f"{'ok  ' if ok else 'FAIL'} {label}: worst error {err:.2e} ({shapes})")


for include in (0, 1):
    # densenet's transition: 2 x 2, stride 2, no padding.
    case("AveragePool", (2, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2], count_include_pad=include)
    # resnet's stem window: overlapping, padded.
    case("AveragePool", (2, 3, 9, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
         count_include_pad=include)
    # Asymmetric pads (begin h, w, end h, w): the end padding counts, not the begin's.
    case("AveragePool", (2, 3, 7, 6), kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0],
         count_include_pad=include)
    case("AveragePool", (1, 2, 5, 7), kernel_shape=[3, 2], strides=[2, 1], pads=[2, 0, 0, 1],
         count_include_pad=include)
    # Dilated (the general window loop), 1-D and 3-D.
    case("AveragePool", (2, 2, 9, 9), kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 2],
         pads=[1, 0, 1, 2], count_include_pad=include)
    case("AveragePool", (2, 3, 11), kernel_shape=[4], strides=[3], pads=[0, 2],
         count_include_pad=include)
    case("AveragePool", (1, 2, 5, 6, 4), kernel_shape=[2, 3, 2], strides=[2, 2, 1],
         pads=[1, 0, 0, 0, 1, 1], count_include_pad=include)
# Ceil mode (the last window hangs past the input; count_include_pad off:
# see above).
case("AveragePool", (2, 3, 7, 9), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
case("AveragePool", (2, 3, 8, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
for order in (0, 1):
    case("MaxPool", (2, 3, 9, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
         storage_order=order)
    case("MaxPool", (2, 3, 7, 6), kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0],
         storage_order=order)
    case("MaxPool", (2, 2, 9, 9), kernel_shape=[2, 2], strides=[2, 1], dilations=[2, 2],
         pads=[1, 0, 1, 1], storage_order=order)
    case("MaxPool", (2, 3, 7, 9), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
         storage_order=order)
case("MaxPool", (2, 3, 11), kernel_shape=[3], strides=[2], pads=[1, 0])
case("MaxPool", (1, 2, 5, 6, 4), kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 0, 0, 0, 1, 1])
print(f"{passed} passed, {failed} failed ({DEVICE})" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
sys.exit(1 if failed or not passed else 0)
