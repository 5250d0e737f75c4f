"""Mixed-precision training from Python: the training spec of a model and its
training binary (amp-compile's training front end), run and read back.

    from amp_mlir import train
    prog = train.compile_training("model.onnx", "train", precision="fp16",
                                  optimizer="sgd", lr=0.01,
                                  loss_fn="cross_entropy", loss_of="logits")
    rows = train.run_training(prog, "data.npz", steps=200)   # one dict per step
    rows[-1]["loss"], rows[-1]["loss_scale"], rows[-1]["skipped_total"]

`compile_training` takes the flags of `amp-compile` as keyword arguments,
checked against the tool's own list (``amp-compile --describe-flags``: each
flag's name, type and default, declared once in the compiler):
``weight_decay=1e-4`` is ``--weight-decay=1e-4``, ``check_inf=False`` is
``--check-inf=false``, a list is repeated (``padding_rows=["emb.weight:0"]``);
``None`` leaves a flag to its default. An unknown keyword or a value of the
wrong type raises TypeError naming it. The training spec of a forward graph
without a loss op is ``loss_fn`` (cross_entropy, nll or mse), ``loss_of``
(the output it reads) and ``label`` (the new input's name); ``frozen`` lists
parameters not to train; ``policy`` (a JSON file, or a dict written to one)
amends autocast's default policy and ``block_list`` names ONNX nodes kept in
fp32 (fp16 / bf16). Errors of the tool raise RuntimeError with its message.

The tools are found in $AMP_MLIR_BIN, else build/bin next to this source
tree.
"""

from __future__ import annotations

import difflib
import functools
import json
import numbers
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


@functools.lru_cache(maxsize=None)
def flags() -> dict:
    """amp-compile's flags as {keyword: {"flag", "type", "default", "help"}}
    (type: str, int, float, bool or list)."""
    r = subprocess.run([_tool("amp-compile"), "--describe-flags"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"amp-compile --describe-flags failed ({r.returncode})")
    return {row["flag"].replace("-", "_"): row for row in json.loads(r.stdout)}


def _flag_args(keyword: str, value, known: dict) -> list[str]:
    """`keyword=value` as amp-compile arguments, checked against its type."""
    row = known.get(keyword)
    if row is None:
        close = difflib.get_close_matches(keyword, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TypeError(f"unknown amp-compile option {keyword!r}{hint}; "
                        f"the options: {', '.join(sorted(known))}")
    flag, kind = "--" + row["flag"], row["type"]

    def bad(what):
        return TypeError(f"{keyword} must be {what}, got {type(value).__name__} {value!r}")

    if kind == "list":
        items = [value] if isinstance(value, (str, os.PathLike)) else value
        if not isinstance(items, (list, tuple)) or not all(
                isinstance(v, (str, os.PathLike)) for v in items):
            raise bad("a string or a list of strings")
        return [f"{flag}={os.fspath(v)}" for v in items]
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("True or False")
        return [f"{flag}={'true' if value else 'false'}"]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise bad("an int")
        return [f"{flag}={int(value)}"]
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad("a number")
        return [f"{flag}={float(value)!r}"]
    if not isinstance(value, (str, os.PathLike)):
        raise bad("a string")
    return [f"{flag}={os.fspath(value)}"]


def compile_training(model: str, output: str, *, optimizer: str | None = None,
                     policy=None, **options) -> str:
    """Writes the training binary `output` (and `output`.weights); returns its
    path. `optimizer` None is amp-compile's default optimizer."""
    known = flags()
    if optimizer is None:
        optimizer = known["optimizer"]["default"]
    args = _flag_args("optimizer", optimizer, known)
    for key, value in options.items():
        if value is not None:
            args += _flag_args(key, value, known)
    policy_tmp = None
    if isinstance(policy, dict):
        fd, policy_tmp = tempfile.mkstemp(prefix="amp-policy-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(policy, f)
        policy = policy_tmp
    if policy:
        args += _flag_args("policy", policy, known)
    cmd = [_tool("amp-compile"), os.fspath(model), "-o", os.fspath(output)] + args
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
