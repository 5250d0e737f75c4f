"""Runs the topk models (test/Import/Inputs/gen.py topk, topk_f16,
topk_bf16: TopK after a Cast) through amp-run and checks them against numpy
(see topk.test)."""
import subprocess
import sys

import numpy as np
import torch

tmp, run, device = sys.argv[1:4]
rng = np.random.default_rng()
x = rng.standard_normal((4, 9, 3)).astype(np.float32)
x[0, :, 0] = np.round(x[0, :, 0])          # ties
x[1, 2, 1] = x[1, 7, 1] = np.nan           # NaNs
x[2, :, 2] = 1.5                           # all equal
x[3, 4, 0] = np.inf
np.savez(f"{tmp}/in.npz", x=x)
bad = 0
for prec, tdt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
    subprocess.run([run, f"{tmp}/{prec}.onnx", "--inputs", f"{tmp}/in.npz", "--outputs", f"{tmp}/out.npz",
                    "--device", device, "--nan-check", "off"], check=True)
    out = np.load(f"{tmp}/out.npz")
    xr = torch.tensor(x).to(tdt).float().numpy()  # the input as the run sees it
    for largest, v, i in ((True, "v", "i"), (False, "sv", "si")):
        # NaN larger than any number; a stable sort keeps equal values in index order.
        key = np.where(np.isnan(xr), np.inf, xr)
        nan_first = np.isnan(xr)
        if largest:
            order = np.lexsort((np.arange(9)[None, :, None].repeat(4, 0).repeat(3, 2), -key, ~nan_first), axis=1)
        else:
            order = np.lexsort((np.arange(9)[None, :, None].repeat(4, 0).repeat(3, 2), key, nan_first), axis=1)
        want_i = order[:, :4, :]
        want_v = np.take_along_axis(xr, want_i, 1)
        got_i, got_v = out[i], out[v].astype(np.float32)
        ok = (got_i == want_i).all() and np.array_equal(got_v, want_v, equal_nan=True)
        print(f"{'ok  ' if ok else 'FAIL'} {device} {prec} largest={largest}")
        if not ok:
            print("got", got_i[:, :, :].tolist(), "\nwant", want_i.tolist())
        bad += not ok
sys.exit(1 if bad else 0)
