"""Autocast on the example MLP, CNN and transformer block, for f16 and bf16:

  * every MatMul / Gemm / Conv multiplies in the target type with f32
    accumulation; in bf16 its bias (Gemm's C, a Conv's B) stays f32, added
    to the accumulator, and its result is in the target type, or f32 (the
    accumulator unrounded) where only f32 reads it, and then never cast
    back down; in f16 bias and result are f16 (PyTorch's roundings);
  * Softmax, LayerNormalization, the f32 reductions, Exp / Log / Pow and the
    losses compute in f32;
  * BatchNormalization (the storage class) reads and writes its activations
    in the target type when its input is (after a convolution) and keeps
    its scale, bias and statistics in f32;
  * each parameter is cast at most once, and every weight read by a matrix
    product or convolution exactly once.

Checked on the rewritten IR itself (operand and result element types of
every op line), and against the pass's JSON report.

    python check_autocast_examples.py AMP_TRANSLATE AMP_OPT WORKDIR
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from amp_mlir import examples  # noqa: E402

translate, opt, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)

LOWER = {"amp.matmul", "amp.gemm", "amp.conv"}
STORAGE = {"amp.batch_norm"}
FP32 = {"amp.softmax", "amp.log_softmax", "amp.layer_norm", "amp.reduce_sum",
        "amp.reduce_mean", "amp.exp", "amp.log", "amp.pow", "amp.softmax_cross_entropy_loss",
        "amp.nll_loss"}
OP_LINE = re.compile(r"(%[\w#:]+) = (amp\.\w+) (.*) : (.*?)(?: loc\(.*\))?$")
SIGNATURE = re.compile(r"^\((.*)\) -> (.*)$")
CAST = re.compile(r"= amp\.cast (%arg\d+) : tensor<(?:[0-9?]+x)*(\w+)> to tensor<(?:[0-9?]+x)*(\w+)>")
ELT = re.compile(r"tensor<(?:[0-9?]+x)*(\w+)>")
RANKED = re.compile(r"tensor<((?:[0-9?]+x)*)(\w+)>")

failures = []
checks = 0


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        failures.append(msg)


for name, make in examples.MODELS.items():
    onnx_path = os.path.join(work, name + ".onnx")
    import onnx
    onnx.save(make(), onnx_path)
    for target in ("f16", "bf16"):
        report_path = os.path.join(work, f"{name}.{target}.json")
        imported = subprocess.run([translate, "--import-onnx", onnx_path, "--no-locations"],
                                  capture_output=True, text=True, check=True).stdout
        p = subprocess.run([opt, f"-amp-autocast=target={target} report={report_path}",
                            "--mlir-elide-resource-strings-if-larger=1"],
                           input=imported, capture_output=True, text=True)
        check(p.returncode == 0, f"{name}/{target}: amp-opt failed: {p.stderr}")
        ir = p.stdout
        params = dict(re.findall(r"(%arg\d+): tensor<[^>]*> \{[^}]*amp\.param = \"([^\"]+)\"", ir))
        seen = set()
        for line in ir.splitlines():
            m = OP_LINE.search(line.strip())
            if not m or m.group(2) == "amp.cast":
                continue
            result, op, types = m.group(1), m.group(2), m.group(4)
            elts = set(ELT.findall(types)) - {"i1", "i32", "i64"}
            seen.add(op)
            if op in LOWER:
                sig = SIGNATURE.match(types)
                ins, out = ELT.findall(sig.group(1)), ELT.findall(sig.group(2))
                wide = "f32" if target == "bf16" else target
                check(ins[:2] == [target, target] and ins[2:] in ([], [wide])
                      and out in ([target], [wide]),
                      f"{name}/{target}: {op} multiplies in {ins[:2]}, bias {ins[2:]}, "
                      f"result {out}: {line.strip()}")
                if out == ["f32"]:
                    check(not re.search(r"amp\.cast " + re.escape(result) + r" :", ir),
                          f"{name}/{target}: {op}'s f32 accumulator is cast back down: "
                          f"{line.strip()}")
                check("accumulate = f32" in line, f"{name}/{target}: {op} without f32 accumulation")
            if op in FP32:
                check(elts == {"f32"}, f"{name}/{target}: {op} computes in {elts}: {line.strip()}")
            if op in STORAGE:
                acts = {e for dims, e in RANKED.findall(types) if dims.count("x") >= 2}
                stats = {e for dims, e in RANKED.findall(types) if dims.count("x") == 1}
                check(acts == {target} and stats == {"f32"},
                      f"{name}/{target}: {op} stores activations in {acts}, statistics in {stats}: "
                      f"{line.strip()}")
                seen.add("storage")
        check(seen & LOWER, f"{name}: no matrix product found (did the import change?)")
        if name == "cnn":
            check("storage" in seen, f"{name}/{target}: no batch norm found (did the import change?)")
        # Casts of parameters: at most one per parameter, exactly one for weights
        # that feed a low matrix product.
        casts = {}
        for arg, src, dst in CAST.findall(ir):
            casts.setdefault(arg, []).append(dst)
        for arg, pname in params.items():
            n = len(casts.get(arg, []))
            check(n <= 1, f"{name}/{target}: parameter {pname} cast {n} times")
            if pname.endswith(".weight") and ("conv" in pname or "fc" in pname or "attn" in pname
                                               or "mlp" in pname or "head" in pname):
                check(n == 1 and casts[arg] == [target],
                      f"{name}/{target}: weight {pname} cast {casts.get(arg)} (want one cast to {target})")
        # The report says the same.
        rep = json.load(open(report_path))
        check(rep["target"] == target, f"{name}/{target}: report target {rep['target']}")
        for d in rep["ops"]:
            for key in ("node", "op", "class", "compute_type", "reason"):
                check(key in d, f"{name}/{target}: report entry lacks {key}: {d}")
            if d["op"] in LOWER:
                check(d["compute_type"] == target and d.get("accumulate") == "f32",
                      f"{name}/{target}: report says {d}")
            if d["op"] in FP32:
                check(d["compute_type"] == "f32", f"{name}/{target}: report says {d}")
            if d["op"] in STORAGE:
                check(d["class"] == "storage" and d["compute_type"] == target
                      and d.get("accumulate") == "f32", f"{name}/{target}: report says {d}")
        check(rep["summary"]["casts_inserted"] > 0, f"{name}/{target}: no casts reported")
        print(f"{name}/{target}: {rep['summary']['ops_by_compute_type']}, "
              f"{rep['summary']['casts_inserted']} casts, "
              f"{rep['summary']['params_cast_to_target']} parameters cast to {target}")

for f in failures:
    print("FAIL", f)
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
