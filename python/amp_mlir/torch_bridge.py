"""Train a PyTorch module with AMP-MLIR: the PyTorch bridge.

    import torch.nn.functional as F
    from amp_mlir import torch_bridge

    class Net(torch.nn.Module):
        def forward(self, input, labels):              # returns the loss
            return F.cross_entropy(self.fc(input), labels)

    rows = torch_bridge.fit(net, {"input": x, "labels": y}, steps=200, batch=64,
                            precision="fp16", optimizer="sgd", lr=0.01)
    rows[-1]["loss"], rows[-1]["loss_scale"], rows[-1]["skipped_total"]
    # net's parameters (and buffers such as batch-norm statistics) now hold
    # the trained values.

A module that returns scores instead takes ``loss_fn`` (cross_entropy, nll
or mse) and ``labels`` (the targets, one row per sample):

    rows = torch_bridge.fit(net, {"input": x}, steps=200, loss_fn="cross_entropy",
                            labels=y, precision="bf16", optimizer="adamw", lr=1e-3)

What happens: the module is exported with ``torch.onnx.export``
(``exporter="torchscript"``, the default: the TorchScript exporter, opset
17, no constant folding, so the ONNX initializers keep the parameters'
names and training-mode behaviour of dropout and batch norm is kept; or
``exporter="dynamo"``, torch.export, opset 18; ``opset=`` overrides; the
exporter's warnings are shown once each), ``amp-compile --optimizer`` writes
a training program for that graph (precision, optimizer, its
hyper-parameters and loss scaling as keyword arguments, the options of
:func:`amp_mlir.train.compile_training`, ``policy=`` / ``block_list=`` among
them), the program trains ``steps`` steps on the arrays cut into batches of
``batch`` rows (in order, starting again after the last), and the
parameters and buffers of its last checkpoint are copied back into the
module. Returns one dict per step (step, loss, loss_scale, found_inf,
skipped_total, step_time_s).

What trains is what PyTorch would train: exactly the parameters with
``requires_grad=True``. Frozen parameters, buffers other than batch-norm
statistics, and initializers the exporter made that are not the module's
(constants turned into parameters, folded or renamed weights: reported in a
warning) are imported as constants and stay bit-identical; the rows of
``nn.Embedding(padding_idx=i)`` get no gradient from the lookup. A run
whose forward pass produced a non-finite loss raises RuntimeError (and
leaves the module as it was) with the hint to rerun under
AMPRT_CHECK_NUMERICS=1.

The exporter's own forward would move batch-norm statistics: the module
and the exported initializers keep their values from before it. ONNX's
BatchNormalization (what the exporter writes) moves running_var by the
batch's population variance where PyTorch uses the unbiased one.

Errors raise ValueError (bad arguments: arrays of different lengths, a batch
larger than the data, an unknown keyword) or RuntimeError (the exporter's
or a tool's message).
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
import warnings

import numpy as np

from . import train as _train

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "BOOL": np.bool_, "I8": np.int8, "F64": np.float64}


def read_checkpoint(path: str) -> tuple[dict, dict]:
    """The tensors (name -> numpy array; bf16 as float32) and the metadata
    of a safetensors checkpoint a training program wrote."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise RuntimeError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise RuntimeError(f"{path}: truncated safetensors header")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = blob[base + a:base + b]
        if h["dtype"] == "BF16":
            bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif h["dtype"] in _DTYPES:
            arr = np.frombuffer(raw, _DTYPES[h["dtype"]])
        else:
            raise RuntimeError(f"{path}: tensor '{name}' has dtype {h['dtype']}")
        out[name] = arr.reshape(h["shape"]).copy()
    return out, meta


def _as_numpy(name, value):
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    a = np.asarray(value)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.ndim == 0:
        raise ValueError(f"'{name}' is a scalar; every input needs one row per sample")
    return np.ascontiguousarray(a)


_EXPORTERS = ("torchscript", "dynamo")
# Exporter warnings about what fit itself asks for or takes care of.
_FIT_HANDLES = ("legacy TorchScript-based ONNX export", "Setting `training` to something other",
                "The feature will be removed", "embedding with padding_idx",
                "Exporting a model while it is in training mode")


def fit(module, inputs: dict, steps: int, *, batch: int | None = None, loss_fn: str | None = None,
        labels=None, workdir: str | None = None, exporter: str = "torchscript",
        opset: int | None = None, policy=None, **options) -> list[dict]:
    """Trains `module` (in place) for `steps` steps; see the module docstring.
    `options` are amp-compile's (precision, optimizer, lr, ...: see
    amp_mlir.train.flags()), checked before anything runs."""
    import torch

    known = _train.flags()
    for key, value in options.items():
        if key in ("loss_of", "label", "loss_fn"):
            raise TypeError(f"fit sets {key} itself (loss_fn= and labels= give the loss)")
        if value is not None:
            _train._flag_args(key, value, known)

    if exporter not in _EXPORTERS:
        raise ValueError(f"exporter must be one of {', '.join(_EXPORTERS)}, got {exporter!r}")
    if opset is None:
        opset = 17 if exporter == "torchscript" else 18

    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"fit needs a torch.nn.Module, got {type(module).__name__}")
    if not inputs:
        raise ValueError("fit needs the module's inputs: {name: array with one row per sample}")
    arrays = {str(k): _as_numpy(k, v) for k, v in inputs.items()}
    if (loss_fn is None) != (labels is None):
        raise ValueError("loss_fn and labels go together (a module returning scores); a module "
                         "returning its loss takes neither")
    if loss_fn is not None:
        if "labels" in arrays:
            raise ValueError("an input is named 'labels', the name of the targets of loss_fn")
        arrays_with_labels = dict(arrays, labels=_as_numpy("labels", labels))
    else:
        arrays_with_labels = arrays
    rows = {k: a.shape[0] for k, a in arrays_with_labels.items()}
    if len(set(rows.values())) != 1:
        raise ValueError("the arrays differ in length (rows per sample): " +
                         ", ".join(f"{k} {n}" for k, n in rows.items()))
    total = next(iter(rows.values()))
    batch = total if batch is None else int(batch)
    if batch < 1 or batch > total:
        raise ValueError(f"batch must lie in [1, {total}] (the samples), got {batch}")
    if int(steps) < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")

    own = workdir is None
    tmp = tempfile.mkdtemp(prefix="amp-fit-") if own else workdir
    os.makedirs(tmp, exist_ok=True)
    try:
        onnx_path = os.path.join(tmp, "model.onnx")
        example = tuple(torch.from_numpy(a[:batch]) for a in arrays.values())
        was_training = module.training
        # The exporter runs the module once: its batch-norm statistics would
        # move, so the module's state comes back as it was.
        before = {k: v.detach().clone() for k, v in module.state_dict().items()}
        module.train()
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                kw = dict(input_names=list(arrays),
                          output_names=["output" if loss_fn else "loss"], opset_version=int(opset))
                if exporter == "torchscript":
                    torch.onnx.export(module, example, onnx_path, dynamo=False,
                                      do_constant_folding=False,
                                      training=torch.onnx.TrainingMode.TRAINING, **kw)
                else:
                    torch.onnx.export(module, example, onnx_path, dynamo=True, external_data=False,
                                      optimize=False, do_constant_folding=False,
                                      **kw)
        except Exception as e:  # the exporter's own message
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the exporter's terminal colours
            raise RuntimeError(f"torch.onnx.export ({exporter}) failed: {text}") from e
        finally:
            module.train(was_training)
            with torch.no_grad():
                module.load_state_dict(before)
        # The exporter's warnings, once each, as the user's own call shows
        # them; not those about the choices fit makes for the user (the
        # legacy exporter, training=, padding_idx, which fit handles).
        for text in dict.fromkeys(str(w.message) for w in said):
            if not any(s in text for s in _FIT_HANDLES):
                warnings.warn(f"torch.onnx.export ({exporter}): {text}", stacklevel=2)
        _restore_initializers(onnx_path, before)
        trained_bns = _batch_norms_in_training(module, onnx_path)
        plan = _training_plan(module, onnx_path)
        if trained_bns:
            plan["changes"].insert(0, (
                f"the exporter wrote {trained_bns} batch norm(s) of the training module in "
                f"inference mode (normalising by the running statistics); fit trains them as "
                f"the module's forward does: batch statistics, running statistics updated"))
        for line in plan["changes"]:
            warnings.warn(line, stacklevel=2)
        prog = os.path.join(tmp, "train")
        spec = dict(loss_fn=loss_fn, loss_of="output", label="labels") if loss_fn else {}
        # Frozen initializers are imported as constants: untouched by
        # construction, and not in the checkpoint.
        extra_freeze = options.pop("freeze", None) or ()
        freeze = sorted(set(plan["frozen"]) |
                        set([extra_freeze] if isinstance(extra_freeze, str) else extra_freeze))
        extra_pads = options.pop("padding_rows", None) or ()
        pads = list(plan["padding_rows"]) + (
            [extra_pads] if isinstance(extra_pads, str) else list(extra_pads))
        _train.compile_training(onnx_path, prog, freeze=freeze or None, padding_rows=pads or None,
                                policy=policy, **spec, **options)
        data = os.path.join(tmp, "data.npz")
        np.savez(data, **arrays_with_labels)
        ck = os.path.join(tmp, "checkpoints")
        metrics = _train.run_training(prog, data, int(steps), checkpoint_dir=ck)
        bad = [r["step"] for r in metrics if not np.isfinite(r.get("loss", np.nan))]
        if bad:
            raise RuntimeError(
                f"training produced non-finite losses at {len(bad)} of {len(metrics)} steps "
                f"(first: step {bad[0]}): the forward pass itself is NaN / inf (loss scaling "
                f"cannot cause that); the module was left as it was. Run the program again with "
                f"AMPRT_CHECK_NUMERICS=1 to name the first op that makes a non-finite value "
                f"({prog} in workdir=...), or try precision='fp32' / block_list=[nodes]")
        trained, _ = read_checkpoint(os.path.join(ck, "checkpoint.safetensors"))
        _load_back(module, trained, int(steps), set(freeze))
        return metrics
    finally:
        if own:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)


# Above this many bytes of initializers, fit keeps the ONNX file's weights
# in one external data file beside it (protobuf cannot write a message of 2
# GiB or more).
_INLINE_MAX = 1 << 30


def _external_files(path: str) -> set:
    """The external data files the ONNX file at `path` reads (names relative
    to its folder)."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    out = set()
    for t in onnx.load(path, load_external_data=False).graph.initializer:
        if uses_external_data(t):
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc:
                out.add(loc)
    return out


def _save_onnx(model, path: str, external: set) -> None:
    """Writes `model` (its initializers loaded in memory) to `path`: inline
    when small, else with its weights in one external file `<path>.data`.
    `external`: the files the model was read from (_external_files, before
    the load; one per tensor from the TorchScript exporter), removed first:
    their data is in `model`, and nothing else reads them."""
    import onnx

    folder = os.path.dirname(os.path.abspath(path))
    data = os.path.basename(path) + ".data"
    for loc in set(external) | {data}:
        full = os.path.normpath(os.path.join(folder, loc))
        if os.path.dirname(full) == folder and os.path.isfile(full):
            os.remove(full)
    if sum(len(t.raw_data) for t in model.graph.initializer) > _INLINE_MAX:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=1024)
    else:
        onnx.save(model, path)


def _restore_initializers(path: str, state: dict) -> None:
    """The exporter's forward in training mode moved the batch-norm
    statistics before it wrote them: the ONNX file's initializers get the
    module's values from before the export."""
    import onnx
    from onnx import numpy_helper

    external = _external_files(path)
    model = onnx.load(path)
    changed = False
    for init in model.graph.initializer:
        if init.name in state:
            value = state[init.name].cpu().numpy()
            if numpy_helper.to_array(init).shape != value.shape:
                continue
            init.CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(init).dtype),
                                                  init.name))
            changed = True
    if changed:
        _save_onnx(model, path, external)


def _batch_norms_in_training(module, path: str) -> int:
    """torch.export (torch 2.15) writes a training module's batch norms as
    ONNX BatchNormalization in inference mode: the graph would normalise by
    the running statistics, which is not the module's training. The nodes
    whose running statistics are those of a batch norm module in training
    mode (tracking statistics) get training_mode = 1 back. Returns how many
    changed."""
    import onnx
    import torch

    stats = set()
    for name, m in module.named_modules(remove_duplicate=False):
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and \
                m.track_running_stats:
            stats.add((name + "." if name else "") + "running_mean")
    # Only nodes change: external data stays where it is.
    model = onnx.load(path, load_external_data=False)
    changed = 0
    for node in model.graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or \
                len(node.input) < 5 or node.input[3] not in stats:
            continue
        mode = next((a for a in node.attribute if a.name == "training_mode"), None)
        if mode is not None and mode.i != 0:
            continue
        if mode is None:
            node.attribute.append(onnx.helper.make_attribute("training_mode", 1))
        else:
            mode.i = 1
        changed += 1
    if changed:
        onnx.save(model, path)
    return changed


def _training_plan(module, path: str) -> dict:
    """What the program trains, from the exported graph: exactly the module's
    parameters with requires_grad=True. Frozen parameters, buffers other than
    batch-norm statistics (which the program moves as PyTorch's forward does)
    and initializers that are not the module's (constants the exporter made
    parameters) are frozen. nn.Embedding(padding_idx=i) rows get no gradient.
    Returns frozen, padding_rows and the changes to report."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    g = model.graph
    floats = {t.name for t in g.initializer
              if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                 onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)}
    bn_stats = {n.input[i] for n in g.node if n.op_type == "BatchNormalization"
                for i in (3, 4) if len(n.input) > i}
    # Every name of a tied tensor (BERT's decoder.weight is its
    # word_embeddings.weight): torch.export writes the tensor under whichever
    # name it meets first, the TorchScript exporter under the first.
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    aliases = {}
    for n, t in list(params.items()) + list(buffers.items()):
        aliases.setdefault(id(t), []).append(n)
    for names in aliases.values():
        present = [n for n in names if n in floats]
        if len(present) > 1:
            raise RuntimeError(
                f"the exported graph holds one tied tensor as {len(present)} initializers "
                f"({', '.join(present)}): training them apart would untie them; export with the "
                f"other exporter or untie the weights")
    trained = {n for n, p in params.items() if p.requires_grad}
    frozen = sorted(n for n in floats if n not in trained and n not in bn_stats)
    changes = []
    foreign = [n for n in frozen if n not in params and n not in buffers]
    if foreign:
        changes.append(f"the exporter made {len(foreign)} graph initializer(s) that are not the "
                       f"module's parameters or buffers (constants, folded or renamed weights); "
                       f"they stay frozen: " + ", ".join(foreign[:12]) +
                       (" ..." if len(foreign) > 12 else ""))
    missing = sorted(ns[0] for ns in aliases.values()
                     if ns[0] in trained and not any(n in floats for n in ns))
    if missing and floats & set(params):
        changes.append(f"{len(missing)} trainable parameter(s) are not in the exported graph under "
                       f"their names (unused by the loss, tied to another, folded into another "
                       f"weight or renamed by the exporter): they are not trained: " +
                       ", ".join(missing[:12]) + (" ..." if len(missing) > 12 else ""))
    elif missing:
        changes.append("none of the module's parameters is in the exported graph under its name "
                       "(the exporter renamed them): nothing would train; use "
                       "exporter='torchscript'")
    pads = []
    for name, m in module.named_modules():
        idx = getattr(m, "padding_idx", None)
        if not isinstance(m, __import__("torch").nn.Embedding) or idx is None:
            continue
        w = next((n for n in aliases[id(m.weight)] if n in floats), None)
        if w is not None and w in trained:
            rows = m.weight.shape[0]
            pads.append(f"{w}:{idx % rows if idx < 0 else idx}")
    return {"frozen": frozen, "padding_rows": pads, "changes": changes}


def _load_back(module, trained: dict, steps: int, frozen: set = frozenset()) -> None:
    """Copies the checkpoint's parameters and buffers into the module's
    tensors of the same names (the exporter kept them); batch norms count
    the steps' batches (num_batches_tracked), as PyTorch's forward does."""
    import torch

    own = dict(module.named_parameters(remove_duplicate=False))
    own.update(dict(module.named_buffers(remove_duplicate=False)))
    copied = set()
    with torch.no_grad():
        for name, t in own.items():
            if name not in trained or name in frozen:
                continue
            value = torch.from_numpy(trained[name])
            if tuple(value.shape) != tuple(t.shape):
                raise RuntimeError(f"the trained '{name}' has shape {list(value.shape)}, the "
                                   f"module's {list(t.shape)}")
            t.copy_(value.to(t.dtype))
            copied.add(name)
    with torch.no_grad():
        for name, t in module.named_buffers():
            if name.endswith("num_batches_tracked") and name[:-len("num_batches_tracked")] + \
                    "running_mean" in copied:
                t += steps

