"""The training step on a GPU: AMP-MLIR's CUDA programs against the CPU run
of the same programs (correctness) and against PyTorch on the GPU (speed),
from a bundle that scripts/gpu-bundle made on a machine with the compiler.

    python3 bench/train_step_gpu.py BUNDLE [--check] [--bench] [--emulate]
                                           [--steps 150] [--compile-models transformer_large]

BUNDLE (unpacked scripts/gpu-bundle output) holds, per model (the demo's
MLP and data, the examples' MLP, CNN and transformer block, and a larger
transformer block for the matrix-heavy case) and precision (fp32, fp16 with dynamic loss scaling,
bf16): the program `amp-compile --device cuda` wrote, its data, and the
CPU's metrics of the same binary (--device cpu) for the check.

--check: runs each program on the GPU for the CPU run's steps and compares
the loss of every step (relative tolerance: fp32 1e-4, fp16 2e-3, bf16 1e-2:
cuBLASLt's and our kernels' sums in another order than the CPU's) and the
loss-scale / found_inf sequences (identical).

--bench: the median step time of ours (`--sync-every 50`: the loop reads the
loss back once per 50 steps; the block's time / 50) against PyTorch on the
same model, weights and data: eager (fp32; torch.autocast fp16 + GradScaler;
autocast bf16) and torch.compile for --compile-models. PyTorch's steps are
timed the same way (CUDA events around a block of steps, no synchronisation
inside). Also: host synchronisations inside our steps (target 0), and the
AMP speed-up over fp32 of both.

--emulate: AMPRT_CUDA_EMULATE=1 (the CUDA executor on the host): the check on
a machine without a GPU, to try this script before a GPU is lent.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1e-2}


def run_ours(bundle, name, precision, steps, metrics, env, extra=(), timeout=120):
    prog = os.path.join(bundle, "programs", f"{name}.{precision}")
    data = os.path.join(bundle, "programs", f"{name}.npz")
    cmd = [prog, "--data", data, "--steps", str(steps), "--metrics", metrics, "--print-every", "1000000", *extra]
    try:  # a hung program must not eat the GPU call's time
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        p = subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")
    rows = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    return p, rows


def check(bundle, env, out, models=()):
    index = json.load(open(os.path.join(bundle, "index.json")))
    if models:  # a subset (the emulated try of the script, which is slow on the host)
        index["programs"] = [i for i in index["programs"] if i["model"] in models]
    bad = 0
    # Each program plain and as CUDA graphs; the CNN also on each of the
    # other convolution paths (AMPRT_CUDA_CONV=gemm: im2col + cuBLASLt,
    # direct: the direct kernels) besides the default (cuDNN where it takes
    # the convolution), and the MLP with ReLU as a second pass after its
    # products (AMPRT_CUDA_RELU_EPILOGUE=0) besides cuBLASLt's epilogue.
    runs = [(i, g, None) for i in index["programs"] for g in (False, True)]
    runs += [(i, False, ("AMPRT_CUDA_CONV", c)) for i in index["programs"] if i["model"] == "cnn"
             for c in ("gemm", "direct")]
    runs += [(i, False, ("AMPRT_CUDA_RELU_EPILOGUE", "0")) for i in index["programs"] if i["model"] == "mlp"]
    for item, graph, switch in runs:
        name, precision, steps = item["model"], item["precision"], item["steps"]
        ref = [json.loads(l) for l in open(os.path.join(bundle, "programs", f"{name}.{precision}.cpu.jsonl"))]
        tag = " (CUDA graph)" if graph else f" ({switch[0]}={switch[1]})" if switch else ""
        suffix = ".graph" if graph else f".{switch[0]}-{switch[1]}" if switch else ""
        m = os.path.join(out, f"{name}.{precision}{suffix}.gpu.jsonl")
        t0 = time.time()
        p, rows = run_ours(bundle, name, precision, steps, m, dict(env, **{switch[0]: switch[1]}) if switch else env,
                           ("--cuda-graph",) if graph else ())
        if p.returncode != 0:
            bad += 1
            print(f"FAIL  {name} {precision}{tag}: exit {p.returncode}: {p.stderr.strip()[-300:]}", flush=True)
            continue
        worst = max((abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-30) for a, b in zip(ref, rows)),
                    default=float("inf"))
        seq = all(a["loss_scale"] == b["loss_scale"] and a["found_inf"] == b["found_inf"]
                  for a, b in zip(ref, rows))
        ok = len(rows) == len(ref) and np.isfinite(worst) and worst <= TOL[precision] and seq
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {name} {precision}{tag}: {len(rows)} steps on the device vs the "
              f"CPU: worst relative loss difference {worst:.2e} (tolerance {TOL[precision]:g}), "
              f"scale / found_inf {'identical' if seq else 'DIFFER'}, skipped {rows[-1]['skipped_total'] if rows else '?'}"
              f" ({time.time() - t0:.1f} s)", flush=True)
    return bad


def torch_step_fn(name, init, shape, precision, compiled, device):
    import torch
    sys.path.insert(0, HERE)
    import train_step_vs_torch as tv  # the CPU bench's torch models

    dev = torch.device(device)
    if name.startswith("transformer"):
        model = tv.TorchBlock(init, heads=int(init["shape_heads"][2]))
        fwd = model
    else:
        model, fwd = tv.torch_model(name, init)
        if name == "cnn":
            model.rm, model.rv = model.rm.to(dev), model.rv.to(dev)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    f = torch.compile(fwd) if compiled else fwd

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = f(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return step


def torch_time(name, bundle, precision, steps, compiled, device):
    import onnx
    import torch
    from onnx import numpy_helper

    model = onnx.load(os.path.join(bundle, "programs", f"{name}.onnx"))
    init = {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    d = np.load(os.path.join(bundle, "programs", f"{name}.npz"))
    b = shape[0]
    xs = torch.tensor(d["input"]).to(device)
    ys = torch.tensor(d["labels"]).to(device)
    nb = xs.shape[0] // b
    step = torch_step_fn(name, init, shape, precision, compiled, device)
    for i in range(10):  # warm-up (and compilation)
        step(xs[(i % nb) * b:(i % nb + 1) * b], ys[(i % nb) * b:(i % nb + 1) * b])
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    times = []
    for r in range(3):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t0 = time.perf_counter()
        for i in range(steps // 3):
            k = i % nb
            loss = step(xs[k * b:(k + 1) * b], ys[k * b:(k + 1) * b])
        if cuda:
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3 / (steps // 3))
        else:
            times.append((time.perf_counter() - t0) / (steps // 3))
    if not np.isfinite(float(loss.detach())):
        raise SystemExit(f"PyTorch's {name} {precision} loss is {float(loss.detach())}")
    return float(np.median(times))


def bench(bundle, env, out, steps, compile_models, device, budget, models):
    index = json.load(open(os.path.join(bundle, "index.json")))
    rows = []
    start = time.time()
    for item in index["programs"]:
        name, precision = item["model"], item["precision"]
        if (models and name not in models) or name == "demo":  # the demo: checked, not timed
            continue
        m = os.path.join(out, f"{name}.{precision}.bench.jsonl")
        p, r = run_ours(bundle, name, precision, steps + 50, m, env, ("--sync-every", "50"))
        if p.returncode != 0:
            print(f"FAIL  bench {name} {precision}: {p.stderr.strip()[-300:]}", flush=True)
            continue
        ours = float(np.median([x["step_time_s"] for x in r[50:]]))
        pg, rg = run_ours(bundle, name, precision, steps + 50, m + ".graph", env,
                          ("--sync-every", "50", "--cuda-graph"))
        graph = float(np.median([x["step_time_s"] for x in rg[50:]])) if pg.returncode == 0 else float("nan")
        syncs = next((l for l in p.stdout.splitlines() if "host synchronisations" in l), "")
        # "host synchronisations inside steps: N in the M steps after the first, ..."
        inside = int(syncs.split("steps:")[1].split()[0]) if syncs else -1
        eager = torch_time(name, bundle, precision, steps, False, device)
        comp = None
        if name in compile_models:
            if time.time() - start < budget:
                comp = torch_time(name, bundle, precision, steps, True, device)
            else:
                print(f"   torch.compile of {name} {precision} skipped: past the {budget} s budget")
        rows.append((name, precision, ours, eager, comp, inside, steps + 50, graph))
        print(f"{name:18} {precision}: ours {ours * 1e3:8.3f} ms  graph {graph * 1e3:8.3f} ms  "
              f"eager {eager * 1e3:8.3f} ms"
              + (f"  compile {comp * 1e3:8.3f} ms" if comp else "")
              + f"  syncs inside steps {inside}", flush=True)
    print("\n| model | precision | AMP-MLIR ms/step | AMP-MLIR, CUDA graph | PyTorch eager | "
          "torch.compile | eager / ours (best) | host syncs inside steps (after the first) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, p, o, e, c, s, n, g in rows:
        best = min(o, g) if np.isfinite(g) else o
        print(f"| {name} | {p} | {o * 1e3:.3f} | {g * 1e3:.3f} | {e * 1e3:.3f} | "
              f"{'%.3f' % (c * 1e3) if c else '-'} | {e / best:.2f}x | {s} in {n - 1} steps |")
    # The backend's switches, each against its default on the same program:
    # which default wins on this GPU.
    variants = [("cnn", "fp16", "AMPRT_CUDA_CONV", "gemm"), ("cnn", "fp32", "AMPRT_CUDA_CONV", "gemm"),
                ("cnn", "fp16", "AMPRT_CUDA_CONV", "direct"), ("cnn", "fp16", "AMPRT_CUDA_VEC", "0"),
                ("mlp", "fp16", "AMPRT_CUDA_RELU_EPILOGUE", "0"), ("transformer_large", "fp16", "AMPRT_CUDA_VEC", "0")]
    done = {(r[0], r[1]): r[2] for r in rows}
    lines = []
    for name, precision, var, val in variants:
        if (name, precision) not in done:
            continue
        m = os.path.join(out, f"{name}.{precision}.{var}.bench.jsonl")
        p, r = run_ours(bundle, name, precision, steps + 50, m, dict(env, **{var: val}), ("--sync-every", "50"))
        if p.returncode != 0:
            print(f"FAIL  bench {name} {precision} with {var}={val}: {p.stderr.strip()[-300:]}", flush=True)
            continue
        t = float(np.median([x["step_time_s"] for x in r[50:]]))
        lines.append(f"| {name} | {precision} | {var}={val} | {t * 1e3:.3f} | {done[name, precision] * 1e3:.3f} | "
                     f"{t / done[name, precision]:.2f}x |")
    if lines:
        print("\n| model | precision | switch | ms/step | default ms/step | switch / default |")
        print("|---|---|---|---|---|---|")
        print("\n".join(lines))
    by = {(n, p): (o, e) for n, p, o, e, _, _, _, _ in rows}
    for n in sorted({r[0] for r in rows}):
        if (n, "fp32") in by and (n, "fp16") in by:
            print(f"AMP speed-up (fp32 / fp16 step time) {n}: ours {by[n, 'fp32'][0] / by[n, 'fp16'][0]:.2f}x, "
                  f"PyTorch eager {by[n, 'fp32'][1] / by[n, 'fp16'][1]:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--compile-models", default="transformer_large")
    ap.add_argument("--out", default="/tmp/amp-gpu-out")
    ap.add_argument("--models", default="", help="bench only these (comma-separated; default all)")
    ap.add_argument("--budget-s", type=float, default=300,
                    help="no new torch.compile run after this many seconds of the bench")
    ap.add_argument("--torch-device", default="cuda",
                    help="cpu: try the PyTorch side of --bench on a machine without a GPU")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ)
    env.pop("AMPRT_CUDA_EMULATE", None)
    # Our programs' libraries (scripts/gpu-check resolves them: the bundle's,
    # the toolkit's, the wheels' CUDA 13 layout); this process, and PyTorch
    # in it, keep their own environment.
    if os.environ.get("AMP_GPU_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["AMP_GPU_LD_LIBRARY_PATH"]
    if a.emulate:
        env["AMPRT_CUDA_EMULATE"] = "1"
    bad = check(a.bundle, env, a.out, [m for m in a.models.split(",") if m]) if a.check else 0
    if a.bench:
        bench(a.bundle, env, a.out, a.steps, a.compile_models.split(","), a.torch_device, a.budget_s,
              [m for m in a.models.split(",") if m])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
