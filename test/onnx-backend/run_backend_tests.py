"""Runs every importable ONNX backend test (node, simple, pytorch-converted,
pytorch-operator) through amp-run and compares with the expected outputs.

    python run_backend_tests.py AMP_TRANSLATE AMP_RUN [--precision fp32|fp16|bf16]
                                [--data DIR] [--filter SUBSTRING]

fp32 uses ONNX's own tolerances (rtol 1e-3, atol 1e-7). fp16 / bf16 runs
autocast and compares with tolerances from the format: rtol = 4 * eps of the
format, and atol = eps * sqrt(reduction length) * max|expected|, where the
reduction length is the largest contracted / reduced dimension of the test
(a rounding error per term of a sum grows like its square root). Every
failure must be listed in xfail.py with its reason; an unexpected failure or
an unexpected pass of a listed test fails the run.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import import_backend_tests as imp  # noqa: E402
import xfail  # noqa: E402

EPS = {"fp32": None, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}


def reduction_length(model):
    """Largest dim a node of this test contracts or reduces over (1 if none)."""
    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.input) + list(g.output) + list(g.value_info)}
    n = 1
    for node in g.node:
        ins = [shapes.get(i, []) for i in node.input]
        if node.op_type in ("MatMul", "Gemm") and ins and ins[0]:
            n = max(n, max(ins[0][-1:] + ins[0][:1]))
        elif node.op_type == "Conv" and len(ins) > 1 and ins[1]:
            n = max(n, int(np.prod(ins[1][1:])))
        elif node.op_type.startswith("Reduce") or node.op_type in (
                "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
                "GlobalAveragePool", "AveragePool", "SoftmaxCrossEntropyLoss",
                "NegativeLogLikelihoodLoss"):
            if ins and ins[0]:
                n = max(n, int(np.prod(ins[0])))
    return n


def compare(got, want, precision, red):
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "iub":
        return None if np.array_equal(got, want) else "integer / bool values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan_ok = np.array_equal(np.isnan(g), np.isnan(w))
    if not nan_ok:
        return "NaN positions differ"
    if precision == "fp32":
        rtol, atol = 1e-3, 1e-7
    else:
        eps = EPS[precision]
        scale = np.max(np.abs(w[np.isfinite(w)])) if np.isfinite(w).any() else 1.0
        rtol, atol = 4 * eps, eps * np.sqrt(red) * max(scale, 1e-30)
    fin = np.isfinite(w)
    if not np.array_equal(np.isinf(g), np.isinf(w)) or not np.array_equal(g[np.isinf(w)], w[np.isinf(w)]):
        return "infinities differ"
    err = np.abs(g[fin] - w[fin]) - (atol + rtol * np.abs(w[fin]))
    if err.size and err.max() > 0:
        i = int(np.argmax(err))
        return (f"max excess {err.max():.3g} (got {g[fin][i]:.6g}, expected {w[fin][i]:.6g}, "
                f"rtol {rtol:.3g}, atol {atol:.3g})")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("translate")
    ap.add_argument("run")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--data", default=imp.DEFAULT_DATA)
    ap.add_argument("--filter", default="")
    ap.add_argument("--device", default="cpu",
                    help="amp-run --device (cuda with AMPRT_CUDA_EMULATE=1 in the environment "
                         "runs the CUDA executor on the host)")
    args = ap.parse_args()
    expected_fail = xfail.XFAIL[args.precision]
    counts = {"pass": 0, "fail": 0, "xfail": 0, "skip": 0, "xpass": 0}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for d in sorted(glob.glob(os.path.join(args.data, "node", "*"))
                        + glob.glob(os.path.join(args.data, "simple", "*"))
                        + glob.glob(os.path.join(args.data, "pytorch-converted", "*"))
                        + glob.glob(os.path.join(args.data, "pytorch-operator", "*"))):
            name = os.path.basename(d)
            if args.filter not in name or not os.path.exists(os.path.join(d, "model.onnx")):
                continue
            cases.append((name, d))

        def run_args(d, name, bound):
            model_path = os.path.join(d, "model.onnx")
            ds = os.path.join(d, "test_data_set_0")
            inputs = imp.graph_inputs(model_path)
            pbs = [os.path.join(ds, f"input_{i}.pb") for i, n in enumerate(inputs) if n not in bound]
            cmd = [model_path, "--outputs", os.path.join(tmp, name + ".npz"),
                   "--precision", args.precision, "--nan-check", "off", "--device", args.device]
            if pbs:
                cmd += ["--inputs", ",".join(pbs)]
            for n, pb in bound.items():
                cmd += ["--const-input", f"{n}={pb}"]
            return cmd

        # Every model through one `amp-run --batch` (a forked child per
        # model: the libraries' start-up is paid once); its status and
        # messages per model as from a run of its own.
        runs = imp.run_batch(args.run, [run_args(d, name, {}) for name, d in cases], tmp, "run")
        # The models amp-run could not run: their imports, as one batch too.
        failed = [i for i, (rc, _) in enumerate(runs) if rc != 0]
        imported = dict(zip(failed, imp.run_batch(
            args.translate, [["--import-onnx", os.path.join(cases[i][1], "model.onnx"), "-o",
                              os.devnull] for i in failed], tmp, "import")))

        for i, (name, d) in enumerate(cases):
            model_path = os.path.join(d, "model.onnx")
            ds = os.path.join(d, "test_data_set_0")
            out = os.path.join(tmp, name + ".npz")
            p = subprocess.CompletedProcess([], runs[i][0], "", runs[i][1])
            # amp-run imports the model itself; the separate import (which
            # tells a model that is not importable, or finds the inputs it
            # needs bound as constants) only when that run fails.
            if p.returncode != 0:
                st, detail, bound = imp.import_one(args.translate, d, imported[i])
                if st != "imported":
                    counts["skip"] += 1  # not importable: counted by the import test
                    continue
                if bound:
                    p = subprocess.run([args.run] + run_args(d, name, bound), capture_output=True,
                                       text=True, errors="replace", timeout=120)
            model = onnx.load(model_path, load_external_data=False)
            why = None
            if p.returncode != 0:
                why = "amp-run failed: " + (p.stderr.strip().splitlines() or ["(no message)"])[-1][:300]
            else:
                got = np.load(out)
                red = reduction_length(model)
                for i, o in enumerate(model.graph.output):
                    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(ds, f"output_{i}.pb")))
                    if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16 and want.dtype == np.uint16:
                        # bf16 bit patterns (amp-run writes bf16 outputs as f32)
                        want = (want.astype(np.uint32) << 16).view(np.float32)
                    why = compare(got[o.name], want, args.precision, red)
                    if why:
                        why = f"output '{o.name}': {why}"
                        break
            if why is None:
                if name in expected_fail:
                    counts["xpass"] += 1
                    problems.append(f"XPASS {name}: listed in xfail.py ({expected_fail[name]}) but passes")
                else:
                    counts["pass"] += 1
            elif name in expected_fail:
                counts["xfail"] += 1
            else:
                counts["fail"] += 1
                problems.append(f"FAIL {name}: {why}")
    for line in problems:
        print(line)
    print(f"{args.precision}: passed {counts['pass']}, expected failures {counts['xfail']}, "
          f"failed {counts['fail']}, unexpectedly passed {counts['xpass']}, "
          f"not importable (skipped) {counts['skip']}")
    bad = counts["fail"] + counts["xpass"]
    print(f"{counts['pass'] + counts['xfail']} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
