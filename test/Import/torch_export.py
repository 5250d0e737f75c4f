"""Models exported by torch.onnx.export (both exporters) must import.

    python torch_export.py AMP_TRANSLATE WORKDIR

Exports the example models as PyTorch modules (MLP with cross-entropy loss,
CNN with BatchNorm, transformer block with erf GELU) through the TorchScript
exporter (opset 17) and the torch.export-based one (opset 18+, the default
since torch 2.9), imports every file and checks that the ops we expect are
there.
"""

import os
import subprocess
import sys
import warnings

import logging

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)  # the exporter's notes about torchvision
tool, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 128), nn.Linear(128, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.fc2(F.relu(self.fc1(x))), y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.fc = nn.Conv2d(16, 32, 3, padding=1), nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.adaptive_avg_pool2d(F.relu(self.conv2(x)), 1)
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h, self.ln1, self.ln2 = h, nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).reshape(b, t, self.h, d // self.h).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


cases = [
    ("mlp", MLP().eval(), (torch.randn(8, 64), torch.randint(0, 10, (8,))),
     ["amp.gemm", "amp.relu", "amp.softmax_cross_entropy_loss"]),
    ("cnn", CNN().eval(), (torch.randn(2, 3, 16, 16),),
     # eval-mode exporters fold BatchNorm into the convolution
     ["amp.conv", "amp.max_pool", "amp.gemm"]),
    ("block", Block().eval(), (torch.randn(2, 5, 32),),
     ["amp.layer_norm", "amp.matmul", "amp.softmax", "amp.transpose", "amp.reshape"]),
]

passed = failed = 0
for name, module, args, expect in cases:
    for exporter in ("torchscript", "dynamo"):
        path = os.path.join(work, f"{name}_{exporter}.onnx")
        try:
            if exporter == "torchscript":
                torch.onnx.export(module, args, path, dynamo=False, opset_version=17)
            else:
                torch.onnx.export(module, args, path, dynamo=True, optimize=True)
        except Exception as e:  # an exporter problem is not ours, but say it
            print(f"FAIL {name}/{exporter}: torch could not export: {type(e).__name__}: {e}"[:400])
            failed += 1
            continue
        p = subprocess.run([tool, "--import-onnx", path], capture_output=True, text=True)
        missing = [op for op in expect if op not in p.stdout]
        if p.returncode != 0 or missing:
            failed += 1
            print(f"FAIL {name}/{exporter}: exit {p.returncode}, missing {missing}\n{p.stderr[:1500]}")
        else:
            passed += 1
            print(f"ok   {name}/{exporter}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
