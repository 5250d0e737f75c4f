#!/usr/bin/env python3
"""Data-parallel step time on 1, 2, 4 ranks: ours (amp-compile
--data-parallel under mpirun) against PyTorch DDP (gloo back-end), the same
model, weights and per-rank batches, in one run.

Weak scaling: every rank trains a batch of --batch rows, so N ranks train N
x that; the efficiency is (step time on 1 rank) / (step time on N ranks)
(1.0: the extra ranks cost nothing); ours also with --grad-comm bf16 (the
gradients sent in half the bytes). Each rank gets cores / N threads (at
least one). On a machine with fewer cores than ranks this measures the
overhead of communication and oversubscription, not a speed-up: say so when
quoting it.

    python bench/data_parallel.py [--ranks 1,2,4] [--batch 64] [--steps 60]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import results as bench_results  # noqa: E402

BIN = os.environ.get("AMP_MLIR_BIN", os.path.join(HERE, "..", "build", "bin"))
HIDDEN, IN, OUT = 512, 256, 10


def mlp_onnx(path, batch):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((HIDDEN, IN)) / np.sqrt(IN)).astype(np.float32)
    w2 = (rng.standard_normal((OUT, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "fc1.weight"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "fc1.bias"),
             numpy_helper.from_array(w2, "fc2.weight"),
             numpy_helper.from_array(np.zeros(OUT, np.float32), "fc2.bias")]
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["z"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["z", "labels"], ["loss"])]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, IN]),
                           helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return {i.name: numpy_helper.to_array(i) for i in inits}


def ours(d, ranks, batch, steps, precision, threads, grad_comm="f32"):
    prog = f"{d}/train_{precision}"
    if not os.path.exists(prog):
        subprocess.run([f"{BIN}/amp-compile", f"{d}/mlp.onnx", "-o", prog, "--optimizer", "sgd",
                        "--lr", "0.01", "--precision", precision, "--data-parallel"],
                       check=True, capture_output=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), AMPRT_ADAPT_THREADS="0",
               OMPI_MCA_btl="self,vader")
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                        "-np", str(ranks), prog, "--data", f"{d}/data.npz", "--steps", str(steps),
                        "--metrics", f"{d}/m.jsonl", "--grad-comm", grad_comm],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"ours, {ranks} ranks: {r.stderr[-800:]}")
    with open(f"{d}/m.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return statistics.median(r["step_time_s"] for r in rows[5:])


TORCH_WORKER = r'''
import os, sys, time, json, statistics
import numpy as np, torch, torch.distributed as dist
rank, world, port, d, batch, steps, precision, threads = (int(sys.argv[1]), int(sys.argv[2]),
    sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], int(sys.argv[8]))
torch.set_num_threads(threads)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
w = np.load(f"{d}/weights.npz")
net = torch.nn.Sequential(torch.nn.Linear(w["fc1.weight"].shape[1], w["fc1.weight"].shape[0]),
                          torch.nn.ReLU(),
                          torch.nn.Linear(w["fc2.weight"].shape[1], w["fc2.weight"].shape[0]))
with torch.no_grad():
    for m, k in ((net[0], "fc1"), (net[2], "fc2")):
        m.weight.copy_(torch.from_numpy(w[k + ".weight"])); m.bias.copy_(torch.from_numpy(w[k + ".bias"]))
ddp = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
data = np.load(f"{d}/data.npz")
x, y = torch.from_numpy(data["input"]), torch.from_numpy(data["labels"])
nb = x.shape[0] // (world * batch)
scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
times = []
for s in range(steps):
    b = s % nb
    lo = (b * world + rank) * batch
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=dt or torch.float32, enabled=dt is not None):
        loss = torch.nn.functional.cross_entropy(ddp(x[lo:lo + batch]), y[lo:lo + batch])
    if scaler:
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    else:
        loss.backward(); opt.step()
    times.append(time.perf_counter() - t0)
if rank == 0:
    with open(f"{d}/torch.json", "w") as f:
        json.dump(statistics.median(times[5:]), f)
dist.destroy_process_group()
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytorch(d, ranks, batch, steps, precision, threads):
    with open(f"{d}/worker.py", "w") as f:
        f.write(TORCH_WORKER)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, f"{d}/worker.py", str(r), str(ranks), port, d,
                               str(batch), str(steps), precision, str(threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"PyTorch DDP, {ranks} ranks: {' | '.join(e[-400:] for e in errs)}")
    with open(f"{d}/torch.json") as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch", type=int, default=64, help="rows per rank and step")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--precisions", default="fp32,fp16")
    bench_results.add_args(ap)
    args = ap.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("data_parallel: mpirun is missing (scripts/setup.sh installs OpenMPI)")
    ranks = [int(r) for r in args.ranks.split(",")]
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as d:
        w = mlp_onnx(f"{d}/mlp.onnx", args.batch)
        np.savez(f"{d}/weights.npz", **w)
        rng = np.random.default_rng(1)
        n = 4 * max(ranks) * args.batch
        np.savez(f"{d}/data.npz", input=rng.standard_normal((n, IN)).astype(np.float32),
                 labels=rng.integers(0, OUT, n).astype(np.int64))
        for precision in args.precisions.split(","):
            base = {}
            for r in ranks:
                threads = max(1, cores // r)
                a = ours(d, r, args.batch, args.steps, precision, threads)
                h = ours(d, r, args.batch, args.steps, precision, threads, "bf16")
                t = pytorch(d, r, args.batch, args.steps, precision, threads)
                base.setdefault("ours", a)
                base.setdefault("torch", t)
                rows.append([precision, str(r), str(threads), f"{1e3 * a:.2f}", f"{1e3 * h:.2f}",
                             f"{1e3 * t:.2f}",
                             f"{t / a:.2f}", f"{base['ours'] / a:.2f}",
                             f"{base['torch'] / t:.2f}"])
                print(" | ".join(rows[-1]), flush=True)
    header = ["precision", "ranks", "threads / rank", "ours ms/step",
              "ours --grad-comm bf16 ms/step", "PyTorch DDP ms/step",
              "speed-up vs DDP", "our efficiency", "DDP efficiency"]
    notes = [f"Weak scaling: {args.batch} rows per rank and step, MLP {IN}-{HIDDEN}-{OUT}, SGD; "
             f"median of {args.steps - 5} steps; efficiency = 1-rank step time / N-rank step "
             f"time. {cores} cores: with more ranks than cores this measures the overhead of "
             f"the collectives and of oversubscription, not a speed-up. --grad-comm bf16: the "
             f"gradients travel in bf16 (half the bytes; on one rank nothing travels)."]
    bench_results.record(args, "Data parallel: ours (MPI) against PyTorch DDP (gloo)", header,
                         rows, notes)


if __name__ == "__main__":
    main()
