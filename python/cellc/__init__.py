"""cellc from PyTorch: `cellc.load("gru", H=128)` is a torch.nn.Module running a cell compiled by
`cellc emit --target cpu --torch` (through ctypes), emitted on first use and cached; on CUDA
tensors, the cell's `cellc emit --target cuda` built by nvcc (_cuda.py). See docs/python.md.

    import cellc
    rnn = cellc.load("gru", D=64, H=128, seed=1)     # a stdlib name or a .cell path
    y, finals = rnn(x)                                  # x [T, B, D] -> y [T, B, O], {"h": [B, H]}
    y, finals = rnn(x, finals)                          # carry the states on
"""
import importlib.util
import os
import sys

import torch

from . import _build, _cuda, _safetensors
from ._build import CellcError, stats

__all__ = ["load", "Cell", "CellcError", "stats"]

_modules = {}  # (cache entry, file, device) -> its imported P_torch.py or P_ops.py


def _torch_module(entry, file="P_torch.py", device=None):
    """The emitted module, imported once per process; P_ops.py once more per CUDA device it runs on
    (its cached index tensors live on the device they were made on)."""
    mod = _modules.get((entry, file, device))
    if mod is None:
        # a name of its own per entry: two versions of one cell live side by side in a process
        name = "cellc._emitted_%s_%s%s" % (os.path.basename(entry), file[:-3],
                                          "" if device is None else "_" + device.replace(":", "_"))
        spec = importlib.util.spec_from_file_location(name, os.path.join(entry, file))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[name] = mod
        _modules[(entry, file, device)] = mod
    return mod


def _option_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def load(path_or_stdlib_name, *, cell=None, mode=None, seed=0, dtype=torch.float32, batch_first=False,
         **dims_and_options):
    """The cell as a torch.nn.Module (a `cellc.Cell`).

    path_or_stdlib_name: a .cell file, or the name of a standard-library cell ("gru", "lru").
    cell: which cell of the file (default: the last). mode: "auto", "scan" or "sequential".
    seed: the initial values are the cell's own initializers drawn from this seed, exactly as
    `cellc run --seed SEED` draws them (with float64, as `cellc run --precision f64` does).
    dims_and_options: the cell's dims (D, H, ...: every dim without a default must be given) and
    options (see `cellc check FILE`), and train_noise=True for a cell with gumbel_sigmoid gates to
    draw their noise in training (the emit setting; float32 only).
    dtype: torch.float32 (the emitted kernels) or torch.float64 (the step as torch ops that cellc
    generates from the same lowered graph, `cellc emit --torch-ops`, autograd as the backward).
    batch_first: x and y are [B, T, ...] instead of [T, B, ...].
    """
    if dtype not in (torch.float32, torch.float64):
        raise TypeError("cellc.load: dtype must be torch.float32 or torch.float64, got %s" % (dtype,))
    if mode not in (None, "auto", "scan", "sequential"):
        raise ValueError("cellc.load: mode must be 'auto', 'scan' or 'sequential', got %r" % (mode,))
    if not isinstance(seed, int) or not 0 <= seed <= 2 ** 31 - 1:
        raise ValueError("cellc.load: seed must be a whole number in [0, 2^31 - 1], got %r" % (seed,))
    binary = _build.cellc_binary()
    path = _build.resolve(os.fspath(path_or_stdlib_name), binary)
    info = _build.check(binary, path, cell)
    cell = info["name"]
    dim_names = [d["name"] for d in info["dims"]]
    option_names = [o["name"] for o in info["options"]]
    dims, options = {}, {}
    for k, v in dims_and_options.items():
        if k in dim_names:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError("cellc.load: dim %s must be a positive whole number, got %r" % (k, v))
            dims[k] = v
        elif k in option_names or k == "train_noise":
            options[k] = _option_text(v)
        else:
            raise TypeError("cellc.load: cell '%s' has no dim or option '%s' (dims: %s; options: %s)"
                            % (cell, k, ", ".join(dim_names) or "none", ", ".join(option_names) or "none"))
    if dtype == torch.float64 and options.get("train_noise") == "true":
        raise NotImplementedError("cellc.load: train_noise=True needs dtype=torch.float32: the float64 step "
                                  "(torch ops) is the evaluation form, which draws no noise")
    entry = _build.compiled(binary, path, cell, dims, options, mode)
    f64 = dtype == torch.float64
    init, _ = _safetensors.read(_build.initial_values(binary, entry, path, cell, dims, options, mode, seed, f64))
    m = Cell(_torch_module(entry), _torch_module(entry, "P_ops.py"), _read_json(entry), init, batch_first, dtype)
    m._entry, m._cuda_spec = entry, (binary, entry, path, cell, dims, options, mode)
    return m


def _read_json(entry):
    import json
    with open(os.path.join(entry, "P.json")) as f:
        return json.load(f)


class Cell(torch.nn.Module):
    """A cell over whole sequences: forward(x, h0=None, lengths=None, *, gates=False) -> (y, finals[,
    gates]), as nn.GRU's (output, h_n).

    x: [T, B, input_size] tensor of the module's dtype ([B, T, input_size] with batch_first), on
    the module's device (CPU, or CUDA after .cuda() / .to("cuda")); any T, B >= 1. h0: None, a
    dict {state: [B, ...]} (names as in `finals`; a missing state takes its initial value), or,
    for a cell with one state, that state's tensor. A complex state has a
    trailing 2. Returns y [T, B, output_size] ([B, T, ...] with batch_first) and finals, a dict
    {state: [B, ...]} of the states after the last step (pass it back as h0 to carry on); with
    gates=True also {gate: [T, B, ...gate shape]} ([B, T, ...] with batch_first), `cellc run`'s
    gate.<name>.
    lengths: None, or each sequence's length (B ints in 1..T, a list or an integer tensor): a
    sequence's final state is its state after its own last step, y (and the gates) past it are
    zeros, and x there is never read (as pack_padded_sequence's padding).
    float32 runs the emitted kernels (the emitted backward), except with gates=True: on CUDA tensors
    the cell's emitted CUDA target (built by nvcc on first use, _cuda.py); float64, and gates=True,
    run the step as torch ops generated by cellc from the same lowered graph (P_ops.py), on any
    device, autograd giving the backward.
    Params are nn.Parameters named as in the cell (`h.init` as `h_init`), starting at the cell's
    initializers for the seed; buffers are module buffers; frozen params do not require grad.
    A state's initial value is the cell's: zeros, its initializer drawn once (the same for every
    sequence), or its learned param (its gradient summed over the batch).
    """

    def __init__(self, lib, ops, meta, init, batch_first, dtype=torch.float32):
        super().__init__()
        self._lib, self._ops = lib, ops
        self._meta = meta
        self._entry = self._cuda_spec = None  # set by load: where the CUDA target comes from
        self.cell_name, self.mode = meta["cell"], meta["mode"]
        self.dims, self.options = dict(meta["dims"]), dict(meta["options"])
        self.input_size, self.output_size = meta["input"], meta["output"]
        self.batch_first = batch_first
        self._train_noise = bool(meta.get("train_noise"))
        self._params = [p["field"] for p in meta["params"]]
        self._param_complex = [bool(p["complex"]) for p in meta["params"]]
        self.gate_names = [g for g, _ in ops.GATES]
        for p in meta["params"]:
            full = tuple(p["shape"]) + ((2,) if p["complex"] else ())
            t = init.get("param." + p["name"], init.get("buffer." + p["name"]))
            if t is None or tuple(t.shape) != full:
                raise CellcError("cellc: no initial value of shape %s for '%s'" % (full, p["name"]))
            t = t.to(dtype)
            if p.get("buffer"):
                self.register_buffer(p["field"], t)
            else:
                self.register_parameter(p["field"], torch.nn.Parameter(t, requires_grad=not p.get("frozen")))
        self._states = []  # (field, full shape, learned param field or None)
        self._state_complex = []
        fields = {p["name"]: p["field"] for p in meta["params"]}
        for s in meta["states"]:
            full = tuple(s["shape"]) + ((2,) if s["complex"] else ())
            learned = fields[s["learned"]] if s.get("learned") else None
            self._states.append((s["field"], full, learned))
            self._state_complex.append(bool(s["complex"]))
            if learned is None:  # zeros, or the initializer's draw: one row, repeated for every sequence
                row = init.get("h0." + s["name"])
                row = row.reshape(full).to(dtype) if row is not None else torch.zeros(full, dtype=dtype)
                self.register_buffer("_initial_" + s["field"], row, persistent=False)

    @property
    def dtype(self):
        """The module's dtype: its tensors' (so `.double()` and `.float()` switch the path too)."""
        return next(iter(list(self.parameters()) + list(self.buffers()))).dtype

    @property
    def state_names(self):
        return [f for f, _, _ in self._states]

    def extra_repr(self):
        return "%s, dims=%s, options=%s, mode=%s, batch_first=%s, dtype=%s" % (
            self.cell_name, self.dims, self.options, self.mode, self.batch_first, self.dtype)

    def initial_states(self, batch):
        """{state: [batch, ...]}: the cell's initial states (a learned one stays in the graph)."""
        out = {}
        for field, full, learned in self._states:
            src = getattr(self, learned) if learned else getattr(self, "_initial_" + field)
            out[field] = src.unsqueeze(0).expand((batch,) + full)
        return out

    def forward(self, x, h0=None, lengths=None, *, gates=False):
        kind = "float32" if self.dtype == torch.float32 else "float64"
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            raise ValueError("%s: x must be a 3-dimensional tensor [%s, %d], got %s" % (
                self.cell_name, "B, T" if self.batch_first else "T, B", self.input_size,
                tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        if self.dtype not in (torch.float32, torch.float64):
            raise TypeError("%s: the module's dtype must be float32 or float64, got %s" % (self.cell_name, self.dtype))
        if x.dtype != self.dtype:
            raise TypeError("%s: x must be %s (the module's dtype), got %s" % (self.cell_name, kind, x.dtype))
        self._check_devices(x, h0)
        if self.batch_first:
            x = x.transpose(0, 1)
        T, B = x.shape[0], x.shape[1]
        if T < 1 or B < 1 or x.shape[2] != self.input_size:
            raise ValueError("%s: x must be [%s, %d] with T, B >= 1, got %s" % (
                self.cell_name, "B, T" if self.batch_first else "T, B", self.input_size,
                tuple(x.transpose(0, 1).shape) if self.batch_first else tuple(x.shape)))
        if isinstance(h0, torch.Tensor):
            if len(self._states) != 1:
                raise ValueError("%s: the cell has %d states: pass h0 as a dict {%s}" % (
                    self.cell_name, len(self._states), ", ".join(self.state_names)))
            h0 = {self._states[0][0]: h0}
        h0 = dict(h0 or {})
        unknown = set(h0) - set(self.state_names)
        if unknown:
            raise ValueError("%s: no state named %s (states: %s)" % (
                self.cell_name, ", ".join(sorted(unknown)), ", ".join(self.state_names)))
        start = self.initial_states(B)
        h0s = []
        for field, full, _ in self._states:
            h = h0.get(field)
            if h is None:
                h = start[field]
            elif tuple(h.shape) != (B,) + full or h.dtype != self.dtype:
                raise ValueError("%s: initial state '%s' must be %s %s, got %s %s" % (
                    self.cell_name, field, kind, (B,) + full, h.dtype, tuple(h.shape)))
            h0s.append(h)
        lens = None
        if lengths is not None:
            lens = [int(v) for v in (lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths)]
            if len(lens) != B or any(n < 1 or n > T for n in lens):
                raise ValueError("%s: lengths must be %d integers in [1, %d] (one per sequence), got %s" % (
                    self.cell_name, B, T, lens))
        params = [getattr(self, f) for f in self._params]
        on_cuda = x.device.type == "cuda" or (_cuda.emulator is not None and x.device.type == "cpu")
        if self.dtype == torch.float32 and not gates and on_cuda:
            if self._cuda_spec is None:
                raise ValueError("%s: CUDA tensors need a module made by cellc.load" % self.cell_name)
            out = _cuda.Function.apply(_cuda.library(self._cuda_spec, self._meta, x.device), lens, x, *h0s, *params)
            y, finals, gate_vals = out[0], list(out[1:]), None
        elif self.dtype == torch.float32 and not gates:
            if lens is None:
                out = self._lib.Function.apply(x, *h0s, *params)
            else:
                out = self._lib.FunctionLengths.apply(lens, x, *h0s, *params)
            y, finals, gate_vals = out[0], list(out[1:]), None
        else:
            if self._train_noise and self.training:
                raise NotImplementedError("%s: gates=True of a cell emitted with train_noise=True needs eval(): "
                                          "the torch-ops step is the evaluation form (no noise)" % self.cell_name)
            y, finals, gate_vals = self._ops_forward(x, h0s, lens)
        if self.batch_first:
            y = y.transpose(0, 1)
        finals = {field: f for (field, _, _), f in zip(self._states, finals)}
        if not gates:
            return y, finals
        if self.batch_first:
            gate_vals = [g.transpose(0, 1) for g in gate_vals]
        return y, finals, dict(zip(self.gate_names, gate_vals))

    def _check_devices(self, x, h0):
        """x, h0 and the module on one device, CPU or CUDA (`.to(device)` moves the module)."""
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError("%s: x must be a CPU or CUDA tensor, got one on %s" % (self.cell_name, x.device))
        named = list(self.named_parameters()) + list(self.named_buffers())
        for name, t in named:
            if t.device != x.device:
                raise ValueError("%s: x is on %s but the module's '%s' is on %s: move the module with "
                                 ".to(%r) (or x to its device)" % (self.cell_name, x.device, name, t.device, str(x.device)))
        hs = h0.items() if isinstance(h0, dict) else [("h0", h0)] if isinstance(h0, torch.Tensor) else []
        for name, h in hs:
            if isinstance(h, torch.Tensor) and h.device != x.device:
                raise ValueError("%s: x is on %s but initial state '%s' is on %s" % (self.cell_name, x.device, name, h.device))

    def _ops_forward(self, x, h0s, lens=None):
        if x.device.type == "cpu":
            return self._ops_forward_on(self._ops, x, h0s, lens)
        # the generated step makes its constants with torch.full(...) on the default device: set to x's
        if not hasattr(torch.device(x.device), "__enter__"):
            raise NotImplementedError("%s: float64 and gates=True on CUDA tensors need PyTorch 2.0 or later "
                                      "(torch.device as a context)" % self.cell_name)
        ops = _torch_module(self._entry, "P_ops.py", str(x.device)) if self._entry else self._ops
        with torch.device(x.device):
            return self._ops_forward_on(ops, x, h0s, lens)

    def _ops_forward_on(self, ops, x, h0s, lens=None):
        """The step as torch ops (P_ops.py): the params-only part once, the input part for all T * B
        rows at once, then the state part step by step; autograd differentiates it. With lengths, a
        row past its length keeps its state and gives zeros (y, gates); its x there is replaced by
        zeros before the input part, so that it is never read (a NaN there reaches no gradient)."""
        T, B = x.shape[0], x.shape[1]
        live = None
        if lens is not None:
            live = torch.arange(T, device=x.device).unsqueeze(1) < torch.tensor(lens, device=x.device).unsqueeze(0)
            x = torch.where(live.unsqueeze(2), x, torch.zeros((), dtype=x.dtype, device=x.device))  # live: [T, B]
        params = [getattr(self, f) for f in self._params]
        P = [(params[i][..., k] if self._param_complex[i] else params[i]).reshape(-1) for i, k in ops.PARAM_PARTS]
        h = [(h0s[s][..., k] if self._state_complex[s] else h0s[s]).reshape(B, n) for s, k, n in ops.STATE_PARTS]
        S = ops.step_static(P, self.dtype)
        Fr = ops.step_input(P, S, x.reshape(T * B, self.input_size))
        ys, gs = [], []
        for t in range(T):
            y, hn, g = ops.step_state(P, S, {i: v[t * B:(t + 1) * B] for i, v in Fr.items()}, h)
            hn, y, g = [ops._rows(v, B) for v in hn], ops._rows(y, B), [ops._rows(v, B) for v in g]
            if live is not None:
                on, zero = live[t].unsqueeze(1), torch.zeros((), dtype=self.dtype, device=x.device)
                hn = [torch.where(on, v, old) for v, old in zip(hn, h)]
                y, g = torch.where(on, y, zero), [torch.where(on, v, zero) for v in g]
            h = hn
            ys.append(y)
            gs.append(g)
        finals = []
        for s, (field, full, _) in enumerate(self._states):
            parts = [v for (q, _, _), v in zip(ops.STATE_PARTS, h) if q == s]
            v = torch.stack(parts, -1) if self._state_complex[s] else parts[0]
            finals.append(v.reshape((B,) + full))
        gate_vals = [torch.stack([g[i] for g in gs]).reshape((T, B) + tuple(shape))
                     for i, (_, shape) in enumerate(ops.GATES)]
        return torch.stack(ys).reshape(T, B, self.output_size), finals, gate_vals
