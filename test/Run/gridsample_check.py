"""GridSample's value and gradients (x and grid) through amp-translate,
amp-autodiff and amp-run against torch.nn.functional.grid_sample's autograd
in float64: every mode (bilinear, nearest, bicubic) x padding (zeros,
border, reflection) x align_corners, grid points partly outside [-1, 1], on
the given device (see gridsample.test). fp32 to 1e-5 of each tensor's
largest element."""
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto as TP, helper as H, numpy_helper as NH

tmp, translate, opt, run, device = sys.argv[1:6]
rng = np.random.default_rng()
bad = total = 0
for mode in ("bilinear", "nearest", "bicubic"):
    for pad in ("zeros", "border", "reflection"):
        for align in (0, 1):
            x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
            grid = rng.uniform(-1.3, 1.3, (2, 3, 6, 2)).astype(np.float32)
            wt = rng.standard_normal((2, 3, 3, 6)).astype(np.float32)
            g = H.make_graph([H.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=pad,
                                          align_corners=align),
                              H.make_node("Mul", ["y", "wt"], ["yw"]),
                              H.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)],
                             "g", [], [H.make_tensor_value_info("loss", TP.FLOAT, None)],
                             [NH.from_array(x, "x"), NH.from_array(grid, "grid"), NH.from_array(wt, "wt")])
            onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 16)]), f"{tmp}/m.onnx")
            subprocess.run([translate, "--import-onnx", f"{tmp}/m.onnx", "--freeze=wt", "-o", f"{tmp}/m.mlir"],
                           check=True)
            subprocess.run([opt, f"{tmp}/m.mlir", "--pass-pipeline=builtin.module(amp-autodiff)",
                            "--mlir-print-debuginfo", "-o", f"{tmp}/g.mlir"], check=True)
            subprocess.run([run, f"{tmp}/g.mlir", "--outputs", f"{tmp}/o.npz", "--device", device], check=True)
            out = np.load(f"{tmp}/o.npz")
            tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            tg = torch.tensor(grid, dtype=torch.float64, requires_grad=True)
            terms = (F.grid_sample(tx, tg, mode=mode, padding_mode=pad, align_corners=bool(align))
                     * torch.tensor(wt, dtype=torch.float64))
            loss = terms.sum()
            loss.backward()
            errs = []
            for name, ref in (("loss", loss.detach().numpy()), ("grad:x", tx.grad.numpy()),
                              ("grad:grid", tg.grad.numpy())):
                got = out[name].astype(np.float64)
                # (the loss: against the sum of its terms' magnitudes, as they cancel)
                scale = max(float(terms.detach().abs().sum()) if name == "loss" else np.abs(ref).max(), 1e-3)
                errs.append(np.abs(got - ref).max() / scale if got.shape == ref.shape else np.inf)
            ok = all(np.isfinite(e) and e <= 1e-5 for e in errs)
            total += 1
            bad += not ok
            if not ok:
                print(f"FAIL {device} {mode} {pad} align={align}: loss / dx / dgrid errors {errs}")
print(f"{total - bad} of {total} configurations as torch ({device})")
sys.exit(1 if bad else 0)
