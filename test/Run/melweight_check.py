"""MelWeightMatrix folded by the importer against onnx.reference on several
parameter sets (see melweight.test)."""
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper as H, TensorProto as TP, numpy_helper as NH
from onnx.reference import ReferenceEvaluator
bad = 0
for M, L, sr, lo, hi in [(8, 16, 8192, 0, 4096), (20, 512, 16000, 20, 7600), (40, 400, 22050, 0, 11025), (13, 256, 8000, 300, 3400), (64, 1024, 44100, 30, 20000)]:
    inits = [NH.from_array(np.array(M, np.int32), "m"), NH.from_array(np.array(L, np.int32), "l"), NH.from_array(np.array(sr, np.int32), "s"),
             NH.from_array(np.array(lo, np.float32), "lo"), NH.from_array(np.array(hi, np.float32), "hi")]
    g = H.make_graph([H.make_node("MelWeightMatrix", ["m", "l", "s", "lo", "hi"], ["y"])], "g", [], [H.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17)]); m.ir_version = 8
    onnx.save(m, f"{sys.argv[2]}/mel.onnx")
    want = ReferenceEvaluator(m).run(None, {})[0]
    r = subprocess.run([sys.argv[1], f"{sys.argv[2]}/mel.onnx", "--outputs", f"{sys.argv[2]}/mel.npz"], capture_output=True, text=True)
    if r.returncode: print("FAIL", r.stderr[-300:]); bad += 1; continue
    got = np.load(f"{sys.argv[2]}/mel.npz")["y"]
    ok = got.shape == want.shape and np.allclose(got, want, atol=1e-6)
    bad += not ok
    print("ok" if ok else "FAIL", M, L, sr, lo, hi, got.shape, want.shape, np.abs(got - want).max() if got.shape == want.shape else None)
print(f"{5 - bad} of 5 as onnx.reference")
sys.exit(1 if bad else 0)
