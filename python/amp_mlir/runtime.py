"""ctypes bindings to libamprt, the AMP-MLIR runtime (runtime/include/amprt/amprt.h).

Arrays are numpy arrays; bf16 data travels as uint16 bit patterns (numpy has
no bfloat16), marked with ``bf16=True``. Every call checks the status and
raises RuntimeError with the runtime's message.

The library is found through $AMPRT_LIB, else build/lib/libamprt.so next to
this source tree.
"""

from __future__ import annotations

import ctypes as C
import os

import numpy as np

MAX_RANK = 8
F32, F16, BF16, I1, I8, I16, I32, I64, U8, U16, U32, U64 = range(12)

_NP_TO_DTYPE = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.bool_): I1,
                np.dtype(np.int8): I8, np.dtype(np.int16): I16, np.dtype(np.int32): I32,
                np.dtype(np.int64): I64, np.dtype(np.uint8): U8, np.dtype(np.uint16): U16,
                np.dtype(np.uint32): U32, np.dtype(np.uint64): U64}


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("rank", C.c_int32),
                ("shape", C.c_int64 * MAX_RANK), ("strides", C.c_int64 * MAX_RANK)]


class ScalerConfig(C.Structure):
    _fields_ = [("growth_factor", C.c_float), ("backoff_factor", C.c_float),
                ("growth_interval", C.c_int32), ("hysteresis", C.c_int32),
                ("min_scale", C.c_float)]


class ScalerState(C.Structure):
    _fields_ = [("scale", C.c_float), ("growth_tracker", C.c_int32),
                ("hysteresis_left", C.c_int32), ("at_min_scale", C.c_int32)]


class SgdConfig(C.Structure):
    _fields_ = [("lr", C.c_float), ("momentum", C.c_float), ("dampening", C.c_float),
                ("weight_decay", C.c_float), ("nesterov", C.c_int32)]


class AdamConfig(C.Structure):
    _fields_ = [("lr", C.c_float), ("beta1", C.c_float), ("beta2", C.c_float),
                ("eps", C.c_float), ("weight_decay", C.c_float), ("decoupled", C.c_int32)]


class NamedTensor(C.Structure):
    _fields_ = [("name", C.c_char_p), ("tensor", Tensor)]


class Metadata(C.Structure):
    _fields_ = [("key", C.c_char_p), ("value", C.c_char_p)]


class Array(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("rank", C.c_int32),
                ("shape", C.c_int64 * MAX_RANK)]


_DTYPE_TO_NP = {v: k for k, v in _NP_TO_DTYPE.items()}


def npz_read(path: str) -> dict:
    """Reads an .npz / .npy with the runtime's reader (what compiled programs use)."""
    z = C.c_void_p()
    check(lib().amprt_npz_open(path.encode(), C.byref(z)), "amprt_npz_open")
    try:
        lib().amprt_npz_name.restype = C.c_char_p
        lib().amprt_npz_get.restype = C.POINTER(Array)
        out = {}
        for i in range(lib().amprt_npz_count(z)):
            name = lib().amprt_npz_name(z, i)
            a = lib().amprt_npz_get(z, name).contents
            dt = _DTYPE_TO_NP[a.dtype]
            shape = tuple(a.shape[d] for d in range(a.rank))
            n = int(np.prod(shape)) if shape else 1
            buf = (C.c_char * (n * dt.itemsize)).from_address(a.data) if n else b""
            out[name.decode()] = np.frombuffer(bytes(buf), dt).reshape(shape).copy()
        return out
    finally:
        lib().amprt_npz_close(z)


def npz_write(path: str, arrays: dict):
    names = (C.c_char_p * len(arrays))(*[k.encode() for k in arrays])
    items = []
    for v in arrays.values():
        a = Array()
        a.data = v.ctypes.data
        a.dtype = _NP_TO_DTYPE[v.dtype]
        a.rank = v.ndim
        for d in range(v.ndim):
            a.shape[d] = v.shape[d]
        items.append(a)
    arr = (Array * len(items))(*items)
    check(lib().amprt_npz_write(path.encode(), names, arr, len(items)), "amprt_npz_write")


def _default_lib():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "lib", "libamprt.so")


_lib = None


def lib():
    global _lib
    if _lib is None:
        path = os.environ.get("AMPRT_LIB") or _default_lib()
        if not os.path.exists(path):
            raise RuntimeError(f"libamprt not found at {path} (build it, or set AMPRT_LIB)")
        # libgomp's idle threads yield after a short spin (see
        # amprt/bounded_spin.h: a busy machine made steps 10-50x slower);
        # read when libgomp loads, so before the library; a user's own
        # OMP_WAIT_POLICY / GOMP_SPINCOUNT stays.
        if "OMP_WAIT_POLICY" not in os.environ:
            os.environ.setdefault("GOMP_SPINCOUNT", "1000")
        _lib = C.CDLL(path)
        _lib.amprt_last_error.restype = C.c_char_p
        _lib.amprt_checkpoint_metadata.restype = C.c_char_p
        _lib.amprt_checkpoint_name.restype = C.c_char_p
        _lib.amprt_cpu_features_string.restype = C.c_char_p
        _lib.amprt_scaler_default_config.restype = ScalerConfig
        _lib.amprt_scaler_init.restype = ScalerState
        _lib.amprt_scaler_init.argtypes = [C.POINTER(ScalerConfig), C.c_float]
    return _lib


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: {lib().amprt_last_error().decode()} (status {status})")


def tensor(a: np.ndarray, bf16: bool = False) -> Tensor:
    """A descriptor of a C-contiguous numpy array (kept alive by the caller)."""
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("arrays must be C-contiguous")
    t = Tensor()
    t.data = a.ctypes.data
    if bf16:
        if a.dtype != np.uint16:
            raise ValueError("bf16 data must be uint16 bit patterns")
        t.dtype = BF16
    else:
        t.dtype = _NP_TO_DTYPE[a.dtype]
    t.rank = a.ndim
    stride = 1
    for d in range(a.ndim - 1, -1, -1):
        t.shape[d] = a.shape[d]
        t.strides[d] = stride
        stride *= a.shape[d]
    return t


def unscale_and_check(grads, scale: float, found_inf: float = 0.0, outs=None):
    """Returns (unscaled f32 arrays, found_inf)."""
    outs = outs if outs is not None else [np.empty(g.shape, np.float32) for g in grads]
    n = len(grads)
    ins = (Tensor * n)(*[tensor(g) for g in grads])
    out = (Tensor * n)(*[tensor(o) for o in outs])
    s = C.c_float(scale)
    f = C.c_float(found_inf)
    check(lib().amprt_unscale_and_check(None, ins, out, n, C.byref(s), C.byref(f)),
          "amprt_unscale_and_check")
    return outs, f.value


def scaler(growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, hysteresis=1,
           min_scale=0.0, init_scale=65536.0):
    cfg = ScalerConfig(growth_factor, backoff_factor, growth_interval, hysteresis, min_scale)
    return cfg, lib().amprt_scaler_init(C.byref(cfg), C.c_float(init_scale))


def update_scale(cfg: ScalerConfig, state: ScalerState, found_inf: float) -> int:
    """Updates state in place; returns the status (AMPRT_ERR_NUMERIC = 6 at the floor)."""
    return lib().amprt_update_scale(None, C.byref(cfg), C.byref(state), C.c_float(found_inf))


def sgd_step(cfg: SgdConfig, param, grad, buf, step: int, found_inf: float = 0.0):
    s = C.c_int64(step)
    check(lib().amprt_sgd_step(None, C.byref(cfg), C.byref(tensor(param)), C.byref(tensor(grad)),
                               C.byref(tensor(buf)) if buf is not None else None, C.byref(s),
                               C.c_float(found_inf)), "amprt_sgd_step")


def adam_step(cfg: AdamConfig, param, grad, m, v, step: int, found_inf: float = 0.0):
    s = C.c_int64(step)
    check(lib().amprt_adam_step(None, C.byref(cfg), C.byref(tensor(param)), C.byref(tensor(grad)),
                                C.byref(tensor(m)), C.byref(tensor(v)), C.byref(s),
                                C.c_float(found_inf)), "amprt_adam_step")


def cast(x: np.ndarray, to: int, x_bf16=False) -> np.ndarray:
    """Element type change with amp.cast's rules; bf16 results as uint16 bits."""
    out_np = {F32: np.float32, F16: np.float16, BF16: np.uint16, I32: np.int32,
              I64: np.int64, I1: np.bool_}[to]
    y = np.empty(x.shape, out_np)
    ty = tensor(y, bf16=(to == BF16))
    check(lib().amprt_cast(None, C.byref(tensor(x, bf16=x_bf16)), C.byref(ty)), "amprt_cast")
    return y


def checkpoint_save(path: str, tensors: dict, metadata: dict | None = None):
    items = list(tensors.items())
    arr = (NamedTensor * len(items))(*[NamedTensor(k.encode(), tensor(v)) for k, v in items])
    meta = list((metadata or {}).items())
    marr = (Metadata * max(1, len(meta)))(*[Metadata(k.encode(), v.encode()) for k, v in meta])
    check(lib().amprt_checkpoint_save(path.encode(), arr, len(items), marr, len(meta)),
          "amprt_checkpoint_save")


def checkpoint_load(path: str, like: dict, meta_keys=()) -> tuple[dict, dict]:
    """Reads the tensors named in `like` (arrays giving dtype and shape) and
    the metadata values of `meta_keys` (None when absent)."""
    ck = C.c_void_p()
    check(lib().amprt_checkpoint_open(path.encode(), C.byref(ck)), "amprt_checkpoint_open")
    try:
        out = {}
        for name, proto in like.items():
            a = np.empty_like(proto)
            check(lib().amprt_checkpoint_read(ck, name.encode(), C.byref(tensor(a))),
                  "amprt_checkpoint_read")
            out[name] = a
        meta = {}
        for k in meta_keys:
            v = lib().amprt_checkpoint_metadata(ck, k.encode())
            meta[k] = v.decode() if v is not None else None
        return out, meta
    finally:
        lib().amprt_checkpoint_close(ck)
