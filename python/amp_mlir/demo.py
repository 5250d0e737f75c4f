"""The demo (docs/semantics.md section 5), both halves.

    python -m amp_mlir.demo export OUT   # PyTorch model -> OUT/mlp.onnx, OUT/data.npz
    python -m amp_mlir.demo report OUT   # PyTorch's own AMP run, the comparison
                                         # and OUT/amp_demo.png

The model is Linear(64,128) -> ReLU -> Linear(128,10) with cross entropy,
exported by torch.onnx.export (the loss is part of the graph, so the ONNX
file is a training graph's forward); the data is X ~ N(0,1) of 256x64 and
y uniform in [0,10), seed 42. `report` reads the metrics the compiled
training programs wrote (OUT/fp16.jsonl, OUT/fp32.jsonl), runs the same 200
SGD steps in PyTorch (autocast fp16 + GradScaler, and fp32), prints how far
apart they are and draws both loss curves and the loss scale.
"""

import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, LR = 200, 0.01


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 128), nn.Linear(128, 10)

    def forward(self, input, labels):  # noqa: A002 (the ONNX input's name)
        return F.cross_entropy(self.fc2(F.relu(self.fc1(input))), labels)


def _setup():
    torch.manual_seed(42)
    model = MLP()
    x = torch.randn(256, 64)
    y = torch.randint(0, 10, (256,))
    return model, x, y


def export(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    model, x, y = _setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, y), f"{out}/mlp.onnx", input_names=["input", "labels"],
                          output_names=["loss"], opset_version=17, dynamo=False,
                          do_constant_folding=False)
    np.savez(f"{out}/data.npz", input=x.numpy(), labels=y.numpy())
    print(f"   wrote {out}/mlp.onnx (torch.onnx.export of the MLP with its loss) and "
          f"{out}/data.npz (X 256x64, y 256, seed 42)")


def torch_run(precision: str):
    model, x, y = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    fp16 = precision == "fp16"
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    rows = []
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
            loss = model(x, y)
        scale = scaler.get_scale() if fp16 else 1.0
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        rows.append((loss.item(), scale))
    return rows


def report(out: str) -> int:
    ours = {p: [json.loads(l) for l in open(f"{out}/{p}.jsonl")] for p in ("fp16", "fp32")}
    ok = True
    for p in ("fp16", "fp32"):
        ref = torch_run(p)
        rel = max(abs(o["loss"] - r[0]) / r[0] for o, r in zip(ours[p], ref))
        same_scale = all(o["loss_scale"] == r[1] for o, r in zip(ours[p], ref))
        tol = 1e-4 if p == "fp16" else 1e-5
        ok &= rel <= tol and same_scale and len(ours[p]) == STEPS
        print(f"   {p}: final loss {ours[p][-1]['loss']:.6f} (PyTorch {ref[-1][0]:.6f}); "
              f"largest difference over {STEPS} steps {rel:.2e} relative (tolerance {tol:g}); "
              f"loss scale sequence {'identical' if same_scale else 'DIFFERENT'}")
    skipped = ours["fp16"][-1]["skipped_total"]
    print(f"   fp16 skipped steps: {skipped}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 6), sharex=True,
                               gridspec_kw={"height_ratios": [3, 1.4]})
    for p, style in (("fp32", "-"), ("fp16", "--")):
        a.plot([o["step"] for o in ours[p]], [o["loss"] for o in ours[p]], style,
               label=f"AMP-MLIR {p}" + (" (dynamic loss scaling)" if p == "fp16" else ""))
    a.set_ylabel("loss")
    a.set_title("MLP 64-128-10, SGD lr 0.01, 200 steps (docs/semantics.md section 5)")
    a.legend()
    a.grid(alpha=0.3)
    b.step([o["step"] for o in ours["fp16"]], [o["loss_scale"] for o in ours["fp16"]],
           where="post", color="tab:red")
    b.set_yscale("log", base=2)
    b.set_ylabel("loss scale (fp16)")
    b.set_xlabel("step")
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/amp_demo.png", dpi=110)
    print(f"   plot: {out}/amp_demo.png")
    return 0 if ok else 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("export", "report"):
        print(__doc__)
        return 2
    if argv[0] == "export":
        export(argv[1])
        return 0
    return report(argv[1])


if __name__ == "__main__":
    sys.exit(main())
