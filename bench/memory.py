"""Peak memory of training at the sizes users train: our program against
PyTorch, each side in its own process, same model, weights and batches.

    .venv/bin/python bench/memory.py [--models gpt2,bert,resnet50,qwen2]
        [--precisions fp32,bf16] [--steps 3] [--results docs/results.md|none]

Models (random weights from their configs, no download):
  gpt2      GPT-2 small (124M), batch 4 x 128 tokens, AdamW
  bert      BERT-base masked LM (110M), 8 x 128, 15% masked, AdamW
  resnet50  torchvision ResNet-50, 16 x 3 x 224 x 224, SGD with momentum
  qwen2     a Qwen2-0.5B-shaped decoder (tied embeddings, 494M), 1 x 256, AdamW
  qwen2-untied  the same untied (630M; more than protobuf's 2 GiB as ONNX:
            fit keeps its weights as external data); not in the default
            run, `--models qwen2-untied` writes its own section

Ours: `torch_bridge.fit(..., steps=1, workdir=W)` exports and compiles the
program (and checks it trains), then `W/train --data W/data.npz --steps N`
runs alone, its peak resident set (getrusage of that process) and its
steady one (the largest VmRSS sampled in the second half of the run)
measured; the prediction is amp-compile's (`--memory-report`, through
fit's memory_report=): the signature's tensors (parameters, low-precision
copies, optimizer state, inputs, results not written in place), the arena
amp-plan-memory sized, the kernels' workspace and the runtime's own pages.
PyTorch: a fresh
process builds the same module, runs N steps (eager fp32, or autocast
bf16 / fp16 with the module's weights in fp32, as PyTorch AMP does), its
peak from getrusage. Both include their libraries (PyTorch's Python and
torch; our runtime, oneDNN).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import results as results_mod  # noqa: E402  bench/results.py: the table into docs/results.md

GiB = float(1 << 30)
MODELS = ["gpt2", "bert", "resnet50", "qwen2", "qwen2-untied"]
# The default run; the untied Qwen2 (its own run: its two sides take about
# 10 and 13 GiB) gets a section of its own in results.md.
DEFAULT_MODELS = "gpt2,bert,resnet50,qwen2"
OPT = {"gpt2": ("adamw", 1e-4), "bert": ("adamw", 1e-4), "resnet50": ("sgd", 0.01),
       "qwen2": ("adamw", 1e-4), "qwen2-untied": ("adamw", 1e-4)}


def build(name):
    """(module returning its loss, {input name: tensor}) with fixed seeds."""
    import torch
    from hf_zoo import Classifier, LossOf  # the zoo's wrappers: forward returns the loss
    torch.manual_seed(1234)
    g = torch.Generator().manual_seed(4321)
    if name == "resnet50":
        import torchvision
        net = Classifier(torchvision.models.resnet50(num_classes=1000))
        return net, {"x": torch.randn(16, 3, 224, 224, generator=g),
                     "labels": torch.randint(0, 1000, (16,), generator=g)}
    import transformers as t
    if name == "gpt2":
        cfg = t.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        m, rows, seq, vocab = t.GPT2LMHeadModel(cfg), 4, 128, cfg.vocab_size
    elif name == "bert":
        cfg = t.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        m, rows, seq, vocab = t.BertForMaskedLM(cfg), 8, 128, cfg.vocab_size
    elif name.startswith("qwen2"):
        cfg = t.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                            num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                            max_position_embeddings=256, tie_word_embeddings=name == "qwen2",
                            attention_dropout=0.0)
        m, rows, seq, vocab = t.Qwen2ForCausalLM(cfg), 1, 256, cfg.vocab_size
    else:
        raise SystemExit(f"unknown model {name!r} (one of {', '.join(MODELS)})")
    m.config.use_cache = False
    ids = torch.randint(3, vocab, (rows, seq), generator=g)
    labels = ids.clone()
    if name == "bert":
        keep = torch.rand(rows, seq, generator=g) < 0.15
        labels = torch.where(keep, ids, torch.full_like(ids, -100))
    # The attention mask a training loop passes (all ones: no padding);
    # without it transformers looks for packed sequences with aten::diff,
    # which the ONNX exporter cannot export.
    names = ["input_ids", "attention_mask", "labels"]
    return LossOf(m, names), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                              "labels": labels}


def child_torch(name, precision, steps):
    import torch
    net, inputs = build(name)
    net.train()
    kind, lr = OPT[name]
    opt = (torch.optim.AdamW(net.parameters(), lr=lr) if kind == "adamw" else
           torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    args = list(inputs.values())
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dt or torch.float32, enabled=dt is not None):
            loss = net(*args)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    seconds = (time.perf_counter() - t0) / steps
    print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "steady": rss_of(os.getpid()), "loss": float(loss), "step_s": seconds}))


def child_compile(name, precision, workdir):
    from amp_mlir import torch_bridge
    net, inputs = build(name)
    kind, lr = OPT[name]
    arrays = {k: v.numpy() for k, v in inputs.items()}
    rows = torch_bridge.fit(net, arrays, steps=1, precision=precision, optimizer=kind, lr=lr,
                            workdir=workdir, memory_report=os.path.join(workdir, "memory.json"),
                            **({"momentum": 0.9} if kind == "sgd" else {}))
    print(json.dumps({"loss": rows[-1]["loss"]}))


def rss_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def plan_of(report):
    """amp-compile --memory-report's prediction for the step: {category: bytes}."""
    with open(report) as f:
        return json.load(f)["functions"][0]["predicted"]


def run_ours(workdir, steps):
    """Runs the compiled program alone: (peak, steady, seconds)."""
    cmd = [os.path.join(workdir, "train"), "--data", os.path.join(workdir, "data.npz"),
           "--steps", str(steps)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []

    def sample():
        while proc.poll() is None:
            samples.append((time.perf_counter() - t0, rss_of(proc.pid)))
            time.sleep(0.02)
    th = threading.Thread(target=sample)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    th.join()
    total = time.perf_counter() - t0
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[:400]}")
    late = [r for t, r in samples if t >= total / 2]
    return usage.ru_maxrss * 1024, max(late) if late else 0, total


def child(args):
    out = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["?"])[-1][:400])
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name, precision, steps):
    r = {"model": name, "precision": precision}
    try:
        r["torch"] = child(["--child", "torch", name, precision, str(steps)])
    except RuntimeError as e:
        r["torch_error"] = str(e)
    work = tempfile.mkdtemp(prefix=f"amp-mem-{name}-")
    try:
        child(["--child", "compile", name, precision, work])
        r["plan"] = plan_of(os.path.join(work, "memory.json"))
        r["ours_peak"], r["ours_steady"], r["ours_s"] = run_ours(work, steps)
    except RuntimeError as e:
        r["ours_error"] = str(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return r


STATE = ("parameters", "low_precision_copies", "optimizer_state", "inputs", "results")


def rows_of(results):
    g = lambda b: f"{b / GiB:.2f}" if b else "-"  # noqa: E731
    fp32 = {r["model"]: r.get("ours_peak") for r in results if r["precision"] == "fp32"}
    rows = []
    for r in results:
        tp = r.get("torch", {}).get("peak")
        if "ours_error" in r:
            rows.append([r["model"], r["precision"], "fails: " + r["ours_error"][:100], "", "",
                         "", g(tp), "", ""])
            continue
        base = fp32.get(r["model"])
        p = r["plan"]
        rows.append([
            r["model"], r["precision"], g(r["ours_peak"]), g(r["ours_steady"]),
            f"{g(p['peak_bytes'])} ({g(p['parameters'])} + {g(p['low_precision_copies'])} + "
            f"{g(p['optimizer_state'])} + {g(p['arena'])} + "
            f"{g(p['workspace'] + p['runtime'] + p['inputs'] + p['results'])})",
            f"{r['ours_peak'] / p['peak_bytes']:.2f}", g(tp),
            f"{r['ours_peak'] / tp:.2f}" if tp else "-",
            f"{r['ours_peak'] / base:.2f}" if base and r["precision"] != "fp32" else "-"])
    return rows


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, name, precision, extra = sys.argv[2:6]
        if kind == "torch":
            child_torch(name, precision, int(extra))
        else:
            child_compile(name, precision, extra)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=3)
    results_mod.add_args(ap)
    a = ap.parse_args()
    precisions = a.precisions.split(",")
    results = []
    for name in a.models.split(","):
        for p in precisions:
            r = measure(name, p, a.steps)
            print(json.dumps(r), flush=True)
            results.append(r)
    load = os.getloadavg()
    results_mod.record(
        a, "Peak memory of a training step at real sizes (GiB)",
        ["model", "precision", "ours peak", "ours steady",
         "predicted (parameters + low-precision copies + optimizer state + arena + other)",
         "measured / predicted", "PyTorch peak", "ours / PyTorch", "ours / ours fp32"],
        rows_of(results),
        notes=[f"Load average {load[0]:.1f} at the end. PyTorch: eager fp32, autocast for "
               f"bf16 / fp16 (fp32 weights, as PyTorch AMP); ours: the compiled program run "
               f"alone; predicted: amp-compile --memory-report's peak_bytes (other: the "
               f"kernels' workspace, the runtime's own, the batch and the results)."],
        part=None if a.models == DEFAULT_MODELS else a.models)


if __name__ == "__main__":
    main()
