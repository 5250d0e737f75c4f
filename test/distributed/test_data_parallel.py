#!/usr/bin/env python3
"""Data-parallel training (amp-compile --data-parallel) under OpenMPI's
mpirun, local ranks on one machine, against one process with the whole
batch:

  * N ranks (2 and 4) with batch B each train to the parameters one process
    with batch N x B reaches (fp32 SGD with momentum: within 1e-5 of the
    largest update, the ranks' summation order differs from one matrix
    product's), every rank's parameters bit-identical, the job's losses (the
    mean of the ranks') those of the single process;
  * --grad-comm bf16 / fp16 (gradients travel in 2 bytes): within the
    format's rounding of the f32 all-reduce, bit-identical on every rank;
  * fp16 with an initial loss scale that overflows: the same steps skipped
    and the scale halved once per overflow as in the single process, on
    every rank (the parameters stay bit-identical);
  * the CUDA executor's all-reduce on the emulated device (a program linked
    with the NCCL back-end; the sums are MPI's there): 2 ranks against one
    process, --grad-comm bf16 on that path too;
  * resume after kill -9 of the whole job continues bit-exactly (the
    parameters equal those of a run never interrupted);
  * a rank given bad data (its own file, --data d{rank}.npz) ends the job
    with the message on every rank within seconds; a rank failing in a
    step ends the job within seconds with its message; ranks given different
    data (a signature mismatch) are refused, not hung.

Fresh random data and weights each run (AMP_TEST_SEED repeats one).

    python test_data_parallel.py AMP_COMPILE
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from amp_mlir import examples  # noqa: E402

compile_tool = sys.argv[1]
SEED = int(os.environ.get("AMP_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
rng = np.random.default_rng(SEED)
MPIRUN = shutil.which("mpirun")
passed = failed = 0


def check(cond, msg):
    global passed, failed
    print(("ok    " if cond else "FAIL  ") + msg, flush=True)
    if cond:
        passed += 1
    else:
        failed += 1


def mpirun(n, argv, timeout=120, extra_env=None, **kw):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + argv
    env = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_plm="isolated",
               OMP_NUM_THREADS="1", AMPRT_ADAPT_THREADS="0", **(extra_env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def params(path):
    z = np.load(path)
    return {k: z[k] for k in z.files
            if k in ("new:fc1.weight", "new:fc1.bias", "new:fc2.weight", "new:fc2.bias")}


def update_difference(got, ref, moved, what, kinks=2):
    """The largest difference between two runs' MLP parameters (params()),
    with the `kinks` hidden units that differ most left out: a ReLU input
    within rounding of 0 switches on one side and off on the other, which
    changes that unit's row of fc1 and its bias by up to a few percent of
    the largest update (seed 11: unit 72, 2.7e-2, every other element
    within 3.4e-4), and nothing else much. A wrong kernel or sum would not
    confine itself to two units. The units left out are named when they
    differ by ten times the rest or more. Relative to `moved` (the largest
    update)."""
    d = {k: np.abs(got[k].astype(np.float64) - ref[k]) / max(moved, 1e-30) for k in ref}
    per_unit = np.maximum.reduce([d["new:fc1.weight"].max(axis=1), d["new:fc1.bias"],
                                  d["new:fc2.weight"].max(axis=0)])
    dropped = np.argsort(per_unit)[-kinks:] if kinks else np.array([], dtype=int)
    keep = np.ones(per_unit.shape[0], dtype=bool)
    keep[dropped] = False
    rest = max(float(d["new:fc1.weight"][keep].max()), float(d["new:fc1.bias"][keep].max()),
               float(d["new:fc2.weight"][:, keep].max()), float(d["new:fc2.bias"].max()))
    if kinks and per_unit[dropped].max() >= 10 * rest:
        print(f"note  {what}: hidden units {sorted(dropped.tolist())} left out (differences "
              f"{', '.join(f'{v:.1e}' for v in per_unit[dropped])}, the rest {rest:.1e})")
    return rest


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    if MPIRUN is None:
        print("FAIL mpirun is missing: scripts/setup.sh installs openmpi-bin and libopenmpi-dev")
        sys.exit(1)
    print(f"seed {SEED}")
    B = 8
    with tempfile.TemporaryDirectory() as d:
        for n in (2, 4):
            for precision in ("fp32", "fp16"):
                seed = int(rng.integers(1 << 30))
                state = np.random.default_rng(seed)
                dp = f"{d}/dp{n}{precision}"
                # the same weights: both programs from one seed
                m1 = examples.mlp(batch=B, seed=seed)
                m2 = examples.mlp(batch=n * B, seed=seed)
                onnx.save(m1, f"{d}/a.onnx")
                onnx.save(m2, f"{d}/b.onnx")
                common = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                          "--precision", precision]
                        # fp16 from a scale that overflows nowhere (256): the job's
                # and the single process's steps agree to fp16 rounding.
                # (Where a scale overflows is not the same: a rank's weight
                # gradients sum B rows, the single process's N x B.)
                scale = [] if precision == "fp32" else ["--init-scale", "256"]
                subprocess.run([compile_tool, f"{d}/a.onnx", "-o", dp] + common + scale +
                               ["--data-parallel"], check=True, capture_output=True)
                one = f"{d}/one{n}{precision}"
                subprocess.run([compile_tool, f"{d}/b.onnx", "-o", one] + common + scale,
                               check=True, capture_output=True)
                rows = 3 * n * B
                x = state.standard_normal((rows, 64)).astype(np.float32)
                y = state.integers(0, 10, rows).astype(np.int64)
                np.savez(f"{d}/data.npz", input=x, labels=y)
                steps = 6 if precision == "fp32" else 10
                r = mpirun(n, [dp, "--data", f"{d}/data.npz", "--steps", str(steps), "--metrics",
                               f"{d}/dp.jsonl", "--outputs", f"{d}/dp_{{rank}}.npz"])
                if r.returncode != 0:
                    check(False, f"{n} ranks {precision}: mpirun failed: {r.stderr[-2000:]}")
                    continue
                s = subprocess.run([one, "--data", f"{d}/data.npz", "--steps", str(steps),
                                    "--metrics", f"{d}/one.jsonl", "--outputs", f"{d}/one.npz"],
                                   capture_output=True, text=True)
                check(s.returncode == 0, f"one process, batch {n * B}: {s.stderr[-500:]}")
                ranks = [params(f"{d}/dp_{k}.npz") for k in range(n)]
                same = all(np.array_equal(ranks[0][k], rk[k]) for rk in ranks[1:] for k in ranks[0])
                check(same and len(ranks[0]) == 4,
                      f"{n} ranks {precision}: the ranks' parameters are bit-identical "
                      f"({sorted(ranks[0])})")
                ref = params(f"{d}/one.npz")
                init = {t.name: numpy_helper.to_array(t) for t in m2.graph.initializer}
                moved = max(float(np.abs(v - init[k[4:]]).max()) for k, v in ref.items())
                worst = update_difference(ranks[0], ref, moved, f"{n} ranks {precision}") * moved
                md, mo = metrics(f"{d}/dp.jsonl"), metrics(f"{d}/one.jsonl")
                scales_dp = [(e["loss_scale"], e["found_inf"]) for e in md]
                scales_one = [(e["loss_scale"], e["found_inf"]) for e in mo]
                rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(md, mo))
                # fp16: each rank's weight gradients are rounded to fp16
                # over B rows, the single process's over N x B.
                tol, ptol = (1e-5, 1e-5) if precision == "fp32" else (2e-3, 2e-2)
                check(len(md) == steps and scales_dp == scales_one and rel <= tol and
                      worst <= ptol * max(moved, 1e-12) and moved > 0,
                      f"{n} ranks x batch {B} vs one process x batch {n * B}, {precision}: "
                      f"parameters {worst / max(moved, 1e-30):.1e} of the largest update, losses "
                      f"{rel:.1e} (tolerances {ptol:g}, {tol:g}); loss scale / skips {scales_dp}"
)
                if precision == "fp32":
                    # --grad-comm bf16 / fp16: the gradients travel rounded
                    # (pre-divided by the ranks), so the parameters move
                    # from the f32 all-reduce's by more than the summation
                    # order, within the rounding of the half format. One
                    # step (later steps would add the model's own
                    # sensitivity: a ReLU flipped by a rounding).
                    s1 = subprocess.run([one, "--data", f"{d}/data.npz", "--steps", "1",
                                         "--outputs", f"{d}/one1.npz"], capture_output=True)
                    ref1 = params(f"{d}/one1.npz") if s1.returncode == 0 else {}
                    moved1 = max(float(np.abs(v - init[k[4:]]).max()) for k, v in ref1.items())
                    for comm, ctol in (("bf16", 2e-2), ("fp16", 3e-3)):
                        r = mpirun(n, [dp, "--data", f"{d}/data.npz", "--steps", "1",
                                       "--grad-comm", comm, "--outputs", f"{d}/gc_{{rank}}.npz"])
                        if r.returncode != 0:
                            check(False, f"{n} ranks --grad-comm {comm}: {r.stderr[-1000:]}")
                            continue
                        gc = [params(f"{d}/gc_{k}.npz") for k in range(n)]
                        off = max(float(np.abs(gc[0][k] - v).max()) for k, v in ref1.items())
                        moved = moved1
                        check(all(np.array_equal(gc[0][k], g[k]) for g in gc[1:] for k in gc[0])
                              and len(gc[0]) == 4 and 1e-4 * moved < off <= ctol * moved,
                              f"{n} ranks --grad-comm {comm}: after a step, parameters "
                              f"{off / moved:.1e} of the update from one f32 process (above the f32 order's 1e-4, "
                              f"within {ctol:g}); bit-identical on every rank")
                if precision == "fp16":
                    # From a scale that overflows: every rank's own metrics
                    # (the same skips, the same scales), halved once per
                    # overflow.
                    subprocess.run([compile_tool, f"{d}/a.onnx", "-o", dp] + common +
                                   ["--init-scale", str(2.0 ** 22), "--data-parallel"],
                                   check=True, capture_output=True)
                    # (--grad-comm fp16 on 4 ranks: the overflow caught
                    # after a 2-byte reduction too.)
                    gcomm = ["--grad-comm", "fp16"] if n == 4 else []
                    r = mpirun(n, [dp, "--data", f"{d}/data.npz", "--steps", str(steps),
                                   "--metrics", f"{d}/ov{{rank}}.jsonl", "--outputs",
                                   f"{d}/ov_{{rank}}.npz"] + gcomm)
                    if r.returncode != 0:
                        check(False, f"{n} ranks fp16 overflowing: {r.stderr[-1000:]}")
                        continue
                    per = [[(e["loss_scale"], e["found_inf"], e["skipped_total"])
                            for e in metrics(f"{d}/ov{k}.jsonl")] for k in range(n)]
                    md = metrics(f"{d}/ov0.jsonl")
                    skips = [e["found_inf"] for e in md]
                    halved = all(b["loss_scale"] == a["loss_scale"] / 2
                                 for a, b in zip(md, md[1:]) if a["found_inf"])
                    ov = [params(f"{d}/ov_{k}.npz") for k in range(n)]
                    check(all(p == per[0] for p in per[1:]) and skips[0] == 1 and
                          0 < sum(skips) < steps and halved and
                          all(np.array_equal(ov[0][k], o[k]) for o in ov[1:] for k in ov[0]),
                          f"{n} ranks fp16 from scale 2^22 {' '.join(gcomm)}: every rank skipped the same "
                          f"{sum(skips)} step(s) and halved its scale once per overflow "
                          f"({[e['loss_scale'] for e in md]}); parameters bit-identical")

        # The CUDA executor's all-reduce (pack, sum, unpack on the context's
        # stream) on the emulated device (AMPRT_CUDA_EMULATE=1: host memory,
        # the MPI back-end's sums; on a GPU the NCCL back-end's, which
        # scripts/gpu-check runs): the programs link libamprt_nccl.
        n = 2
        seed = int(rng.integers(1 << 30))
        onnx.save(examples.mlp(batch=B, seed=seed), f"{d}/ca.onnx")
        onnx.save(examples.mlp(batch=n * B, seed=seed), f"{d}/cb.onnx")
        common = ["--optimizer", "sgd", "--lr", "0.05", "--precision", "fp16", "--init-scale",
                  "256", "--device", "cuda"]
        c1 = subprocess.run([compile_tool, f"{d}/ca.onnx", "-o", f"{d}/cdp"] + common +
                            ["--data-parallel"], capture_output=True, text=True)
        c2 = subprocess.run([compile_tool, f"{d}/cb.onnx", "-o", f"{d}/cone"] + common,
                            capture_output=True, text=True)
        if c1.returncode != 0 or c2.returncode != 0:
            check(False, f"--data-parallel --device cuda: {c1.stderr[-800:]} {c2.stderr[-300:]}")
        else:
            nm = subprocess.run(["nm", f"{d}/cdp"], capture_output=True, text=True).stdout
            emu = {"AMPRT_CUDA_EMULATE": "1"}
            rows = 3 * n * B
            state = np.random.default_rng(seed)
            np.savez(f"{d}/cdata.npz", input=state.standard_normal((rows, 64)).astype(np.float32),
                     labels=state.integers(0, 10, rows).astype(np.int64))
            runs = {}
            for comm in ("f32", "bf16"):
                r = mpirun(n, [f"{d}/cdp", "--data", f"{d}/cdata.npz", "--steps", "6",
                               "--grad-comm", comm, "--outputs", f"{d}/c{comm}_{{rank}}.npz"],
                           extra_env=emu)
                runs[comm] = ([params(f"{d}/c{comm}_{k}.npz") for k in range(n)]
                              if r.returncode == 0 else None)
                if r.returncode != 0:
                    check(False, f"emulated CUDA, 2 ranks, --grad-comm {comm}: {r.stderr[-1500:]}")
            s1 = subprocess.run([f"{d}/cone", "--data", f"{d}/cdata.npz", "--steps", "6",
                                 "--outputs", f"{d}/cone.npz"], capture_output=True, text=True,
                                env=dict(os.environ, **emu))
            if runs["f32"] and runs["bf16"] and s1.returncode == 0:
                ref = params(f"{d}/cone.npz")
                init = {t.name: numpy_helper.to_array(t)
                        for t in onnx.load(f"{d}/cb.onnx").graph.initializer}
                moved = max(float(np.abs(v - init[k[4:]]).max()) for k, v in ref.items())
                rk = runs["f32"]
                worst = update_difference(rk[0], ref, moved, "emulated CUDA, 2 ranks fp16") * moved
                bf = max(float(np.abs(runs["bf16"][0][k] - rk[0][k]).max()) for k in ref)
                same = all(np.array_equal(r[0][k], r[j][k]) for r in runs.values()
                           for j in range(1, n) for k in ref)
                check("amprt_nccl_comm_init" in nm and same and len(ref) == 4 and
                      worst <= 2e-2 * moved and moved > 0 and bf > 0,
                      f"emulated CUDA, 2 ranks x batch {B} vs one process x {n * B} (fp16): "
                      f"parameters {worst / moved:.1e} of the largest update (tolerance 2e-2), "
                      f"--grad-comm bf16 moved them {bf / moved:.1e}; bit-identical on every "
                      f"rank; NCCL back-end linked")
            elif s1.returncode != 0:
                check(False, f"emulated CUDA, one process: {s1.stderr[-800:]}")

        # Resume after kill -9 of the whole job: bit-exact.
        n, total = 2, 1500
        m1 = examples.mlp(batch=B, seed=7)
        onnx.save(m1, f"{d}/r.onnx")
        prog = f"{d}/resume"
        subprocess.run([compile_tool, f"{d}/r.onnx", "-o", prog, "--optimizer", "adam", "--lr",
                        "0.01", "--precision", "fp16", "--data-parallel"], check=True,
                       capture_output=True)
        x = rng.standard_normal((4 * n * B, 64)).astype(np.float32)
        y = rng.integers(0, 10, 4 * n * B).astype(np.int64)
        np.savez(f"{d}/rd.npz", input=x, labels=y)
        straight = mpirun(n, [prog, "--data", f"{d}/rd.npz", "--steps", str(total),
                              "--outputs", f"{d}/straight.npz"])
        check(straight.returncode == 0, f"resume: the straight run: {straight.stderr[-500:]}")
        ck = f"{d}/ck"
        env = dict(os.environ, OMPI_MCA_btl="self,vader", OMP_NUM_THREADS="1",
                   AMPRT_ADAPT_THREADS="0")
        job = subprocess.Popen([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                                prog, "--data", f"{d}/rd.npz", "--steps", "1000000",
                                "--checkpoint-dir", ck, "--checkpoint-every", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                               start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline and not os.path.exists(f"{ck}/checkpoint.safetensors"):
            time.sleep(0.05)
        time.sleep(0.1)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        from safetensors import safe_open
        with safe_open(f"{ck}/checkpoint.safetensors", "np") as f:
            done = int(f.metadata()["amp.steps_done"])
        if done >= total:
            check(False, f"resume: the killed job had already done {done} steps (>= {total})")
        else:
            res = mpirun(n, [prog, "--data", f"{d}/rd.npz", "--steps", str(total),
                             "--checkpoint-dir", ck, "--resume", "--outputs",
                             f"{d}/resumed_{{rank}}.npz"])
            ok = res.returncode == 0
            if ok:
                a, b = params(f"{d}/straight.npz"), params(f"{d}/resumed_1.npz")
                ok = all(np.array_equal(a[k], b[k]) for k in a) and len(a) == 4
            check(ok, f"resume after kill -9 at step {done} of {total} (2 ranks, fp16 Adam): "
                      f"rank 1's parameters equal the uninterrupted run's bit for bit "
                      f"{res.stderr[-500:] if res.returncode else ''}")

        # A rank given bad data: a message on every rank, within seconds.
        np.savez(f"{d}/bad0.npz", input=x, labels=y)
        np.savez(f"{d}/bad1.npz", labels=y)  # rank 1's file lacks the input
        t0 = time.time()
        r = mpirun(n, [prog, "--data", f"{d}/bad{{rank}}.npz", "--steps", "5"], timeout=60)
        took = time.time() - t0
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: rank 1 of 2")]
        check(r.returncode != 0 and len(lines) == n and "input 'input' is missing" in r.stderr
              and took < 30,
              f"bad data on rank 1: exit {r.returncode} in {took:.1f} s, every rank says it: "
              f"{lines}")
        # A rank failing during training (a label outside the classes in
        # its share of batch 2: found by the step, not the set-up): the job
        # ends within seconds, naming the rank and the cause.
        yb = y.copy()
        yb[2 * n * B + B + 3] = 10
        np.savez(f"{d}/badlab.npz", input=x, labels=yb)
        t0 = time.time()
        r = mpirun(n, [prog, "--data", f"{d}/badlab.npz", "--steps", "5"], timeout=60)
        took = time.time() - t0
        check(r.returncode != 0 and took < 30 and
              "error: rank 1 of 2: step 3: " in r.stderr and "label 10" in r.stderr,
              f"rank 1 fails in step 3: the job ends in {took:.1f} s with "
              f"{[ln for ln in r.stderr.splitlines() if ln.startswith('error')]}")
        # A launcher's WORLD_SIZE that MPI does not share (the process was
        # started alone, as torchrun starts each): refused, not trained as a
        # job of one rank.
        r = subprocess.run([prog, "--data", f"{d}/bad0.npz", "--steps", "2"], capture_output=True,
                           text=True, timeout=60,
                           env=dict(os.environ, WORLD_SIZE="2", RANK="1",
                                    OMPI_MCA_ess_singleton_isolated="1"))
        check(r.returncode != 0 and "WORLD_SIZE=2, but MPI started this process as rank 0 of 1"
              in r.stderr and "mpirun -np N" in r.stderr,
              f"WORLD_SIZE=2 without mpirun: refused ({r.stderr.strip()[:160]})")
        np.savez(f"{d}/mis1.npz", input=x[:-n * B], labels=y[:-n * B])
        shutil.copy(f"{d}/bad0.npz", f"{d}/mis0.npz")
        r = mpirun(n, [prog, "--data", f"{d}/mis{{rank}}.npz", "--steps", "5"], timeout=60)
        check(r.returncode != 0 and r.stderr.count("signatures differ") == n,
              f"ranks given different data are refused by every rank: {r.stderr.strip()[:300]}")

    print(f"{passed} passed, {failed} failed" + (f" (AMP_TEST_SEED={SEED})" if failed else ""))
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
