#!/usr/bin/env python3
"""Two builds of AMP-MLIR against each other on torchvision_zoo's models:
our training step compiled by each, in interleaved rounds in one run (a
regression check for a change that should not move the step time).

    .venv/bin/python bench/torchvision_ab.py --old OLD/build/bin [--new build/bin]
        [--models resnet50,densenet121,swin_t] [--precisions fp32,bf16]
        [--steps 12] [--rounds 5]

OLD is the bin folder of another checkout's build (git worktree add
../old <commit>; build it as this one). For each model and precision, fit
compiles the program with each build's tools (batch 8 x 3 x 64 x 64, 10
classes, SGD, as torchvision_zoo.py), then --rounds rounds run every
program once in turn (odd rounds in the reverse order), each time the
median of its steps after the first three. Printed: each side's median
over the rounds, and new / old as the median of the rounds' own ratios
(the two ran seconds apart, so a burst of load moves both).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchvision_zoo as zoo  # noqa: E402  the models, fit's settings, our_step / our_rerun


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the other build's bin folder")
    ap.add_argument("--new", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--models", default="resnet50,densenet121,swin_t")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    bins = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    for k, b in bins.items():
        if not os.path.isfile(os.path.join(b, "amp-compile")):
            sys.exit(f"torchvision_ab: no amp-compile in --{k} {b}")
    models = zoo.models(64)
    names = [n for n in models if n.split(" ")[0] in a.models.split(",")]
    if not names:
        sys.exit(f"torchvision_ab: no model among {a.models}; known: "
                 f"{', '.join(n.split(' ')[0] for n in models)}")
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    work = tempfile.mkdtemp(prefix="amp-ab-")
    saved = os.environ.get("AMP_MLIR_BIN")
    try:
        dirs = {}
        for n in names:
            for p in a.precisions.split(","):
                for k, b in bins.items():
                    os.environ["AMP_MLIR_BIN"] = b
                    d = os.path.join(work, f"{n.split(' ')[0]}-{p}-{k}")
                    zoo.our_step(models[n], x, y, 4, p, workdir=d)
                    dirs[(n, p, k)] = d
        times = {key: [] for key in dirs}
        for r in range(a.rounds):
            for key in (list(dirs) if r % 2 == 0 else list(reversed(dirs))):
                times[key].append(zoo.our_rerun(dirs[key], a.steps))
        print(f"| model | precision | old ms | new ms | new / old (median of {a.rounds} rounds) |")
        print("|---|---|---|---|---|")
        for n in names:
            for p in a.precisions.split(","):
                old, new = times[(n, p, "old")], times[(n, p, "new")]
                ratio = statistics.median(b / o for o, b in zip(old, new))
                print(f"| {n} | {p} | {statistics.median(old) * 1e3:.1f} | "
                      f"{statistics.median(new) * 1e3:.1f} | {ratio:.3f} |", flush=True)
    finally:
        if saved is None:
            os.environ.pop("AMP_MLIR_BIN", None)
        else:
            os.environ["AMP_MLIR_BIN"] = saved
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
