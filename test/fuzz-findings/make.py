"""Writes the reproducers of the fuzzing and sanitizer findings (issue 29)
that are checked in next to this file; the lit tests here read those files,
not this script's output, so that a change to onnx or numpy cannot change a
reproducer. Rerun only to add one:

    .venv/bin/python test/fuzz-findings/make.py test/fuzz-findings

Each is a few hundred bytes at most.
"""
import io
import os
import struct
import sys
import zipfile
import zlib

import numpy as np
from onnx import AttributeProto, TensorProto as TP, helper as H, numpy_helper as NH

OUT = sys.argv[1]


def save(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = H.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = H.make_model(g, opset_imports=[H.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def vi(name, dt, shape):
    return H.make_tensor_value_info(name, dt, shape)


def i64(name, v):
    return NH.from_array(np.array(v, dtype=np.int64), name)


def f32(name, v):
    return NH.from_array(np.array(v, dtype=np.float32), name)


I64, F = TP.INT64, TP.FLOAT
MIN = -(2 ** 63)

# Folded integer Div / Mod of INT64_MIN by -1 (SIGFPE before), Mul / Add / Sub
# that wrap (2^62 * 4 became 0).
for op, a, b in [("Div", MIN, -1), ("Mod", MIN, -1), ("Mul", 2 ** 62, 4),
                 ("Add", 2 ** 63 - 1, 1), ("Sub", MIN, 1)]:
    save(f"fold-{op.lower()}.onnx", model(
        [H.make_node(op, ["a", "b"], ["c"]), H.make_node("Reshape", ["x", "c"], ["y"])],
        [vi("x", F, [2])], [vi("y", F, None)], [i64("a", [a]), i64("b", [b])]))

# Range whose start + i * delta leaves 64 bits only in the product.
save("range-wide.onnx", model(
    [H.make_node("Range", ["s", "l", "d"], ["y"])], [], [vi("y", I64, None)],
    [i64("s", MIN), i64("l", 2 ** 63 - 1), i64("d", 2 ** 62)]))

# Reshape / Tile to 2^32 x 2^32 elements (the shape product wrapped to 0).
save("reshape-huge.onnx", model(
    [H.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, None)],
    [i64("s", [2 ** 32, 2 ** 32])]))
save("tile-huge.onnx", model(
    [H.make_node("Tile", ["x", "r"], ["y"])], [vi("x", F, [65536, 65536])], [vi("y", F, None)],
    [i64("r", [2 ** 20, 2 ** 20])]))

# Resize to an axis of 2^31 (tables of taps x outputs: tens of GiB).
save("resize-huge.onnx", model(
    [H.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic")], [vi("x", F, [1, 2])],
    [vi("y", F, None)], [f32("s", [1.0, 2.0 ** 30])]))
save("resize-inf-scale.onnx", model(
    [H.make_node("Resize", ["x", "", "s"], ["y"])], [vi("x", F, [1, 2])],
    [vi("y", F, None)], [f32("s", [1.0, 3e38])]))

# Float -> int64 conversions of NaN / huge values: OneHot's depth,
# MelWeightMatrix's edges.
save("onehot-nan-depth.onnx", model(
    [H.make_node("OneHot", ["i", "d", "v"], ["y"])], [vi("i", I64, [3])], [vi("y", F, None)],
    [f32("d", float("nan")), f32("v", [0, 1])]))
save("mel-nan-edge.onnx", model(
    [H.make_node("MelWeightMatrix", ["m", "l", "r", "lo", "hi"], ["y"])], [], [vi("y", F, None)],
    [i64("m", 4), i64("l", 64), i64("r", 8000), f32("lo", 0.0), f32("hi", float("nan"))]))

# An empty float list (memcpy from a null pointer before).
const = H.make_node("Constant", [], ["c"])
const.attribute.append(H.make_attribute("value_floats", [], attr_type=AttributeProto.FLOATS))
save("empty-floats.onnx", model(
    [const, H.make_node("Concat", ["x", "c"], ["y"], axis=0)],
    [vi("x", F, [2])], [vi("y", F, None)]))

# .npz: a 2 GiB declared size in a tiny deflated entry (allocated and
# zero-filled before inflating); a member name holding a NUL.
hdr = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, 0, 10, 0x7FFFFFFF, 5, 0)
body = zlib.compress(b"\x00" * 16)[2:-4][:10].ljust(10, b"\x00")
save("npz-huge-declared.npz", hdr + b"x.npy" + body + struct.pack("<I", 0x06054B50) + b"\0" * 18)
b = io.BytesIO()
with zipfile.ZipFile(b, "w") as z:
    a = io.BytesIO()
    np.save(a, np.arange(3, dtype=np.float32))
    z.writestr("x@hidden.npy", a.getvalue())
# (zipfile cuts names at a NUL: the byte is patched in afterwards)
save("npz-nul-name.npz", b.getvalue().replace(b"x@hidden", b"x\0hidden"))


# An onnxruntime-training checkpoint (FlatBuffer "ODTC") whose
# requires_grad_params vector names one 1 KiB tensor 64 times: 64 KiB copied
# from a 1.3 KiB file before (a 1 MB file could ask for 8 GiB).
def ort_checkpoint(copies):
    buf = bytearray(b"\0" * 4 + b"ODTC")

    def here():
        return len(buf)

    def u32_at(pos, v):
        buf[pos:pos + 4] = struct.pack("<I", v)

    def table(fields):
        """fields: list of (size, bytes-or-None) in field order; returns the
        table's position and each field's position."""
        vt = here()
        n = len(fields)
        offs, size = [], 4
        for fsize, _ in fields:
            offs.append(size if fsize else 0)
            size += fsize
        buf.extend(struct.pack("<HH", 4 + 2 * n, size) + b"".join(struct.pack("<H", o) for o in offs))
        t = here()
        buf.extend(struct.pack("<i", t - vt))
        pos = []
        for (fsize, data), o in zip(fields, offs):
            pos.append(t + o)
            buf.extend(data if data is not None else b"\0" * fsize)
        return t, pos

    root, rpos = table([(4, struct.pack("<i", 1)), (4, None)])
    ms, mpos = table([(4, None)])
    u32_at(rpos[1], ms - rpos[1])
    vec = here()
    u32_at(mpos[0], vec - mpos[0])
    buf.extend(struct.pack("<I", copies))
    slots = []
    for _ in range(copies):
        slots.append(here())
        buf.extend(b"\0" * 4)
    t, tpos = table([(4, None), (0, None), (4, None), (4, struct.pack("<i", 1)), (4, None)])
    for s in slots:
        u32_at(s, t - s)
    for field, payload in ((0, struct.pack("<I", 1) + b"w\0"),
                           (2, struct.pack("<I", 1) + struct.pack("<q", 256)),
                           (4, struct.pack("<I", 1024) + bytes(range(256)) * 4)):
        at = here()
        u32_at(tpos[field], at - tpos[field])
        buf.extend(payload)
    u32_at(0, root)
    return bytes(buf)


save("ort-shared-tensor.ckpt", ort_checkpoint(64))
save("ort-one-tensor.ckpt", ort_checkpoint(1))

# Slice with a negative step of an empty axis: folded (int64 constants) it
# read one element of an empty vector (UBSan: reference binding to null);
# as an op, its type took one element from an axis of none.
empty = NH.from_array(np.zeros([0], dtype=np.int64), "e")
save("slice-empty-negative-step.onnx", model(
    [H.make_node("Slice", ["e", "st", "en", "ax", "sp"], ["s"]),
     H.make_node("Concat", ["s", "two"], ["shape"], axis=0),
     H.make_node("Reshape", ["x", "shape"], ["y"])],
    [vi("x", F, [2])], [vi("y", F, None)],
    [empty, i64("st", [-1]), i64("en", [-10]), i64("ax", [0]), i64("sp", [-1]), i64("two", [2])]))
save("slice-empty-float-negative-step.onnx", model(
    [H.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
    [vi("x", F, [0, 3])], [vi("y", F, None)],
    [i64("st", [-1]), i64("en", [-10]), i64("ax", [0]), i64("sp", [-1])]))
