"""Import time and peak memory of amp-translate against model size.

    python bench/import_scaling.py [--tool build/bin/amp-translate] [--sizes 1,10,100]

Writes MLPs whose weights total about SIZE MB (float32 initializers in
raw_data, as exporters write them), imports each one (printing with weights
elided, so that the text printer does not dominate), and reports wall time,
peak resident memory and peak memory / file size. Reading once means the
ratio stays flat as the model grows.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import results  # bench/results.py: the table into docs/results.md

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path, megabytes):
    width = 512
    layers = max(1, round(megabytes * 1e6 / (width * width * 4)))
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((width, width), dtype=np.float32)
        inits.append(numpy_helper.from_array(w, f"l{i}.weight"))
        nodes.append(helper.make_node("Gemm", [x, f"l{i}.weight"], [f"h{i}"], name=f"/l{i}/Gemm", transB=1))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"a{i}"], name=f"/l{i}/Relu"))
        x = f"a{i}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [8, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return os.path.getsize(path)


def measure(tool, path):
    """Runs the import in a child (through this script's --child mode) so
    that ru_maxrss is that one process's peak."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--child", tool, path], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"import failed: {p.stderr}")
    peak_kb, import_s = p.stdout.split()
    return float(import_s), int(peak_kb) * 1024, wall


def child(tool, path):
    t0 = time.perf_counter()
    p = subprocess.run([tool, "--import-onnx", path, "-o", os.devnull,
                        "--mlir-elide-resource-strings-if-larger=16"], stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if p.returncode:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        sys.exit(1)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, dt)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", default=os.path.join(here, "..", "build", "bin", "amp-translate"))
    ap.add_argument("--sizes", default="1,10,100", help="model sizes in MB")
    results.add_args(ap)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in [0.001] + [float(s) for s in args.sizes.split(",")]:
            path = os.path.join(tmp, f"m{mb:g}.onnx")
            size = make_model(path, mb)
            best = min((measure(args.tool, path) for _ in range(3)), key=lambda r: r[0])
            rows.append((size, *best))
            os.remove(path)
    base = rows.pop(0)[2]  # a 1 MB-weight model: the libraries' own footprint
    print(f"baseline peak RSS (smallest model): {base / 1e6:.1f} MB")
    print(f"{'model MB':>9} {'import s':>9} {'MB/s':>7} {'peak RSS MB':>12} {'(peak-base)/size':>17}")
    for size, secs, peak, _ in rows:
        print(f"{size / 1e6:9.1f} {secs:9.3f} {size / 1e6 / secs:7.0f} {peak / 1e6:12.1f} "
              f"{(peak - base) / size:17.2f}")
    results.record(
        args, "Import time and peak memory against model size (amp-translate --import-onnx)",
        ["model MB", "import s", "MB/s", "peak RSS MB", "(peak - base) / size"],
        [(f"{size / 1e6:.1f}", f"{secs:.3f}", f"{size / 1e6 / secs:.0f}", f"{peak / 1e6:.1f}",
          f"{(peak - base) / size:.2f}") for size, secs, peak, _ in rows],
        [f"Baseline peak RSS (the smallest model): {base / 1e6:.1f} MB."])


if __name__ == "__main__":
    main()
