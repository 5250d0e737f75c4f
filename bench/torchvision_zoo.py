#!/usr/bin/env python3
"""torchvision's models trained through amp_mlir.torch_bridge.fit against
PyTorch on the CPU: does each one import, compile and train, are its
gradients right, and how fast is its training step.

    make bench-deps        # once: onnxruntime, TVM and torchvision (--no-deps)
    .venv/bin/python bench/torchvision_zoo.py [--models resnet18,vit] [--steps 12]
                                               [--batch 8] [--size 64] [--rounds 5]

For each model (dropout and stochastic depth off, so that both sides run
the same function; 10 classes; random images of --size pixels):

1. Gradients: one SGD step (lr 0.1) by fit in fp32, and by PyTorch in fp32
   and in float64; the error of each fp32 update against float64's, as a
   fraction of the largest update. Ours should be of the order of PyTorch's
   own fp32 error (a parameter whose exact gradient is zero, such as a batch
   norm's bias feeding a 1x1 convolution and another batch norm, gets
   rounding noise on both sides), or of PyTorch's from the same weights
   moved by an ulp where the batch sits near a tie (a ReLU input or a
   max-pool window that the rounding sends either way: see gradient_check).
2. Step time: the median over the steps after the first three of `./train`'s
   own per-step time (forward, backward, update; the batch feed excluded),
   against PyTorch's eager step (zero_grad, forward, backward, SGD step), in
   fp32 and bf16 (PyTorch under torch.autocast("cpu", bfloat16)), measured in
   the same run on the same machine: --rounds rounds (5), each running the
   four configurations in turn (our programs compiled once; odd rounds in
   the reverse order), each step time the median of its rounds. A ratio
   (bf16 over fp32, PyTorch over ours) is the median of the rounds' own
   ratios: the two steps of a ratio ran seconds apart in the same round, so
   a burst of load on a shared machine moves both, where the medians of
   separate rounds can come from different loads.
3. bf16 against fp32: our bf16 step's speed-up over our fp32 step, and
   PyTorch's autocast bf16 step's over its fp32 step; and, from a profiled
   bf16 run (AMPRT_PROFILE, the same steps), the share of the step spent in
   oneDNN's bf16 kernels and in its AMX ones (the implementation each call
   ran, e.g. brg:avx512_core_amx; jit:avx512_core_bf16 is AVX512-BF16).
   The run says whether the CPU has AMX.

Prints one line per model as it goes and a table last.
"""

import argparse
import copy
import os
import statistics
import sys
import time

import results  # bench/results.py: the table into docs/results.md
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from amp_mlir import torch_bridge, train  # noqa: E402

warnings.filterwarnings("ignore")


def models(size):
    import torchvision.models as tv
    vit = dict(image_size=size, patch_size=size // 4, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=256)
    return {
        "resnet18": lambda: tv.resnet18(num_classes=10),
        "resnet50": lambda: tv.resnet50(num_classes=10),
        "mobilenet_v2": lambda: tv.mobilenet_v2(num_classes=10),
        "shufflenet_v2_x0_5": lambda: tv.shufflenet_v2_x0_5(num_classes=10),
        "squeezenet1_1": lambda: tv.squeezenet1_1(num_classes=10),
        "efficientnet_b0": lambda: tv.efficientnet_b0(num_classes=10),
        "regnet_y_400mf": lambda: tv.regnet_y_400mf(num_classes=10),
        "densenet121": lambda: tv.densenet121(num_classes=10),
        "vit (4 layers, 128 wide)": lambda: tv.VisionTransformer(num_classes=10, **vit),
        "convnext_tiny": lambda: tv.convnext_tiny(num_classes=10),
        "swin_t": lambda: tv.swin_t(num_classes=10),
    }


def no_dropout(net):
    for m in net.modules():
        if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return net


def largest_diff(a, b):
    return max(float((p.detach().double() - q.detach().double()).abs().max())
               for p, q in zip(a.parameters(), b.parameters()))


def moved_by_an_ulp(net, seed):
    """A copy of net with each f32 weight moved up or down by one ulp (random signs)."""
    moved = copy.deepcopy(net)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for q in moved.parameters():
            if q.dtype == torch.float32:
                sign = torch.randint(0, 2, q.shape, generator=gen).to(q.dtype) * 2 - 1
                q.mul_(1 + sign * torch.finfo(torch.float32).eps)
    return moved


WOBBLES = 3


def gradient_check(make, x, y, lr=0.1):
    """Update errors against float64 (fractions of the largest update): ours,
    PyTorch fp32's, and the largest of PyTorch fp32's from the weights moved
    by an ulp (WOBBLES draws): where a ReLU input or a max-pool window sits
    near a tie, a rounding of the order of an ulp sends it the other way and
    moves a gradient element by its full size, and the update error of a
    correct fp32 step ranges up to that (densenet121 on this batch: PyTorch
    1.6e-3, and 2.3e-2 from weights moved by an ulp; ours 1.6e-3, 2.2e-3 or
    2.2e-2 depending on which kernel the per-shape choice timed fastest, the
    same sums in another order)."""
    net = no_dropout(make())
    start, r32, r64 = copy.deepcopy(net), copy.deepcopy(net), copy.deepcopy(net).double()
    torch_bridge.fit(net, {"input": x}, steps=1, batch=x.shape[0], loss_fn="cross_entropy", labels=y, lr=lr)
    moved = [moved_by_an_ulp(start, 99 + k) for k in range(WOBBLES)]
    for m, xx in [(r32, x), (r64, x.double())] + [(m, x) for m in moved]:
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        opt.zero_grad()
        F.cross_entropy(m(xx), y).backward()
        opt.step()
    big = largest_diff(r64, start)
    return (largest_diff(net, r64) / big, largest_diff(r32, r64) / big,
            max(largest_diff(m, r64) for m in moved) / big)


def our_step(make, x, y, steps, precision, workdir=None):
    """Our median step, compiled by fit (into workdir when given, where
    our_rerun runs the program again)."""
    net = no_dropout(make())
    rows = torch_bridge.fit(net, {"input": x}, steps=steps, batch=x.shape[0], loss_fn="cross_entropy", labels=y,
                            lr=0.01, precision=precision, workdir=workdir)
    return statistics.median(r["step_time_s"] for r in rows[3:])


def our_rerun(workdir, steps):
    """The median step of the program our_step compiled into workdir, run again (from its initial weights)."""
    rows = train.run_training(os.path.join(workdir, "train"), os.path.join(workdir, "data.npz"), steps)
    return statistics.median(r["step_time_s"] for r in rows[3:])


def step_times(make, x, y, steps, rounds):
    """Per round, (ours fp32, PyTorch fp32, ours bf16, PyTorch bf16) median step times: each round measures
    the four in turn (in reverse order on odd rounds, so that a load that rises or falls through a round
    does not favour one side), so that a burst of load on a shared machine falls on the configurations
    of a round alike instead of on one of them."""
    import tempfile
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            times = {}
            for i in (range(4) if r % 2 == 0 else reversed(range(4))):
                p = ("fp32", "bf16")[i // 2]
                wd = os.path.join(tmp, p)
                if i % 2:
                    times[i] = torch_step(make, x, y, steps, p)
                else:
                    times[i] = our_step(make, x, y, steps, p, wd) if r == 0 else our_rerun(wd, steps)
            got.append([times[i] for i in range(4)])
    return got


def summary(rounds):
    """The median of each configuration's rounds, and the ratios (our bf16 speed-up over our fp32,
    PyTorch's, PyTorch fp32 / ours, PyTorch bf16 / ours) as the median of the rounds' own ratios: the
    configurations of one round ran within seconds of each other, under the same load."""
    med = [statistics.median(r[i] for r in rounds) for i in range(4)]
    ratios = [statistics.median(r[a] / r[b] for r in rounds) for a, b in ((0, 2), (1, 3), (1, 0), (3, 2))]
    return med, ratios


def kernel_share(make, x, y, steps):
    """(bf16 kernels' share, AMX kernels' share) of a profiled bf16 run."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "profile.txt")
        saved = {k: os.environ.get(k) for k in ("AMPRT_PROFILE", "AMPRT_PROFILE_OUT")}
        os.environ.update(AMPRT_PROFILE="1", AMPRT_PROFILE_OUT=out)
        try:
            our_step(make, x, y, steps, "bf16")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        low = amx = 0.0
        section = False
        with open(out) as f:
            for line in f:
                if line.startswith("amprt profile"):
                    section = "by kernel implementation" in line
                    continue
                if section and line.strip():
                    pct, impl = float(line.split("%")[0]), line.split("calls", 1)[1].strip()
                    if "amx" in impl or "bf16" in impl:
                        low += pct
                    if "amx" in impl:
                        amx += pct
        return low, amx


def torch_step(make, x, y, steps, precision):
    net = no_dropout(make())
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return statistics.median(times[3:])


def has_flag(flag):
    try:
        with open("/proc/cpuinfo") as f:
            return any(flag in line.split() for line in f if line.startswith("flags"))
    except OSError:
        return False


def has_amx():
    return has_flag("amx_bf16")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5,
                    help="times each configuration's steps are measured, in turn with the others (median)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    results.add_args(ap)
    a = ap.parse_args()
    try:
        zoo = models(a.size)
    except ImportError:
        sys.exit("torchvision_zoo: torchvision is not installed (make bench-deps)")
    names = [n for n in zoo if not a.models or n.split(" ")[0] in a.models.split(",")]
    if a.models and not names:
        sys.exit(f"torchvision_zoo: no model among {a.models}; known: {', '.join(n.split(' ')[0] for n in zoo)}")
    torch.manual_seed(0)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))
    print(f"AMX-BF16: {'yes' if has_amx() else 'no'}; AVX512-BF16: "
          f"{'yes' if has_flag('avx512_bf16') else 'no'}", flush=True)
    rows = []
    for name in names:
        t0 = time.time()
        try:
            ours_err, torch_err, wobbled_err = gradient_check(zoo[name], x, y)
            times, ratios = summary(step_times(zoo[name], x, y, a.steps, a.rounds))
            share = kernel_share(zoo[name], x, y, a.steps)
        except Exception as e:  # one model's failure is a row, not the end of the run
            print(f"FAIL  {name}: {str(e).strip()[-400:]}", flush=True)
            rows.append((name, None))
            continue
        rows.append((name, (ours_err, torch_err, wobbled_err, *times, *ratios, *share)))
        print(f"{name}: update error vs float64 ours {ours_err:.1e} / PyTorch fp32 {torch_err:.1e} "
              f"(from weights moved by an ulp: up to {wobbled_err:.1e}); step ms "
              f"fp32 ours {times[0] * 1e3:.1f} PyTorch {times[1] * 1e3:.1f}, bf16 ours {times[2] * 1e3:.1f} "
              f"PyTorch {times[3] * 1e3:.1f}; bf16 over fp32 ours {ratios[0]:.2f}x PyTorch {ratios[1]:.2f}x, "
              f"PyTorch bf16 / ours {ratios[3]:.2f}x; bf16 kernels {share[0]:.0f}% of the bf16 step "
              f"(AMX {share[1]:.0f}%) ({time.time() - t0:.0f} s)", flush=True)
    table = []
    for name, r in rows:
        if r is None:
            table.append((name, "FAILED", "", "", "", "", "", "", "", "", "", "", ""))
            continue
        oe, te, we, o32, t32, o16, t16, up, tup, r32, r16, low, amx = r
        table.append((name, f"{oe:.1e}", f"{te:.1e}", f"{we:.1e}", f"{o32 * 1e3:.1f}", f"{t32 * 1e3:.1f}",
                      f"{r32:.2f}x", f"{o16 * 1e3:.1f}", f"{t16 * 1e3:.1f}", f"{r16:.2f}x",
                      f"{up:.2f}x", f"{tup:.2f}x", f"{low:.0f}% ({amx:.0f}%)"))
    results.record(
        a, f"torchvision models trained against PyTorch (batch {a.batch} x 3 x {a.size} x {a.size}, "
        f"10 classes, SGD, {torch.get_num_threads()} threads)",
        ["model", "update error vs float64: ours", "PyTorch fp32",
         f"PyTorch fp32, weights moved by an ulp (largest of {WOBBLES})", "fp32 ms/step: ours", "PyTorch",
         "PyTorch / ours", "bf16 ms/step: ours", "PyTorch autocast", "PyTorch / ours",
         "bf16 speed-up over fp32: ours", "PyTorch", "bf16 kernels' share of our bf16 step (AMX)"],
        table, [f"AMX: {'yes' if has_amx() else 'no'} on this CPU (the bf16 kernels are "
                f"{'AMX ones' if has_amx() else 'AVX512-BF16 ones' if has_flag('avx512_bf16') else 'f32 ones on widened copies'}); "
                f"the share counts the implementations oneDNN reported for each call of a "
                f"profiled bf16 run of the same steps (the first step's primitive creation included)."])
    return 1 if any(r is None for _, r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
