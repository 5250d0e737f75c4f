"""Recorded amprt_exec calls (AMPRT_EXEC_RECORD) replayed by amprt-exec-replay:
the kernel-by-kernel check of the CUDA backend that scripts/gpu-check runs on
a GPU, tried here on the CPU and on the emulated CUDA executor.

    python3 test_exec_replay.py AMP_COMPILE AMP_RUN AMPRT_EXEC_REPLAY

- one step of the MLP (fp16, SGD + momentum), the CNN (bf16, Adam) and the
  transformer block (fp32, AdamW, clipping) and a forward program with two
  dropouts, recorded on the CPU with fresh random data;
- replayed on the CPU: every element bit for bit (the recording holds what
  each call read and wrote);
- replayed on the emulated CUDA executor: every call within its tolerance;
- a record whose CPU result was altered (one output element) fails, naming
  the file; a truncated record and a missing device are clean errors.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import examples  # noqa: E402

passes, failures = 0, []


def check(ok, what):
    global passes
    if ok:
        passes += 1
        print(f"ok    {what}", flush=True)
    else:
        failures.append(what)
        print(f"FAIL  {what}", flush=True)


def run(cmd, env=None, expect_ok=True):
    e = dict(os.environ)
    for k in ("AMPRT_CUDA_EMULATE", "AMPRT_EXEC_RECORD", "AMPRT_EXEC_RECORD_MAX"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if expect_ok and p.returncode != 0:
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("compile")
    ap.add_argument("run")
    ap.add_argument("replay")
    a = ap.parse_args()
    rng = np.random.default_rng()
    with tempfile.TemporaryDirectory() as tmp:
        calls = os.path.join(tmp, "calls")
        os.makedirs(calls)
        # The CPU replay is bit for bit: it must run the kernels the
        # recording's per-shape choices took (timed, so two processes may
        # choose apart): both share one AMPRT_TUNE_FILE.
        tune = {"AMPRT_TUNE_FILE": os.path.join(tmp, "kernels.tune")}
        rec = {"AMPRT_EXEC_RECORD": calls, "AMPRT_EXEC_RECORD_MAX": str(4 << 20), **tune}
        for name, precision, opt in (("mlp", "fp16", ["--optimizer", "sgd", "--momentum", "0.9"]),
                                     ("cnn", "bf16", ["--optimizer", "adam"]),
                                     ("transformer_block", "fp32", ["--optimizer", "adamw", "--max-norm", "1"])):
            model = getattr(examples, name)()
            path = os.path.join(tmp, f"{name}.onnx")
            onnx.save(model, path)
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            data = os.path.join(tmp, f"{name}.npz")
            np.savez(data, input=rng.standard_normal([shape[0]] + shape[1:]).astype(np.float32),
                     labels=rng.integers(0, 10, shape[0]).astype(np.int64))
            prog = os.path.join(tmp, f"{name}.{precision}")
            run([a.compile, path, "-o", prog, "--precision", precision, "--lr", "0.01", "--device", "cuda", *opt])
            run([prog, "--device", "cpu", "--data", data, "--steps", "1"], rec)
        x = rng.standard_normal((3, 200, 7)).astype(np.float32)
        gr = helper.make_graph(
            [helper.make_node("Dropout", ["x", "r", "t"], ["y1", "m1"]),
             helper.make_node("Dropout", ["y1", "r", "t"], ["y2"])], "drop",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
             helper.make_tensor_value_info("m1", TensorProto.BOOL, None)],
            [numpy_helper.from_array(np.array(0.4, np.float32), "r"), numpy_helper.from_array(np.array(True), "t")])
        mpath, ipath = os.path.join(tmp, "drop.onnx"), os.path.join(tmp, "drop_in.npz")
        onnx.save(helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)]), mpath)
        np.savez(ipath, x=x)
        run([a.run, mpath, "--inputs", ipath, "--outputs", os.path.join(tmp, "drop_out.npz")], rec)
        files = sorted(f for f in os.listdir(calls) if f.endswith(".rec"))
        leftovers = [f for f in os.listdir(calls) if not f.endswith(".rec")]
        check(len(files) > 100 and not leftovers,
              f"recorded {len(files)} calls of four programs, no temporary files left")

        p = run([a.replay, "--device", "cpu", "--exact", calls], tune, expect_ok=False)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        check(p.returncode == 0 and f"{len(files)} recorded calls replayed on cpu, 0 failed" in last,
              f"replayed on the CPU bit for bit: exit {p.returncode}, '{last}'")
        p = run([a.replay, calls], {"AMPRT_CUDA_EMULATE": "1"}, expect_ok=False)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        ops = [l.split("|")[1].strip() for l in p.stdout.splitlines() if l.startswith("| ") and "calls" not in l]
        check(p.returncode == 0 and f"{len(files)} recorded calls replayed on cuda, 0 failed" in last
              and "dropout" in ops and "conv_grad" in ops and "adam_update" in ops,
              f"replayed on the emulated CUDA executor: exit {p.returncode}, '{last}'; "
              f"{len(ops)} kinds of op (dropout, conv_grad, adam_update among them)")

        # --ops: the convolutions alone, on each of the emulated executor's
        # convolution paths (auto and cudnn: cuDNN's host implementation).
        def opcode(f):  # the descriptor's second entry (see the altered record below)
            with open(os.path.join(calls, f), "rb") as fh:
                return int.from_bytes(fh.read(32)[24:32], "little")
        nconv = sum(1 for f in files if opcode(f) in (15, 23))  # AMPRT_OP_CONV, AMPRT_OP_CONV_GRAD
        for conv in ("auto", "cudnn", "gemm", "direct"):
            p = run([a.replay, "--ops", "conv,conv_grad", calls], {"AMPRT_CUDA_EMULATE": "1", "AMPRT_CUDA_CONV": conv},
                    expect_ok=False)
            last = (p.stdout.strip().splitlines() or [""])[-1]
            ops = sorted(l.split("|")[1].strip() for l in p.stdout.splitlines() if l.startswith("| ") and "calls" not in l)
            check(p.returncode == 0 and f"{nconv} recorded calls replayed on cuda, 0 failed" in last and
                  ops == ["conv", "conv_grad"] and nconv > 0,
                  f"--ops conv,conv_grad with AMPRT_CUDA_CONV={conv}: exit {p.returncode}, '{last}' ({ops})")
        p = run([a.replay, "--ops", "conv,bogus", calls], {"AMPRT_CUDA_EMULATE": "1"}, expect_ok=False)
        check(p.returncode == 1 and "--ops: unknown op 'bogus'" in p.stderr,
              f"--ops with an unknown op: exit {p.returncode}, '{p.stderr.strip()}'")
        p = run([a.replay, "--ops", "topk", calls], {"AMPRT_CUDA_EMULATE": "1"}, expect_ok=False)
        check(p.returncode == 1 and "none of the" in p.stderr,
              f"--ops matching no call: exit {p.returncode}, '{p.stderr.strip()}'")
        p = run([a.replay, "--ops", "conv", calls], {"AMPRT_CUDA_EMULATE": "1", "AMPRT_CUDA_CONV": "im2col"},
                expect_ok=False)
        check(p.returncode == 2 and "AMPRT_CUDA_CONV=im2col: expected 'auto'" in p.stderr,
              f"AMPRT_CUDA_CONV=im2col refused: exit {p.returncode}, '{p.stderr.strip()}'")
        # cuDNN refusing every candidate (its host implementation told to):
        # with cudnn required an error naming the refusal (it was skipped
        # silently), with auto the convolutions on im2col + cuBLASLt.
        for conv, ok in (("cudnn", False), ("auto", True)):
            p = run([a.replay, "--ops", "conv,conv_grad", calls],
                    {"AMPRT_CUDA_EMULATE": "1", "AMPRT_CUDA_CONV": conv, "AMPRT_CUDA_EMULATE_DNN": "no-algorithm"},
                    expect_ok=False)
            out = p.stdout + p.stderr
            last = (p.stdout.strip().splitlines() or [""])[-1]
            if ok:
                check(p.returncode == 0 and f"{nconv} recorded calls replayed on cuda, 0 failed" in last,
                      f"cuDNN without an algorithm, AMPRT_CUDA_CONV=auto: im2col + cuBLASLt, '{last}'")
            else:
                check(p.returncode == 1 and "AMPRT_CUDA_CONV=cudnn: cuDNN refused" in out and "candidates" in out,
                      f"cuDNN without an algorithm, AMPRT_CUDA_CONV=cudnn: an error (exit {p.returncode}): "
                      f"'{next((l for l in out.splitlines() if 'cuDNN refused' in l), '')[:200]}'")

        # An altered CPU result must fail: the last output byte of the
        # largest record's after-image, flipped in its top bits.
        big = max(files, key=lambda f: os.path.getsize(os.path.join(calls, f)))
        raw = bytearray(open(os.path.join(calls, big), "rb").read())
        desc_len = int.from_bytes(raw[8:16], "little")
        at = 16 + 8 * desc_len + 8
        nregions = int.from_bytes(raw[at:at + 8], "little")
        at += 8
        first = int.from_bytes(raw[at:at + 8], "little")  # region 0: size, before, after
        raw[at + 8 + first + first // 2] ^= 0x40
        bad = os.path.join(tmp, "bad.rec")
        open(bad, "wb").write(bytes(raw))
        p = run([a.replay, "--device", "cpu", "--exact", bad], expect_ok=False)
        check(p.returncode == 1 and "FAIL  " + bad in p.stdout,
              f"an altered record ({big}, {nregions} regions) fails: exit {p.returncode}, "
              f"'{(p.stdout.strip().splitlines() or [''])[0][:120]}'")
        open(bad, "wb").write(bytes(raw[:40]))
        p = run([a.replay, "--device", "cpu", bad], expect_ok=False)
        check(p.returncode == 1 and "truncated" in p.stderr,
              f"a truncated record: exit {p.returncode}, '{p.stderr.strip()}'")
        p = run([a.replay, calls], expect_ok=False)
        check(p.returncode == 0 or (p.returncode == 2 and "no CUDA device" in p.stderr),
              f"not emulated: exit {p.returncode}, '{p.stderr.strip() or 'a GPU ran it'}'")

    print(f"{passes} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
