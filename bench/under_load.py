#!/usr/bin/env python3
"""Step times on a busy machine: a zoo model's training program (./train
from torch_bridge.fit) and PyTorch's own training step, each timed quiet
and then while other processes keep every core busy, in one run.

    python bench/under_load.py [--models gpt2,bert-sdpa,timm-resnet10t]
                               [--precision bf16] [--busy N] [--steps 30]

--busy N starts N processes spinning in a loop (default: one per core, the
"two busy processes" of a 2-core machine). Prints, per model, the median
step in ms quiet and loaded for ours and PyTorch's and the ratios; exits 1
when ours, loaded, is more than 3x its quiet time. Environment variables
given with --env (NAME=VALUE, repeatable) are set for our program only
(e.g. --env GOMP_SPINCOUNT=300000 to see the old behaviour).
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import results  # bench/results.py: the table into docs/results.md
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import hf_zoo  # noqa: E402
from amp_mlir import torch_bridge  # noqa: E402


def busy(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def ours(prog, data, steps, env):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        subprocess.run([prog, "--data", data, "--steps", str(steps), "--metrics", m,
                        "--print-every", str(steps)], check=True, capture_output=True,
                       env=dict(os.environ, **env))
        with open(m) as f:
            t = [json.loads(line)["step_time_s"] for line in f if line.strip()]
    return 1e3 * statistics.median(t[2:])


def theirs(net, inputs, precision, steps):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    args = [v[:hf_zoo.BATCH] for v in inputs.values()]
    t = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dt or torch.float32, enabled=dt is not None):
            loss = net(*args)
        loss.backward()
        opt.step()
        t.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(t[2:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert-sdpa,timm-resnet10t")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--busy", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--env", action="append", default=[])
    results.add_args(ap)
    args = ap.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    zoo = hf_zoo.build_zoo()
    rows, bad = [], []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            torch.manual_seed(0)
            g = torch.Generator().manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                net, make_inputs, exporter = zoo[name]()
                inputs = make_inputs(2 * hf_zoo.BATCH, g)
                wd = os.path.join(work, name)
                torch_bridge.fit(copy.deepcopy(net), dict(inputs), steps=1, batch=hf_zoo.BATCH,
                                 precision=args.precision, lr=1e-3, exporter=exporter,
                                 workdir=wd)
            prog, data = os.path.join(wd, "train"), os.path.join(wd, "data.npz")
            q_ours, q_theirs = ours(prog, data, args.steps, env), theirs(net, inputs,
                                                                         args.precision, args.steps)
            procs = busy(args.busy)
            try:
                time.sleep(1.0)
                l_ours = ours(prog, data, args.steps, env)
                l_theirs = theirs(net, inputs, args.precision, args.steps)
            finally:
                for p in procs:
                    p.kill()
                for p in procs:
                    p.wait()
            rows.append((name, q_ours, l_ours, q_theirs, l_theirs))
            if l_ours > 3 * q_ours:
                bad.append(f"{name}: ours loaded {l_ours:.1f} ms, {l_ours / q_ours:.1f}x quiet")
    results.record(
        args, f"Step time under load ({args.precision}, {args.busy} busy processes on "
        f"{os.cpu_count()} cores, median of {args.steps} steps"
        + (f", our program's environment {env}" if env else "") + ")",
        ["model", "ours quiet ms", "ours loaded ms", "ratio", "PyTorch quiet ms",
         "PyTorch loaded ms", "ratio"],
        [(name, f"{qo:.1f}", f"{lo:.1f}", f"{lo / qo:.2f}", f"{qt:.1f}", f"{lt:.1f}",
          f"{lt / qt:.2f}") for name, qo, lo, qt, lt in rows])
    for b in bad:
        print("FAIL", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
