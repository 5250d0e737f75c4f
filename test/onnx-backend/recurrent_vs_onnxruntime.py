"""RNN, GRU and LSTM as amp-run computes them against onnxruntime's CPU
kernels: both directions, sequence_lens (empty, partial and full
sequences), initial states, peepholes, input_forget, clip, every
parameterised activation, linear_before_reset. layout = 1 (batch first),
which onnxruntime refuses, is checked against its run of the same model in
layout 0 with the inputs and outputs transposed. Fresh random inputs each
run (AMP_TEST_SEED repeats one).

usage: recurrent_vs_onnxruntime.py AMP_RUN   (run by a Python with
onnxruntime: .venv-ort's)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP, helper as H, numpy_helper as NH

SEED = int(os.environ.get("AMP_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
rng = np.random.default_rng(SEED)
T, B, I, HD = 5, 3, 4, 3
passed = failed = 0


def model(op, gates, attrs, seq, h0, c0, peep, layout, outs, feeds, inits):
    d = 2 if attrs.get("direction") == "bidirectional" else 1
    ins = ["X", "W", "R", "B", "", "", "", ""]
    vis = [H.make_tensor_value_info("X", TP.FLOAT, feeds["X"].shape)]
    if seq is not None:
        ins[4] = "L"
        vis.append(H.make_tensor_value_info("L", TP.INT32, [B]))
    for k, name in ((5, "h0"), (6, "c0")):
        if name in feeds:
            ins[k] = name
            vis.append(H.make_tensor_value_info(name, TP.FLOAT, feeds[name].shape))
    if peep:
        ins[7] = "P"
    while ins[-1] == "":
        ins.pop()
    node = H.make_node(op, ins, list(outs), hidden_size=HD, layout=layout, **attrs)
    g = H.make_graph([node], "g", vis, [H.make_tensor_value_info(o, TP.FLOAT, None) for o in outs],
                     [NH.from_array(a, n) for n, a in inits.items()])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def case(op, gates, attrs, seq=None, h0=False, c0=False, peep=False, layout=0):
    global passed, failed
    outs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    d = 2 if attrs.get("direction") == "bidirectional" else 1
    # R small enough that the recurrence contracts: with a gain above 1 per
    # step, fp16's rounding grows geometrically along the sequence (seed
    # 2328356719: ScaledTanh 1.5 tanh(0.7 x), 2.9e-2 after 5 steps).
    # A draw whose reference Y is mostly 0 (ThresholdedRelu with most
    # pre-activations under alpha: seed 2549609799) checks nothing: draw again.
    for _ in range(20):
        inits = {"W": (rng.standard_normal((d, gates * HD, I)) * 0.6).astype(np.float32),
                 "R": (rng.standard_normal((d, gates * HD, HD)) * 0.35).astype(np.float32),
                 "B": (rng.standard_normal((d, 2 * gates * HD)) * 0.3).astype(np.float32)}
        if peep:
            inits["P"] = (rng.standard_normal((d, 3 * HD)) * 0.5).astype(np.float32)
        feeds = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
        if seq is not None:
            feeds["L"] = np.array(seq, np.int32)
        if h0:
            feeds["h0"] = rng.standard_normal((d, B, HD)).astype(np.float32)
        if c0:
            feeds["c0"] = rng.standard_normal((d, B, HD)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            ref = model(op, gates, attrs, seq, h0, c0, peep, 0, outs, feeds, inits)
            onnx.save(ref, f"{tmp}/ref.onnx")
            want = dict(zip(outs, ort.InferenceSession(f"{tmp}/ref.onnx").run(None, feeds)))
        if np.count_nonzero(want["Y"]) > want["Y"].size // 8:
            break
    with tempfile.TemporaryDirectory() as tmp:
        ours = dict(feeds)
        if layout:  # batch first: X [B, T, I], states [B, D, H], Y [B, T, D, H]
            ours["X"] = feeds["X"].transpose(1, 0, 2).copy()
            for s in ("h0", "c0"):
                if s in ours:
                    ours[s] = feeds[s].transpose(1, 0, 2).copy()
            want["Y"] = want["Y"].transpose(2, 0, 1, 3)
            for s in outs[1:]:
                want[s] = want[s].transpose(1, 0, 2)
        m = model(op, gates, attrs, seq, h0, c0, peep, layout, outs, ours, inits)
        onnx.save(m, f"{tmp}/m.onnx")
        np.savez(f"{tmp}/in.npz", **ours)
        label = f"{op} {attrs} lens={seq} layout={layout}"
        for prec, tol in (("fp32", 1e-5), ("fp16", 1e-2)):
            r = subprocess.run([sys.argv[1], f"{tmp}/m.onnx", "--inputs", f"{tmp}/in.npz",
                                "--outputs", f"{tmp}/out.npz", "--precision", prec],
                               capture_output=True, text=True)
            if r.returncode:
                failed += 1
                print(f"FAIL {label} {prec}: amp-run: {r.stderr.strip()[-300:]}")
                continue
            got = np.load(f"{tmp}/out.npz")
            err = max(float(np.abs(got[o].astype(np.float64) - want[o]).max())
                      / max(1.0, float(np.abs(want[o]).max())) for o in outs)
            # (Y must hold something: a case whose output is all 0 checks nothing.)
            ok = (all(got[o].shape == want[o].shape and np.isfinite(got[o]).all() for o in outs)
                  and err <= tol and np.count_nonzero(want["Y"]) > want["Y"].size // 8)
            passed += ok
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {label} {prec}: worst error {err:.2e} (tolerance {tol})")


case("LSTM", 4, dict(direction="bidirectional"), seq=[5, 2, 0], h0=True, c0=True, peep=True)
case("LSTM", 4, dict(direction="reverse", input_forget=1, clip=0.7), seq=[3, 5, 1])
case("LSTM", 4, dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.2],
                     activation_beta=[0.4]), h0=True, layout=1)
case("GRU", 3, dict(direction="bidirectional", linear_before_reset=1), seq=[4, 0, 2], h0=True)
case("GRU", 3, dict(direction="reverse", activations=["Sigmoid", "Elu"], activation_alpha=[0.5]), layout=1)
case("GRU", 3, dict(activations=["Sigmoid", "Affine"], activation_alpha=[0.5], activation_beta=[0.1],
                    clip=1.0), seq=[1, 2, 3])
case("RNN", 1, dict(direction="bidirectional", activations=["Tanh", "Relu"]), seq=[5, 3, 4], h0=True,
     layout=1)
case("RNN", 1, dict(activations=["ScaledTanh"], activation_alpha=[1.5], activation_beta=[0.7]))
case("RNN", 1, dict(activations=["ThresholdedRelu"], activation_alpha=[0.1]), seq=[2, 5, 5])
print(f"{passed} passed, {failed} failed" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
sys.exit(1 if failed or not passed else 0)
