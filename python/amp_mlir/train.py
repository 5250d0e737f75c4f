"""Mixed-precision training from Python: the training spec of a model and its
training binary (amp-compile's training front end), run and read back.

    from amp_mlir import train
    prog = train.compile_training("model.onnx", "train", precision="fp16",
                                  optimizer="sgd", lr=0.01,
                                  loss_fn="cross_entropy", loss_of="logits")
    rows = train.run_training(prog, "data.npz", steps=200)   # one dict per step
    rows[-1]["loss"], rows[-1]["loss_scale"], rows[-1]["skipped_total"]

`compile_training` takes the options of `amp-compile --optimizer` as keyword
arguments (``weight_decay=1e-4`` is ``--weight-decay 1e-4``; ``True`` is a
bare flag); the training spec of a forward graph without a loss op is
``loss_fn`` (cross_entropy, nll or mse), ``loss_of`` (the output it reads)
and ``label`` (the new input's name); ``frozen`` lists parameters not to
train; ``policy`` (a JSON file, or a dict written to one) amends autocast's
default policy and ``block_list`` names ONNX nodes kept in fp32 (fp16 /
bf16); a list value repeats its flag (``padding_row=["emb.weight:0"]``).
Errors raise RuntimeError with the tool's message.

The tools are found in $AMP_MLIR_BIN, else build/bin next to this source
tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))


def _tool(name: str) -> str:
    base = os.environ.get("AMP_MLIR_BIN", os.path.join(_HERE, "..", "..", "build", "bin"))
    path = os.path.join(base, name)
    if not os.path.exists(path):
        raise RuntimeError(f"{name} not found in {base} (build the project or set $AMP_MLIR_BIN)")
    return path


def compile_training(model: str, output: str, *, precision: str = "fp32",
                     optimizer: str = "sgd", lr: float = 0.01, loss_fn: str | None = None,
                     loss_of: str | None = None, label: str | None = None,
                     frozen: tuple[str, ...] | list[str] = (), policy=None,
                     block_list: tuple[str, ...] | list[str] = (), **options) -> str:
    """Writes the training binary `output` (and `output`.weights); returns its path."""
    cmd = [_tool("amp-compile"), model, "-o", output, "--precision", precision,
           "--optimizer", optimizer, "--lr", repr(float(lr))]
    policy_tmp = None
    if isinstance(policy, dict):
        fd, policy_tmp = tempfile.mkstemp(prefix="amp-policy-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(policy, f)
        policy = policy_tmp
    if policy:
        cmd += ["--policy", os.fspath(policy)]
    if isinstance(block_list, str):
        block_list = [block_list]
    if block_list:
        cmd += ["--block-list", ",".join(block_list)]
    if loss_fn:
        cmd += ["--loss-fn", loss_fn]
    if loss_of:
        cmd += ["--loss-of", loss_of]
    if label:
        cmd += ["--label", label]
    for name in frozen:
        cmd += ["--frozen", name]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            for v in value:
                cmd += [flag, str(v)]
        else:
            cmd += [flag, str(value)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        if policy_tmp:
            os.unlink(policy_tmp)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"amp-compile failed ({r.returncode})")
    return output


def run_training(program: str, data: str, steps: int, *, metrics: str | None = None,
                 checkpoint_dir: str | None = None, resume: bool = False,
                 outputs: str | None = None) -> list[dict]:
    """Runs `steps` training steps on the arrays of `data` (.npz); returns the
    per-step metrics (step, loss, loss_scale, found_inf, skipped_total,
    step_time_s)."""
    with tempfile.TemporaryDirectory() as tmp:
        m = metrics or os.path.join(tmp, "metrics.jsonl")
        cmd = [program, "--data", data, "--steps", str(int(steps)), "--metrics", m,
               "--print-every", str(max(1, int(steps)))]
        if checkpoint_dir:
            cmd += ["--checkpoint-dir", checkpoint_dir]
        if resume:
            cmd.append("--resume")
        if outputs:
            cmd += ["--outputs", outputs]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip() or f"{program} failed ({r.returncode})")
        with open(m) as f:
            return [json.loads(line) for line in f if line.strip()]
