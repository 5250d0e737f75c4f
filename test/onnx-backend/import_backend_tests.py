"""Imports every ONNX backend test model that Debian's libonnx-testdata ships.

    python import_backend_tests.py AMP_TRANSLATE [--data DIR] [--report FILE]

A model is "supported" when all its ops and element types are in the amp
dialect. Every supported model must import; the rest must be refused with
an "unsupported op" or "unsupported element type" message (never a crash,
never another error). Graph inputs that the model reads as shapes or axes
(Reshape's shape, Slice's bounds, ...) are bound to the test's own input
data with --const-input, as a user specialising the model would.

Prints "imported N, unsupported M" per folder, the unsupported ops by count,
and exits 1 on any other outcome.
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import tempfile
import sys

import onnx

DEFAULT_DATA = "/usr/share/libonnx-testdata/data"
FOLDERS = ["node", "simple", "pytorch-converted", "pytorch-operator"]
CONST_RE = re.compile(r"input \d+ \('[^']+' = '([^']+)'\) must be a constant")
OP_RE = re.compile(r"unsupported op ([A-Za-z_]\w*(?:\.\w+)+)")
VERSION_RE = re.compile(r"unsupported op version: (\w+) is supported from opset (\d+)")
# Dims only known at run time (a dim_param where the op needs a size): the
# importer takes static shapes.
SHAPE_RE = re.compile(r"must have a static size|only known at run time|needs a static shape")
TYPE_RE = re.compile(r"has element type (\w+), which amp does not support|is not a tensor \(sequences")


def graph_inputs(model_path):
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def run_batch(tool, jobs, tmp, tag="job"):
    """Runs each job (a list of arguments) through one `tool --batch` (a
    forked child per job: the libraries' start-up paid once); returns
    [(exit status, messages)] in the jobs' order."""
    batch = os.path.join(tmp, f"{tag}.tsv")
    logs = [os.path.join(tmp, f"{tag}{i}.log") for i in range(len(jobs))]
    with open(batch, "w") as f:
        for log, job in zip(logs, jobs):
            f.write("\t".join([log] + job) + "\n")
    b = subprocess.run([tool, "--batch", batch, "--batch-timeout", "120"],
                       capture_output=True, text=True, errors="replace")
    status = dict(map(int, line.split()) for line in b.stdout.split("\n") if line.strip())
    if b.returncode != 0 or sorted(status) != list(range(1, len(jobs) + 1)):
        raise RuntimeError(f"{tool} --batch failed (exit {b.returncode}, {len(status)} of "
                           f"{len(jobs)} jobs reported): {b.stderr.strip()[-600:]}")
    return [(status[i + 1], open(log, errors="replace").read()) for i, log in enumerate(logs)]


def import_one(tool, test_dir, first=None):
    """Returns (status, detail, bound) with status in imported / op / type / fail.
    first: the outcome (returncode, stderr) of the first import (no input
    bound), when it was run already (a batch)."""
    model = os.path.join(test_dir, "model.onnx")
    bound = {}
    for _ in range(6):  # each retry binds the inputs the last run asked for
        if first is not None and not bound:
            p = subprocess.CompletedProcess([], first[0], "", first[1])
        else:
            args = [tool, "--import-onnx", model, "-o", os.devnull]
            for name, pb in bound.items():
                args += ["--const-input", f"{name}={pb}"]
            p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=120)
        if p.returncode < 0:
            return "fail", f"killed by signal {-p.returncode}", bound
        if p.returncode == 0:
            return "imported", "", bound
        if p.returncode != 1:
            return "fail", f"exit code {p.returncode}: {p.stderr.strip()[:300]}", bound
        ops = sorted(set(OP_RE.findall(p.stderr)) |
                     {f"{op} (opset < {v})" for op, v in VERSION_RE.findall(p.stderr)})
        if ops:
            return "op", ops, bound
        if TYPE_RE.search(p.stderr):
            types = sorted(set(t for t in TYPE_RE.findall(p.stderr) if t)) or ["non-tensor"]
            return "type", types, bound
        wanted = set(CONST_RE.findall(p.stderr))
        if not wanted and SHAPE_RE.search(p.stderr):
            return "shape", ["dynamic"], bound
        inputs = graph_inputs(model)
        new = {n for n in wanted if n in inputs and n not in bound}
        if not new:
            return "fail", p.stderr.strip()[:600], bound
        for n in new:
            pb = os.path.join(test_dir, "test_data_set_0", f"input_{inputs.index(n)}.pb")
            if not os.path.exists(pb):
                return "fail", f"needs input '{n}' bound but {pb} is missing", bound
            bound[n] = pb
    return "fail", "too many rounds of --const-input", bound


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--report", help="write per-test results as JSON")
    args = ap.parse_args()
    if not os.path.isdir(args.data):
        print(f"error: {args.data} not found (Debian package libonnx-testdata)")
        return 1

    report, failures = {}, []
    total = collections.Counter()
    by_op, by_type = collections.Counter(), collections.Counter()
    # The first import of every model through one `amp-translate --batch`
    # (a forked child per model: the libraries' start-up paid once).
    dirs = [d for folder in FOLDERS for d in sorted(glob.glob(os.path.join(args.data, folder, "*")))
            if os.path.exists(os.path.join(d, "model.onnx"))]
    with tempfile.TemporaryDirectory() as tmp:
        first = dict(zip(dirs, run_batch(args.tool, [["--import-onnx", os.path.join(d, "model.onnx"),
                                                       "-o", os.devnull] for d in dirs], tmp)))
    for folder in FOLDERS:
        counts = collections.Counter()
        for d in sorted(glob.glob(os.path.join(args.data, folder, "*"))):
            if not os.path.exists(os.path.join(d, "model.onnx")):
                continue
            status, detail, bound = import_one(args.tool, d, first[d])
            name = f"{folder}/{os.path.basename(d)}"
            report[name] = {"status": status, "detail": detail, "bound": sorted(bound)}
            counts[status] += 1
            if status == "op":
                by_op.update(detail)
            elif status == "type":
                by_type.update(detail)
            elif status == "fail":
                failures.append((name, detail))
        unsupported = counts["op"] + counts["type"] + counts["shape"]
        print(f"{folder}: imported {counts['imported']}, unsupported {unsupported} "
              f"({counts['op']} by op, {counts['type']} by element type, {counts['shape']} by "
              f"dynamic shape), failed {counts['fail']}")
        total.update(counts)
    print(f"all: imported {total['imported']}, "
          f"unsupported {total['op'] + total['type'] + total['shape']}, "
          f"failed {total['fail']}")
    print("unsupported ops (models needing them): " +
          ", ".join(f"{op} {n}" for op, n in by_op.most_common()))
    print("unsupported element types: " + ", ".join(f"{t} {n}" for t, n in by_type.most_common()))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    for name, detail in failures:
        print(f"FAIL {name}: {detail}")
    print(f"{total['imported'] + total['op'] + total['type'] + total['shape']} passed, "
          f"{total['fail']} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
