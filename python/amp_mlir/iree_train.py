"""Training with IREE: the loop of ``./train`` over a step compiled by IREE.

``amp-compile model.onnx --emit linalg -o step.mlir --precision fp16
--optimizer sgd ...`` writes the training step as linalg on tensors
(autodiff, autocast, the optimizer and dynamic loss scaling included) and
``@main_init``, its initial state. This module compiles it with
``iree-compile`` and runs it with ``iree.runtime``: each step's updated state
(``amp.updates = NAME`` results) becomes the next step's argument of that
name, batches of the data's arrays are fed in order as ``./train`` feeds
them, and one JSON object per step is written (step, loss, loss_scale,
found_inf, skipped_total, step_time_s).

    python -m amp_mlir.iree_train step.mlir --data d.npz --steps 100 --metrics m.jsonl

    from amp_mlir import iree_train
    run = iree_train.IreeTraining("step.mlir")        # compiles (llvm-cpu, this CPU)
    rows = run.train("d.npz", steps=100)
    run.state()["fc1.weight"]                         # numpy arrays by name
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from . import attrnames

# IREE on the CPU: this machine's instructions, and doubles kept (the step
# sums in f64 where our runtime does; IREE demotes f64 to f32 by default).
CPU_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"]

_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i64": np.int64,
           "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_}


def _tensor_type(t) -> tuple[tuple[int, ...], str]:
    from iree.compiler import ir
    rt = ir.RankedTensorType(t)
    return tuple(rt.shape), str(rt.element_type)


class Signature:
    """Roles and names of the step's arguments and results (amp.param,
    amp.input, amp.opt_state / amp.updates, amp.output), read from the MLIR."""

    def __init__(self, text: str, func: str = "main"):
        from iree.compiler import ir
        with ir.Context() as ctx:
            ctx.allow_unregistered_dialects = True
            module = ir.Module.parse(text)
            fn = init = None
            for op in module.body.operations:
                if op.operation.name != "func.func":
                    continue
                name = ir.StringAttr(op.attributes["sym_name"]).value
                if name == func:
                    fn = op
                elif name == func + "_init":
                    init = op
            if fn is None:
                raise ValueError(f"no function @{func} in the step")
            ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
            self.args = [self._entry(fn, "arg_attrs", i, t) for i, t in enumerate(ftype.inputs)]
            self.results = [self._entry(fn, "res_attrs", i, t)
                            for i, t in enumerate(ftype.results)]
            self.init_args = []
            if init is not None:
                itype = ir.FunctionType(ir.TypeAttr(init.attributes["function_type"]).value)
                for i in range(len(itype.results)):
                    d = self._attrs(init, "res_attrs", i)
                    if attrnames.ARG not in d:
                        raise ValueError(f"@{func}_init result {i} has no {attrnames.ARG}")
                    self.init_args.append(int(d[attrnames.ARG]))
        self.func = func
        self.has_init = init is not None

    @staticmethod
    def _attrs(fn, key, i) -> dict:
        from iree.compiler import ir
        if key not in fn.attributes:
            return {}
        d = ir.DictAttr(ir.ArrayAttr(fn.attributes[key])[i])
        out = {}
        for na in d:
            a = na.attr
            if isinstance(a, ir.StringAttr):
                out[na.name] = a.value
            elif isinstance(a, ir.IntegerAttr):
                out[na.name] = a.value
        return out

    def _entry(self, fn, key, i, t) -> dict:
        shape, elt = _tensor_type(t)
        d = self._attrs(fn, key, i)
        role, name = "other", None
        for r, attr in (("param", attrnames.PARAM), ("input", attrnames.INPUT),
                        ("opt_state", attrnames.OPT_STATE), ("updates", attrnames.UPDATES),
                        ("output", attrnames.OUTPUT)):
            if attr in d:
                role, name = r, d[attr]
                break
        if elt not in _DTYPES:
            raise ValueError(f"unsupported element type {elt} at {key} {i}")
        return {"role": role, "name": name, "shape": shape, "dtype": _DTYPES[elt]}


class IreeTraining:
    """A training step compiled by IREE, with its state between calls."""

    def __init__(self, step_mlir: str, *, func: str = "main", vmfb: str | None = None,
                 driver: str = "local-task", extra_flags: list[str] | None = None):
        import iree.compiler.tools as ic
        import iree.runtime as rt
        with open(step_mlir) as f:
            text = f.read()
        self.sig = Signature(text, func)
        if not self.sig.has_init:
            raise ValueError(f"{step_mlir} has no @{func}_init (write it with amp-compile "
                             "--emit linalg, or amp-opt --amp-lower-to-linalg)")
        flags = CPU_FLAGS if driver.startswith("local") else []
        out = vmfb or os.path.join(tempfile.mkdtemp(prefix="amp-iree-"), "step.vmfb")
        t0 = time.perf_counter()
        ic.compile_file(step_mlir, output_file=out, extra_args=flags + list(extra_flags or []))
        self.compile_s = time.perf_counter() - t0
        self.config = rt.Config(driver)
        self.ctx = rt.SystemContext(config=self.config)
        self.ctx.add_vm_module(rt.VmModule.mmap(self.config.vm_instance, out))
        self.module = self.ctx.modules.module
        self._step = self.module[func]
        init = self.module[func + "_init"]()
        init = init if isinstance(init, (list, tuple)) else [init]
        self.values = {}  # argument index -> device array (state)
        for i, v in zip(self.sig.init_args, init):
            self.values[i] = v
        # Results that update an argument: amp.updates NAME -> the argument of NAME.
        by_name = {a["name"]: i for i, a in enumerate(self.sig.args)
                   if a["role"] in ("param", "opt_state", "buffer")}
        self.updates = {}
        for j, r in enumerate(self.sig.results):
            if r["role"] == "updates":
                if r["name"] not in by_name:
                    raise ValueError(f"result {j} updates '{r['name']}', which no argument is")
                self.updates[j] = by_name[r["name"]]
        self.outputs = {r["name"]: j for j, r in enumerate(self.sig.results) if r["role"] == "output"}
        self.inputs = {a["name"]: i for i, a in enumerate(self.sig.args) if a["role"] == "input"}
        missing = [a["name"] for i, a in enumerate(self.sig.args)
                   if a["role"] != "input" and i not in self.values]
        if missing:
            raise ValueError(f"no initial value for {missing}")

    def step(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One step on `batch` (arrays named like the inputs); returns the
        outputs (loss, loss_scale, found_inf, ...) as numpy arrays."""
        args = []
        for i, a in enumerate(self.sig.args):
            if a["role"] == "input":
                v = np.ascontiguousarray(batch[a["name"]], dtype=a["dtype"])
                if v.shape != a["shape"]:
                    raise ValueError(f"input '{a['name']}' has shape {v.shape}, the step takes "
                                     f"{a['shape']}")
                args.append(v)
            else:
                args.append(self.values[i])
        res = self._step(*args)
        res = res if isinstance(res, (list, tuple)) else [res]
        for j, i in self.updates.items():
            self.values[i] = res[j]
        return {name: np.asarray(res[j].to_host()) for name, j in self.outputs.items()}

    def state(self) -> dict[str, np.ndarray]:
        """The current state by name (parameters, optimizer state, scale)."""
        return {self.sig.args[i]["name"]: np.asarray(v.to_host()) for i, v in self.values.items()}

    def train(self, data: str | dict, steps: int, *, metrics: str | None = None,
              print_every: int = 0) -> list[dict]:
        """`./train`'s loop: full batches of the inputs' batch size in order
        (starting again after the last), one metrics dict per step."""
        arrays = dict(np.load(data)) if isinstance(data, str) else dict(data)
        batch = None
        for name, i in self.inputs.items():
            if name not in arrays:
                raise ValueError(f"the data has no array '{name}' (it has {sorted(arrays)})")
            b = self.sig.args[i]["shape"][0] if self.sig.args[i]["shape"] else 1
            n = arrays[name].shape[0] // b
            if n == 0:
                raise ValueError(f"'{name}' has {arrays[name].shape[0]} rows, fewer than a "
                                 f"batch of {b}")
            batch = n if batch is None else min(batch, n)
        rows, skipped = [], 0
        out = open(metrics + ".tmp", "w") if metrics else None
        try:
            for s in range(steps):
                k = s % batch
                feed = {}
                for name, i in self.inputs.items():
                    b = self.sig.args[i]["shape"][0]
                    feed[name] = arrays[name][k * b:(k + 1) * b]
                t0 = time.perf_counter()
                o = self.step(feed)
                dt = time.perf_counter() - t0
                found = int(bool(o["found_inf"])) if "found_inf" in o else 0
                skipped += found
                row = {"step": s + 1, "loss": float(o["loss"]),
                       "loss_scale": float(o["loss_scale"]) if "loss_scale" in o else 1.0,
                       "found_inf": found, "skipped_total": skipped, "step_time_s": dt}
                rows.append(row)
                if out:
                    out.write(json.dumps(row) + "\n")
                if print_every and ((s + 1) % print_every == 0 or s + 1 == steps):
                    print(f"step {s + 1}/{steps}  loss {row['loss']:.4f}  scale "
                          f"{row['loss_scale']:g}  skipped {skipped}  {dt * 1e3:.1f} ms/step",
                          flush=True)
        finally:
            if out:
                out.close()
        if metrics:
            os.replace(metrics + ".tmp", metrics)
        return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", help="the step in linalg (amp-compile --emit linalg)")
    ap.add_argument("--data", required=True, help=".npz with the inputs' arrays")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--metrics", help="JSONL file, one line per step")
    ap.add_argument("--print-every", type=int, default=0)
    ap.add_argument("--func", default="main")
    ap.add_argument("--vmfb", help="keep IREE's compiled module here")
    ap.add_argument("--outputs", help=".npz of the final state")
    args = ap.parse_args(argv)
    try:
        run = IreeTraining(args.step, func=args.func, vmfb=args.vmfb)
        run.train(args.data, args.steps, metrics=args.metrics, print_every=args.print_every)
        if args.outputs:
            np.savez(args.outputs, **run.state())
    except (ValueError, OSError, RuntimeError) as e:
        print(f"iree_train: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - iree-compile's CompilerToolError: its diagnostics
        if type(e).__name__ != "CompilerToolError":
            raise
        text = str(e)
        diags = [l for l in text.splitlines() if "error:" in l][:10]
        print(f"iree_train: error: iree-compile failed on {args.step}:\n" +
              ("\n".join(diags) if diags else text[:2000]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
