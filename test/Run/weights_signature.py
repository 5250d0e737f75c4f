"""Hostile .weights files: a compiled program reads its signature (one line
per argument / result: kind, name, dtype, dims) from the safetensors
metadata of the weights file beside it, and its arena size. Each edit below
must end the program with exit 1 and one message naming the problem, never
a crash, and leave no outputs file behind; the unedited file must still run.

usage: weights_signature.py PROGRAM INPUTS.npz WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

prog, inputs, work = sys.argv[1:4]
raw = open(prog + ".weights", "rb").read()
(hlen,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + hlen])
data = raw[8 + hlen:]
sig = header["__metadata__"]["amp.signature"]
lines = sig.split("\n")
first = lines[0].split("\t")  # kind, name, dtype, dims


def with_line(fields):
    return "\n".join(["\t".join(fields)] + lines[1:])


edits = {
    "negative dim": (with_line(first[:3] + ["-4" + ("," + first[3] if first[3] else "")]),
                     "bad shape in signature line"),
    "non-numeric dim": (with_line(first[:3] + ["4x"]), "bad shape in signature line"),
    "empty dim": (with_line(first[:3] + [first[3] + ",,2"]), "bad shape in signature line"),
    "dim overflowing int64": (with_line(first[:3] + ["99999999999999999999"]),
                              "bad shape in signature line"),
    "rank 9": (with_line(first[:3] + [",".join(["1"] * 9)]), "bad shape in signature line"),
    "64 TiB tensor": (with_line(first[:3] + ["17592186044416"]), "more than this machine's available memory"),
    "size overflowing 2^64": (with_line(first[:3] + ["4294967296,4294967296,4294967296"]),
                              "more than this machine's available memory"),
    "three fields": (with_line(first[:3]), "malformed signature line"),
    "unknown kind": (with_line(["weight"] + first[1:]), "unknown kind 'weight'"),
    "unknown dtype": (with_line(first[:2] + ["f8"] + first[3:]), "unknown element type 'f8'"),
    "no signature": (None, "has no program signature"),
}
edits = {k: ("amp.signature",) + v for k, v in edits.items()}
edits.update({
    "negative arena": ("amp.arena_bytes", "-64", "bad amp.arena_bytes '-64'"),
    "non-numeric arena": ("amp.arena_bytes", "12k", "bad amp.arena_bytes '12k'"),
    "arena overflowing 2^64": ("amp.arena_bytes", "99999999999999999999999", "bad amp.arena_bytes"),
    "64 TiB arena": ("amp.arena_bytes", "70368744177664", "an arena of 70368744177664 bytes is more "
                     "than this machine's available memory"),
})

os.makedirs(work, exist_ok=True)
failed = 0
for what, (key, text, want) in edits.items():
    h = json.loads(json.dumps(header))
    if text is None:
        del h["__metadata__"][key]
    else:
        h["__metadata__"][key] = text
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    p = os.path.join(work, "prog")
    shutil.copy(prog, p)
    with open(p + ".weights", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)
    out = os.path.join(work, "out.npz")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([p, "--inputs", inputs, "--outputs", out], capture_output=True, text=True)
    msg = r.stderr.strip()
    ok = r.returncode == 1 and want in msg and msg.startswith("error:") and len(msg.splitlines()) == 1 \
        and not os.path.exists(out)
    print(f"{'ok  ' if ok else 'FAIL'} {what}: exit {r.returncode}: {msg[:300]}")
    failed += not ok

# The unedited header, rewritten the same way, still runs.
hb = json.dumps(header).encode()
hb += b" " * (-len(hb) % 8)
with open(os.path.join(work, "prog.weights"), "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + data)
r = subprocess.run([os.path.join(work, "prog"), "--inputs", inputs, "--outputs",
                    os.path.join(work, "out.npz")], capture_output=True, text=True)
print(f"{'ok  ' if r.returncode == 0 else 'FAIL'} unedited: exit {r.returncode} {r.stderr.strip()[:300]}")
failed += r.returncode != 0
print(f"{len(edits) + 1 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
