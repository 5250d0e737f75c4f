"""Einsum through amp-run against numpy.einsum in float64 on fresh random
operands, over 16 equations (see einsum-numpy.test)."""
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper as H, TensorProto as TP
rng = np.random.default_rng(1)
cases = [("...ii->...i", [(3,5,5)]), ("bij,bjk->bik", [(5,2,3),(5,3,4)]), ("i,i", [(5,),(5,)]),
         ("ij->i", [(3,4)]), ("ij->ji", [(3,4)]), ("ij,jk", [(3,4),(4,2)]), ("bhqd,bhkd->bhqk", [(2,3,4,5),(2,3,6,5)]),
         ("i,j->ij", [(3,),(4,)]), ("...ij,...jk->...ik", [(2,1,3,4),(5,4,2)]), ("ii", [(4,4)]), ("ij,jk,kl->il", [(2,3),(3,4),(4,5)]),
         ("bij,bkj->bik", [(2,3,4),(2,5,4)]), ("iij->j",[(3,3,2)]), ("Ab,bA->A", [(3,4),(4,3)]), ("ijk", [(2,3,4)]), ("ij,ij->", [(3,4),(3,4)])]
fails = 0
for eq, shapes in cases:
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(xs))]
    g = H.make_graph([H.make_node("Einsum", names, ["y"], equation=eq)], "g",
                     [H.make_tensor_value_info(nm, TP.FLOAT, s) for nm, s in zip(names, shapes)],
                     [H.make_tensor_value_info("y", TP.FLOAT, None)])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 13)])
    onnx.save(m, f"{sys.argv[2]}/m.onnx")
    np.savez(f"{sys.argv[2]}/in.npz", **dict(zip(names, xs)))
    r = subprocess.run([sys.argv[1], f"{sys.argv[2]}/m.onnx", "--inputs", f"{sys.argv[2]}/in.npz", "--outputs",
                        f"{sys.argv[2]}/out.npz"], capture_output=True, text=True)
    want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
    if r.returncode:
        print("FAIL", eq, r.stderr.strip()[-300:]); fails += 1; continue
    got = np.load(f"{sys.argv[2]}/out.npz")["y"]
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-9) if got.shape == want.shape else None
    ok = err is not None and err < 1e-5
    fails += not ok
    print("ok  " if ok else "FAIL", eq, got.shape, want.shape, err)
print(f"{len(cases) - fails} of {len(cases)} equations as numpy")
sys.exit(1 if fails else 0)
