#!/usr/bin/env python3
"""amp-autocast embedded in other ML compilers (ctest autocast-linalg-iree).

PyTorch modules (an MLP, a transformer encoder layer, a small CNN) are
exported by torch-mlir to linalg on tensors and to TOSA; amp-opt
--amp-autocast=target=bf16 rewrites that text; IREE 3.13 compiles and runs
the result on the CPU. Checked per model and form:

  * structure: every product / convolution reads bf16 and accumulates in
    f32, reductions / softmax / normalisation stay f32 (the per-op report),
    no value (a weight above all) is cast to bf16 twice, the output is
    parsed again by MLIR 22 (amp-opt) and compiled by IREE;
  * numerics: IREE's run of our output against float64 PyTorch on fresh
    random inputs, next to torch.autocast(bf16) and IREE's own
    --iree-global-opt-demote-contraction-inputs-type=bf16 (operations=all) on the f32
    text;
  * the report and the picture exist for linalg input.

Tolerance: bf16 keeps 8 significant bits, so each rounded input carries a
relative error up to 2^-9 and a product of K terms an error of about
2^-9 * sqrt(K) of its magnitude; what amp-autocast writes rounds exactly the
inputs of the products (as IREE's demote pass does; torch.autocast also
rounds the products' outputs), so its error against float64 must be of the
same size as torch.autocast's: at most 2x torch.autocast's worst error plus
2^-9 of the output's scale, and at least 4x above f32's error (it did run
in bf16). NaN or inf fails.

Usage: test_autocast_iree.py AMP_OPT [--seed N] [--keep DIR]
       test_autocast_iree.py --write-fixtures DIR
(the second writes the lit fixtures test/Transforms/upstream/Inputs/*.mlir:
the same models' torch-mlir output, weights elided.)
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    from torch_mlir import fx
    import iree.runtime as ireert
except ImportError as e:  # a missing tool fails, with the set-up to run
    sys.exit(f"autocast-linalg-iree: {e}; run `make test` (scripts/setup.sh installs "
             "torch-mlir and IREE into .venv from python/requirements.txt)")

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)
IREE_COMPILE = os.path.join(VENV_BIN, "iree-compile")
IREE_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host"]

CONTRACTIONS = re.compile(r"(matmul|conv|contraction|convolution|dot|matvec|vecmat)")
KEPT_F32 = re.compile(r"(reduction|softmax|reduce_|\.exp$|\.log$|reciprocal|rsqrt|\.pow)")


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.relu(self.c2(x))
        return torch.log_softmax(self.fc(x.mean((2, 3))), -1)


def models(g):
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10),
                              torch.nn.Softmax(-1))
    enc = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    cnn = CNN()
    for m in (mlp, enc, cnn):
        m.eval()
        with torch.no_grad():  # fresh weights from this run's generator
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / max(1, p.shape[-1]) ** 0.5))
        # batch norm statistics that are not the identity
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
    return [("mlp", mlp, torch.randn(8, 64, generator=g), ["linalg", "tosa"]),
            ("transformer", enc, torch.randn(2, 16, 64, generator=g), ["linalg"]),
            ("cnn", cnn, torch.randn(2, 3, 16, 16, generator=g), ["linalg", "tosa"])]


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p


def iree_run(vmfb, x):
    config = ireert.Config("local-task")
    ctx = ireert.SystemContext(config=config)
    with open(vmfb, "rb") as f:
        ctx.add_vm_module(ireert.VmModule.copy_buffer(ctx.instance, f.read()))
    out = ctx.modules.module["main"](x.numpy())
    return np.asarray(out.to_host(), dtype=np.float64)


def doubly_cast(text, form):
    """Values cast to bf16 more than once."""
    seen, twice = set(), []
    if form == "linalg":
        pat = re.compile(r"linalg\.generic \{[^}]*\} ins\((%[\w#]+) : tensor<[^>]*xf32>\) "
                         r"outs\(%[\w#]+ : tensor<[^>]*xbf16>\)")
    else:
        pat = re.compile(r'"tosa\.cast"\((%[\w#]+)\) : \(tensor<[^>]*xf32>\) -> tensor<[^>]*xbf16>')
    for m in pat.finditer(text):
        if m.group(1) in seen:
            twice.append(m.group(1))
        seen.add(m.group(1))
    return seen, twice


def check_contraction_lines(text, form):
    """Every product / convolution of the text reads bf16 and writes f32 (or,
    TOSA's convolutions, accumulates in f32: acc_type)."""
    bad, n = [], 0
    for line in text.splitlines():
        if form == "linalg":
            m = re.search(r"linalg\.(matmul|batch_matmul|conv_\w+|depthwise_conv_\w+)(?: \{[^}]*\})? "
                          r"ins\((.*?)\) outs\((.*?)\)", line)
            if not m:
                continue
            n += 1
            ins, outs = m.group(2), m.group(3)
            if "f32>" in ins or "bf16" not in ins or "xf32>" not in outs:
                bad.append(line.strip()[:200])
        else:
            m = re.search(r'"tosa\.(matmul|conv2d|depthwise_conv2d)"\(.*?\) (<\{.*?\}> )?: \((.*?)\) -> (.*)', line)
            if not m:
                continue
            n += 1
            ins = m.group(3).split(", ")[:2]
            if any("bf16" not in t for t in ins):
                bad.append(line.strip()[:200])
            if m.group(1) != "matmul" and "acc_type = f32" not in line:
                bad.append(line.strip()[:200])
    return n, bad


def export(model, x, form, large_elements_limit=None):
    mod = fx.export_and_import(model, x, output_type="linalg-on-tensors" if form == "linalg" else "tosa")
    # TOSA crosses MLIR versions only in the generic form.
    return mod.operation.get_asm(print_generic_op_form=(form == "tosa"),
                                 large_elements_limit=large_elements_limit)


def write_fixtures(folder):
    g = torch.Generator().manual_seed(0)
    for name, model, x, forms in models(g):
        for form in forms:
            text = export(model, x, form, large_elements_limit=16)
            cut = text.find("{-#")  # the weights' blobs: not needed to autocast
            path = os.path.join(folder, f"torch-mlir-{name}.{form}.mlir")
            with open(path, "w") as f:
                f.write(f"// torch-mlir {fx.__name__} export of test/embedding/test_autocast_iree.py's "
                        f"{name} ({form}), weights elided:\n// test_autocast_iree.py --write-fixtures\n")
                f.write(text[:cut] if cut >= 0 else text)
            print("wrote", path)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--write-fixtures":
        write_fixtures(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("amp_opt")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", default=None, help="keep the files here")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (rerun with --seed {seed})")
    g = torch.Generator().manual_seed(seed)
    work = a.keep or tempfile.mkdtemp(prefix="amp-embed-")
    os.makedirs(work, exist_ok=True)
    failures = []
    for name, model, x, forms in models(g):
        with torch.no_grad():
            ref64 = model.double()(x.double()).numpy()
            model.float()
            f32 = model(x).double().numpy()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                tbf16 = model(x).double().numpy()
        scale = float(np.abs(ref64).max())

        def err(y):
            return float(np.abs(y - ref64).max()) / scale

        for form in forms:
            tag = f"{name}/{form}"
            src = os.path.join(work, f"{name}.{form}.mlir")
            out = os.path.join(work, f"{name}.{form}.bf16.mlir")
            report = os.path.join(work, f"{name}.{form}.report.json")
            dot = os.path.join(work, f"{name}.{form}.dot")
            with open(src, "w") as f:
                f.write(export(model, x, form))
            opts = f"target=bf16 report={report}" + (f" dot={dot}" if form == "linalg" else "")
            cmd = [a.amp_opt, f"--amp-autocast={opts}", src, "-o", out]
            if form == "tosa":
                cmd.insert(1, "--mlir-print-op-generic")
            run(cmd, f"{tag}: amp-opt")
            run([a.amp_opt, out, "-o", os.devnull], f"{tag}: MLIR 22 re-parsing amp-opt's output")
            text = open(out).read()
            rep = json.load(open(report))

            # Structure.
            n, bad = check_contraction_lines(text, form)
            if n == 0:
                failures.append(f"{tag}: no product or convolution found in the output")
            if bad:
                failures.append(f"{tag}: contractions not reading bf16 with f32 accumulation: {bad[:3]}")
            lowered = [o for o in rep["ops"] if CONTRACTIONS.search(o["op"])]
            for o in lowered:
                if o["class"] != "lower" or o["compute_type"] != "bf16" or o.get("accumulate") != "f32":
                    failures.append(f"{tag}: report: {o['node']} {o['op']} is {o['class']} in {o['compute_type']}")
            kept = [o for o in rep["ops"] if KEPT_F32.search(o["op"])]
            if not kept:
                failures.append(f"{tag}: report lists no reduction / softmax / exp op")
            for o in kept:
                if o["compute_type"] not in ("f32", "f64"):
                    failures.append(f"{tag}: report: {o['node']} {o['op']} computes in {o['compute_type']}")
            seen, twice = doubly_cast(text, form)
            if twice:
                failures.append(f"{tag}: values cast to bf16 more than once: {sorted(set(twice))[:5]}")
            if form == "linalg" and not (os.path.exists(dot) and os.path.getsize(dot) > 100):
                failures.append(f"{tag}: no picture at {dot}")

            # IREE: ours, IREE's own demote pass on the f32 text, and f32.
            vm_ours, vm_peer, vm_f32 = (os.path.join(work, f"{name}.{form}.{k}.vmfb") for k in ("ours", "peer", "f32"))
            run([IREE_COMPILE, *IREE_FLAGS, out, "-o", vm_ours], f"{tag}: iree-compile of amp-opt's output")
            run([IREE_COMPILE, *IREE_FLAGS, "--iree-global-opt-demote-contraction-inputs-type=bf16",
                 "--iree-global-opt-demote-contraction-inputs-operations=all", src, "-o", vm_peer],
                f"{tag}: iree-compile with IREE's demote pass")
            run([IREE_COMPILE, *IREE_FLAGS, src, "-o", vm_f32], f"{tag}: iree-compile f32")
            ours, peer, if32 = (iree_run(v, x) for v in (vm_ours, vm_peer, vm_f32))
            e = {"amp-autocast+IREE": err(ours), "IREE demote": err(peer), "torch.autocast bf16": err(tbf16),
                 "torch f32": err(f32), "IREE f32": err(if32)}
            casts = rep["summary"]
            print(f"{tag:18s} contractions {n:2d}  weights cast {casts['params_cast_to_target']:2d}  "
                  f"casts +{casts['casts_inserted']:2d}  max error / scale vs float64: " +
                  "  ".join(f"{k} {v:.2e}" for k, v in e.items()))
            if not np.all(np.isfinite(ours)):
                failures.append(f"{tag}: non-finite output")
            limit = 2 * e["torch.autocast bf16"] + 2.0 ** -9
            if not e["amp-autocast+IREE"] <= limit:
                failures.append(f"{tag}: error {e['amp-autocast+IREE']:.3e} above {limit:.3e} "
                                "(2x torch.autocast bf16's + 2^-9)")
            if not e["amp-autocast+IREE"] >= 4 * max(e["IREE f32"], 1e-7):
                failures.append(f"{tag}: error {e['amp-autocast+IREE']:.3e} is f32's ({e['IREE f32']:.3e}): "
                                "did anything run in bf16?")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all models: contractions in bf16 with f32 accumulation, within bf16 tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
