"""The CUDA path of cellc.Cell: the cell's emitted CUDA target (`cellc emit --target cuda`, P.cu
built by nvcc into libP.so, cached as the cpu library is: _build.cuda_source, _build.cuda_library)
called through ctypes with the CUDA tensors' device pointers, on torch's current stream of the
tensors' device. See docs/python.md, "CUDA tensors".
"""
import contextlib
import ctypes
import json
import os
import threading

import torch

from . import _build

# A test hook (tests/python_cuda_emu.py): None, or a function build(src, out) that writes
# out/libP.so from src/P.cu over cuda-emu, whose device pointers are host pointers. While it is
# set, a float32 CPU tensor takes this path, with that library (in the cache folder "emu") and the
# NULL stream, instead of the cpu library: the same ctypes calls as on a GPU, run on the CPU.
emulator = None

_FP = ctypes.POINTER(ctypes.c_float)
_libraries = {}  # (cpu cache entry, library kind) -> Library
_lock = threading.Lock()


class _Options(ctypes.Structure):
    _fields_ = [("lengths", ctypes.POINTER(ctypes.c_int)), ("threads", ctypes.c_int)]


def _struct(n):
    class S(ctypes.Structure):
        _fields_ = [("f%d" % i, _FP) for i in range(n)] or [("unused_", _FP)]
    return S


def _p(t):
    return ctypes.cast(t.data_ptr(), _FP) if t is not None else None


class Library:
    """One emitted CUDA library (libP.so of target cuda, ABI 2) and its P.json."""

    def __init__(self, path, meta):
        self.path, self.meta = path, meta
        self.output = meta["output"]
        self.n_states = len(meta["states"])
        self.Params, self.States = _struct(len(meta["params"])), _struct(self.n_states)
        lib = ctypes.CDLL(path)
        self._lib = lib  # kept: the functions below live as long as it
        P, S, V = ctypes.POINTER(self.Params), ctypes.POINTER(self.States), ctypes.c_void_p
        O, i = ctypes.POINTER(_Options), ctypes.c_int
        self.ws = self._fn("workspace_bytes", ctypes.c_size_t, [i, i])
        self.fwd = self._fn("forward", i, [P, i, i, _FP, S, _FP, S, V, V])
        self.bwd = self._fn("backward", i, [P, i, i, _FP, S, _FP, S, V, P, _FP, S, V])
        self.fwd_ex = self._fn("forward_ex", i, [P, i, i, _FP, S, _FP, S, V, O, V])
        self.bwd_ex = self._fn("backward_ex", i, [P, i, i, _FP, S, _FP, S, V, O, P, _FP, S, V])
        self.strerror = self._fn("strerror", ctypes.c_char_p, [i])
        self.release = self._fn("release", None, [])
        self._thread = threading.local()

    def _fn(self, name, restype, argtypes):
        f = getattr(self._lib, self.meta["name"] + "_" + name)
        f.restype, f.argtypes = restype, argtypes
        return f

    def check(self, status):
        if status != 0:
            raise RuntimeError("cellc: %s (CUDA library %s): %s" % (self.meta["cell"], self.path,
                                                                     self.strerror(status).decode()))

    def enter(self, device):
        """Before a call on this thread, with the device current (_on): its cuBLAS handle is made by
        the first call for the device current then (spec/emit.md), so a thread that changes devices
        releases it first. Returns the stream to pass: torch's current stream of the device (NULL
        on the emulator)."""
        index = device.index if device.type == "cuda" else -1
        last = getattr(self._thread, "device", None)
        if last is not None and last != index:
            self.release()
        self._thread.device = index
        return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def library(spec, meta, device):
    """The CUDA library of the cell that spec names ((binary, cpu cache entry, path, cell, dims,
    options, mode)) for the device, emitted and built on first use; meta: the cpu entry's P.json,
    against which the CUDA target's params and states are checked."""
    binary, entry, path, cell, dims, options, mode = spec
    if device.type == "cuda":
        arch = os.environ.get("CELLC_CUDA_ARCH") or "sm_%d%d" % torch.cuda.get_device_capability(device)
        kind, build = arch, (lambda src, out: _build.nvcc_build(src, out, arch))
    else:
        kind, build = "emu", emulator
    with _lock:
        lib = _libraries.get((entry, kind))
        if lib is None:
            if options.get("train_noise") == "true":
                raise NotImplementedError("%s: train_noise=True has no CUDA target (the noise would need a device "
                                          "RNG); load the cell without it, or run on CPU tensors" % cell)
            src = _build.cuda_source(binary, entry, path, cell, dims, options, mode)
            so = _build.cuda_library(src, kind, build)
            with open(os.path.join(src, "P.json")) as f:
                cu = json.load(f)
            shape = lambda m: [(t["name"], t["shape"], t["complex"]) for t in m["params"] + m["states"]]
            if shape(cu) != shape(meta) or (cu["input"], cu["output"]) != (meta["input"], meta["output"]):
                raise _build.CellcError("cellc: the CUDA target of '%s' (%s) does not have the params and states of "
                                        "its cpu target (%s)" % (cell, src, entry))
            lib = _libraries[(entry, kind)] = Library(so, cu)
    return lib


def _f32(t):
    return t.detach().contiguous()


def _on(device):
    """The device current while the library runs: its runtime launches into the context current on
    the thread, which must be the tensors' device's (x on cuda:1 while cuda:0 is current)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class Function(torch.autograd.Function):
    """forward(lib, lengths or None, x, *h0s, *params) -> (y, *finals), every tensor float32 on one
    device; gradients to x, every h0 and every param (NULL where none is needed)."""

    @staticmethod
    def forward(ctx, lib, lens, x, *rest):
        ns = lib.n_states
        xf, h0s, params = _f32(x), [_f32(h) for h in rest[:ns]], [_f32(p) for p in rest[ns:]]
        T, B = xf.shape[0], xf.shape[1]
        dev = xf.device
        with _on(dev):
            stream = lib.enter(dev)
            work = torch.empty(max(lib.ws(T, B), 1), dtype=torch.uint8, device=dev)
            y = torch.empty(T, B, lib.output, dtype=torch.float32, device=dev)
            finals = [torch.empty_like(h) for h in h0s]
            args = [ctypes.byref(lib.Params(*[_p(t) for t in params])), T, B, _p(xf),
                    ctypes.byref(lib.States(*[_p(h) for h in h0s])), _p(y),
                    ctypes.byref(lib.States(*[_p(f) for f in finals])), ctypes.c_void_p(work.data_ptr())]
            if lens is None:
                lib.check(lib.fwd(*args, stream))
            else:
                arr = (ctypes.c_int * B)(*lens)
                opt = _Options(ctypes.cast(arr, ctypes.POINTER(ctypes.c_int)), 0)
                lib.check(lib.fwd_ex(*args, ctypes.byref(opt), stream))
        ctx.lib, ctx.lens, ctx.work = lib, lens, work
        ctx.save_for_backward(xf, *h0s, *params)
        return (y, *finals)

    @staticmethod
    def backward(ctx, dy, *dfinals):
        lib = ctx.lib
        xf, *rest = ctx.saved_tensors
        h0s, params = rest[:lib.n_states], rest[lib.n_states:]
        with _on(xf.device):
            return Function._backward(ctx, lib, xf, h0s, params, dy, dfinals, lib.enter(xf.device))

    @staticmethod
    def _backward(ctx, lib, xf, h0s, params, dy, dfinals, stream):
        T, B, ns, dev = xf.shape[0], xf.shape[1], lib.n_states, xf.device
        need = ctx.needs_input_grad
        dyf = _f32(dy) if dy is not None else torch.zeros(T, B, lib.output, dtype=torch.float32, device=dev)
        dfs = [_f32(d) if d is not None else None for d in dfinals]
        dx = torch.empty_like(xf) if need[2] else None
        dh0 = [torch.empty_like(h) if need[3 + i] else None for i, h in enumerate(h0s)]
        grads = [torch.empty_like(p) if need[3 + ns + i] else None for i, p in enumerate(params)]
        args = [ctypes.byref(lib.Params(*[_p(t) for t in params])), T, B, _p(xf),
                ctypes.byref(lib.States(*[_p(h) for h in h0s])), _p(dyf),
                ctypes.byref(lib.States(*[_p(d) for d in dfs])), ctypes.c_void_p(ctx.work.data_ptr())]
        outs = [ctypes.byref(lib.Params(*[_p(g) for g in grads])), _p(dx), ctypes.byref(lib.States(*[_p(d) for d in dh0]))]
        if ctx.lens is None:
            lib.check(lib.bwd(*args, *outs, stream))
        else:
            arr = (ctypes.c_int * B)(*ctx.lens)
            opt = _Options(ctypes.cast(arr, ctypes.POINTER(ctypes.c_int)), 0)
            lib.check(lib.bwd_ex(*args, ctypes.byref(opt), *outs, stream))
        return (None, None, dx, *dh0, *grads)
