# Role: the independent PyTorch oracle for `cellc run`. For every stdlib cell and several
# configurations it writes an inputs file, runs
#     bin/cellc run stdlib/NAME.cell --backend interp --precision f64 --dims ... --T .. --B ..
#         --seed .. --inputs IN.safetensors --out OUT.safetensors [--set k=v] [--mode m]
# reads OUT, recomputes everything with the hand-written float64 reference of cells.py, and
# compares every tensor: max|a - b| / max(max|b|, 1e-300) < 1e-9 (b: the reference).
#   L = sum(y * dy) + sum over states of sum(final * dfinal), gradients by autograd w.r.t. every
#   param, x and h0 as real views (complex tensors: trailing 2 = (dL/dre, dL/dim)).
# Checks (one line each, one count each, per configuration):
#   run       cellc exited 0 and wrote a readable OUT (else the command and its stderr are shown)
#   names     OUT holds exactly the tensors of the table in spec/cli.md (`cellc run`): param.*, x, h0.*, dy,
#             dfinal.*, y, final.*, grad.param.*, grad.x, grad.h0.*, gate.* (missing/extra fail)
#   metadata  __metadata__ records cell, dims, options, mode, backend (cell/backend/mode as expected)
#   <tensor>  every result (y, final.*, grad.*, gate.*) against the reference, and every input that
#             IN supplied echoed unchanged in OUT ("as used")
# Ends with "N passed, M failed"; exit status 1 if any failed.
#
# Usage (from the repository root):
#   python3 tests/torch/parity.py [--cellc bin/cellc] [--only NAME[,NAME]] [--keep DIR] [-j N]
#       [--backend interp] [--precision f64] [--tol 1e-9] [--timeout 30] [--budget 75]
# A new cell with its own Python reference is checked the same way:
#   python3 tests/torch/parity.py --cell-file my.cell --ref path/to/ref.py:func \
#       [--cell NAME] [--dims H=5,D=4] [--set k=v]...
#   (--ref also takes MODULE:FUNC for an importable module.) func follows cells.py's convention:
#   y, finals, gates = func(params, x, h0, opts), all tensors real (complex as a trailing 2), opts
#   the --set values parsed (true/false -> bool, numbers -> int/float). The states and their shapes
#   come from a first `cellc run` without inputs; the expected params are those the reference reads,
#   the expected states and gates those it returns. Configurations: T=1,B=1 and T=7,B=3.
import argparse
import concurrent.futures
import importlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sft  # noqa: E402

torch = None  # imported lazily (slow), after the cellc runs have been started
cells = None

TINY = 1e-300


def parse_value(v):
    if v in ("true", "false"):
        return v == "true"
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


class Config:
    def __init__(self, cell, T, B, dims, seed, sets=(), mode=None, full=False, cell_file=None, ref=None):
        self.cell, self.T, self.B, self.dims, self.seed = cell, T, B, dict(dims), seed
        self.sets = list(sets)          # [(key, string value)]
        self.mode = mode                # None (auto) or a forced mode
        self.full = full                # IN also supplies x (F32), params (F32) and dy
        self.cell_file = cell_file or "stdlib/%s.cell" % cell
        self.ref = ref                  # None: the stdlib reference of cells.py; else a callable
        self.opts = {k: parse_value(v) for k, v in self.sets}
        self.hd = None                  # a cell with heads: the (H, D) its dims come from

    @property
    def label(self):
        parts = ["T=%d" % self.T, "B=%d" % self.B] + ["%s=%s" % kv for kv in self.dims.items()]
        parts += ["%s=%s" % kv for kv in self.sets]
        if self.mode:
            parts.append("mode=" + self.mode)
        if self.full:
            parts.append("inputs=all")
        return "%s[%s]" % (self.cell, ",".join(parts))


def stdlib_configs():
    import cells as c
    out = []
    for name in c.SPECS:
        if c.SPECS[name].H_default == "D":      # hgru: H defaults to D
            small, big, odd = {"D": 4}, {"H": 4, "D": 4}, {"D": 3}
        else:
            small, big, odd = {"H": 5, "D": 4}, {"H": 5, "D": 4}, {"H": 3, "D": 6}
        if "H" not in c.SPECS[name].dims(1, 1):   # a cell with heads: its dims from (H, D)
            small, big, odd = ({"H": h, "D": d} for h, d in ((3, 4), (3, 4), (2, 5)))
        out.append(Config(name, 1, 1, small, 3))
        out.append(Config(name, 7, 3, big, 11))
        out.append(Config(name, 4, 2, odd, 5, full=True))
        if c.SPECS[name].mode(c.options(name)) == "scan":
            out.append(Config(name, 7, 3, big, 13, mode="sequential"))
    out.append(Config("mgu", 1, 1, {"H": 5, "D": 4}, 3, sets=[("see_h", "true")]))
    out.append(Config("mgu", 7, 3, {"H": 5, "D": 4}, 11, sets=[("see_h", "true")]))
    out.append(Config("mgu", 4, 2, {"H": 3, "D": 6}, 5, sets=[("see_h", "true")], full=True))
    out.append(Config("leaky", 7, 3, {"H": 5, "D": 4}, 11, sets=[("alpha", "0.3")]))
    out.append(Config("hgru", 7, 3, {"D": 4}, 11, sets=[("lb", "0.25")]))
    for cf in out:   # the tests' (H, D) of a cell with heads become its dims
        sp = c.SPECS[cf.cell]
        if "H" not in sp.dims(1, 1) and "H" in cf.dims:
            cf.hd = (cf.dims["H"], cf.dims["D"])
            cf.dims = sp.dims(*cf.hd)
    order = list(c.SPECS)
    out.sort(key=lambda cf: order.index(cf.cell))
    return out


# ---------------------------------------------------------------- building IN, running cellc
def stdlib_shapes(cf):
    D = cf.dims["D"]
    H = cf.dims.get("H", D if cells.SPECS[cf.cell].H_default == "D" else None)
    if cf.hd:
        H, D = cf.hd
    return cells.shapes(cf.cell, H, D, cf.opts)


def h0_name(s):
    """A state's initial value in cellc run's files: h0.NAME, a history's hist.NAME as it is."""
    return s if s.startswith("hist.") else "h0." + s


def random_inputs(cf, state_shapes, param_shapes=None, out_size=None):
    """h0 and dfinal (F64, nonzero) for every state; with cf.full also x, params (F32) and dy (F64)."""
    rng = np.random.RandomState(1000 + cf.seed)
    t = {}
    for s, shp in sorted(state_shapes.items()):
        t[h0_name(s)] = rng.uniform(0.2, 0.9, size=(cf.B,) + tuple(shp)) * rng.choice([-1.0, 1.0], size=(cf.B,) + tuple(shp))
        t["dfinal." + s] = rng.normal(size=(cf.B,) + tuple(shp))
    if cf.full:
        t["x"] = rng.normal(size=(cf.T, cf.B, cf.dims["D"])).astype(np.float32)
        for p, shp in sorted(param_shapes.items()):
            t["param." + p] = (0.5 * rng.normal(size=shp)).astype(np.float32)
        t["dy"] = rng.normal(size=(cf.T, cf.B, out_size))
    return t


def cellc_cmd(args, cf, inp, out):
    cmd = [args.cellc, "run", cf.cell_file]
    if cf.ref is not None and args.cell:
        cmd += ["--cell", args.cell]
    cmd += ["--backend", args.backend, "--precision", args.precision,
            "--dims", ",".join("%s=%s" % kv for kv in cf.dims.items()),
            "--T", str(cf.T), "--B", str(cf.B), "--seed", str(cf.seed)]
    if inp:
        cmd += ["--inputs", inp]
    cmd += ["--out", out]
    for k, v in cf.sets:
        cmd += ["--set", "%s=%s" % (k, v)]
    if cf.mode:
        cmd += ["--mode", cf.mode]
    return cmd


def run_cellc(args, cmd):
    """Returns None on success, else a message with the command and its stderr."""
    line = " ".join(shlex.quote(c) for c in cmd)
    exe = args.cellc if os.sep in args.cellc else (shutil.which(args.cellc) or args.cellc)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return "cellc not found or not executable: %s\n    command: %s" % (args.cellc, line)
    limit = min(args.timeout, args.deadline - time.monotonic())
    if limit <= 0:
        return "not run: the time budget (--budget %ss) is spent\n    command: %s" % (args.budget, line)
    try:   # its own process group, so that a timeout ends it and whatever it started
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return "could not run: %s\n    command: %s" % (e, line)
    try:
        _, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass
        p.communicate()
        return "timed out after %.0fs\n    command: %s" % (limit, line)
    if p.returncode != 0:
        err = err.decode("utf-8", "replace").strip()
        how = "killed by signal %d" % -p.returncode if p.returncode < 0 else "exit status %d" % p.returncode
        lines = err.splitlines()
        if len(lines) > 16:      # the head (what went wrong) and the tail (where)
            lines = lines[:6] + ["[... %d lines ...]" % (len(lines) - 16)] + lines[-10:]
        return "%s\n    command: %s\n    stderr: %s" % (how, line, "\n      ".join(lines) or "(empty)")
    return None


def prepare_and_run(args, cf, workdir):
    """Writes IN, runs cellc. Returns (in_tensors, out_path, error message or None)."""
    d = os.path.join(workdir, cf.label.replace("[", "_").replace("]", "").replace(",", "_").replace("=", ""))
    os.makedirs(d, exist_ok=True)
    inp, outp = os.path.join(d, "IN.safetensors"), os.path.join(d, "OUT.safetensors")
    if cf.ref is None:
        pshapes, sshapes = stdlib_shapes(cf)
        D = cf.dims["D"]
        H = cf.dims.get("H", D)
        if cf.hd:
            H, D = cf.hd
        t = random_inputs(cf, {k: s for k, (s, c) in sshapes.items()}, {k: s for k, (s, c) in pshapes.items()},
                          cells.SPECS[cf.cell].out(H, D))
    else:
        # discover the states (names and shapes) from a run without inputs
        probe = os.path.join(d, "PROBE.safetensors")
        err = run_cellc(args, cellc_cmd(args, cf, None, probe))
        if err:
            return None, outp, err
        try:
            pt, _ = sft.read(probe)
        except Exception as e:
            return None, outp, "probe output unreadable: %s" % e
        t = random_inputs(cf, {k[3:]: v.shape[1:] for k, v in pt.items() if k.startswith("h0.")})
    sft.write(inp, t)
    return t, outp, run_cellc(args, cellc_cmd(args, cf, inp, outp))


# ---------------------------------------------------------------- the comparison
class Tracking(dict):
    """A dict that remembers which keys were read."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.used = set()

    def __getitem__(self, k):
        self.used.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        if k in self:
            self.used.add(k)
        return super().get(k, default)

    def items(self):
        self.used.update(self.keys())
        return super().items()

    def values(self):
        self.used.update(self.keys())
        return super().values()


def relerr(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return None, "shape %s, expected %s" % (list(a.shape), list(b.shape))
    if a.size == 0:
        return 0.0, ""
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("nan"), "non-finite values (cellc: %s, reference: %s)" % (
            "finite" if np.all(np.isfinite(a)) else "NaN/inf", "finite" if np.all(np.isfinite(b)) else "NaN/inf")
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), TINY)), ""


def reference(cf, out):
    """Recompute from OUT's inputs. Returns ({result name: ndarray}, expected params, states, gates)."""
    dt = torch.float64
    leaf = lambda a: torch.tensor(np.asarray(a, dtype=np.float64), dtype=dt, requires_grad=True)  # noqa: E731
    params = Tracking({k[6:]: leaf(v) for k, v in out.items() if k.startswith("param.")})
    x = leaf(out["x"])
    h0 = {k[3:]: leaf(v) for k, v in out.items() if k.startswith("h0.")}
    h0.update({k: leaf(v) for k, v in out.items() if k.startswith("hist.")})
    if cf.ref is None:
        opts = cells.options(cf.cell, cf.opts)
        pshapes, sshapes = stdlib_shapes(cf)        # from the configuration, not from OUT
        exp_params, exp_states, exp_gates = sorted(pshapes), sorted(sshapes), sorted(cells.SPECS[cf.cell].gates(opts))
        missing = [s for s in exp_states if s not in h0]
        if missing:
            raise KeyError("OUT lacks %s" % ", ".join(h0_name(s) for s in missing))
        y, finals, gates = cells.run(cf.cell, params, x, {s: h0[s] for s in exp_states}, opts)
    else:
        y, finals, gates = cf.ref(params, x, h0, dict(cf.opts))
        exp_params, exp_states, exp_gates = sorted(params.used), sorted(finals), sorted(gates)
    dy = torch.tensor(np.asarray(out["dy"], dtype=np.float64), dtype=dt) if "dy" in out else None
    if dy is None:
        raise KeyError("OUT lacks dy")
    if tuple(dy.shape) != tuple(y.shape):
        raise ValueError("OUT's dy has shape %s but the reference's y has %s" % (list(dy.shape), list(y.shape)))
    L = (y * dy).sum()
    for s in exp_states:
        if "dfinal." + s not in out:
            raise KeyError("OUT lacks dfinal.%s" % s)
        L = L + (finals[s] * torch.tensor(np.asarray(out["dfinal." + s], dtype=np.float64), dtype=dt)).sum()
    names = [("grad.param." + p, params[p]) for p in exp_params] + [("grad.x", x)] + \
            [("grad." + h0_name(s), h0[s]) for s in exp_states]
    grads = torch.autograd.grad(L, [v for _, v in names], allow_unused=True)
    res = {"y": y.detach().numpy()}
    for s in exp_states:
        res["final." + s] = finals[s].detach().numpy()
    for (n, v), g in zip(names, grads):
        res[n] = (g if g is not None else torch.zeros_like(v)).detach().numpy()
    for gname in exp_gates:
        res["gate." + gname] = gates[gname].detach().numpy()
    return res, exp_params, exp_states, exp_gates


def run_reference(cf, out, emit):
    try:
        return reference(cf, out)
    except Exception as e:
        tb = traceback.format_exc().strip().splitlines()
        emit(False, cf.label, "reference", "%s: %s\n    %s" % (type(e).__name__, e, "\n    ".join(tb[-6:])))
        return None


def check_config(args, cf, in_t, outp, err, emit):
    if err:
        emit(False, cf.label, "run", err)
        return
    try:
        out, meta = sft.read(outp)
    except Exception as e:
        emit(False, cf.label, "run", "OUT unreadable: %s" % e)
        return
    emit(True, cf.label, "run", "")
    res = None
    if cf.ref is None:       # the stdlib: what to expect comes from the spec, not from OUT
        pshapes, sshapes = stdlib_shapes(cf)
        opts = cells.options(cf.cell, cf.opts)
        exp_params, exp_states, exp_gates = sorted(pshapes), sorted(sshapes), sorted(cells.SPECS[cf.cell].gates(opts))
    else:                    # a plug-in reference: from what it reads and returns
        res = run_reference(cf, out, emit)
        if res is None:
            return
        res, exp_params, exp_states, exp_gates = res
    # names
    expected = set(["x", "dy", "y", "grad.x"] + ["param." + p for p in exp_params] +
                   ["grad.param." + p for p in exp_params] + ["gate." + g for g in exp_gates])
    for s in exp_states:
        expected |= {h0_name(s), "dfinal." + s, "final." + s, "grad." + h0_name(s)}
    have = set(out)
    miss, extra = sorted(expected - have), sorted(have - expected)
    emit(not miss and not extra, cf.label, "names",
         "" if not (miss or extra) else "missing: %s; extra: %s" % (" ".join(miss) or "-", " ".join(extra) or "-"))
    # metadata
    problems = []
    if meta is None:
        problems.append("no __metadata__")
    else:
        for k in ("cell", "dims", "options", "mode", "backend"):
            if k not in meta:
                problems.append("no %r" % k)
        if cf.ref is None and meta.get("cell", cf.cell) != cf.cell:
            problems.append("cell=%r, expected %r" % (meta.get("cell"), cf.cell))
        if meta.get("backend", args.backend) != args.backend:
            problems.append("backend=%r, expected %r" % (meta.get("backend"), args.backend))
        for k, v in cf.sets:
            if "%s=" % k not in meta.get("options", ""):
                problems.append("options=%r lacks %s" % (meta.get("options"), k))
        for k in cf.dims:
            if "%s=" % k not in meta.get("dims", ""):
                problems.append("dims=%r lacks %s" % (meta.get("dims"), k))
        want_mode = cf.mode or (cells.SPECS[cf.cell].mode(cells.options(cf.cell, cf.opts)) if cf.ref is None else None)
        if "mode" in meta and (meta["mode"] not in ("scan", "sequential") or (want_mode and meta["mode"] != want_mode)):
            problems.append("mode=%r, expected %r" % (meta["mode"], want_mode or "scan|sequential"))
    emit(not problems, cf.label, "metadata", "; ".join(problems) + ("  %s" % meta if problems and meta else ""))
    # inputs as used
    for k in sorted(in_t):
        if k not in out:
            emit(False, cf.label, k, "missing from OUT (IN supplied it)")
            continue
        e, why = relerr(out[k], np.asarray(in_t[k], dtype=np.float64))
        emit(e is not None and e < args.tol, cf.label, k, why or "relerr=%.3g (echo of IN)" % e)
    # results
    if res is None:
        res = run_reference(cf, out, emit)
        if res is None:
            return
        res = res[0]
    for k in sorted(res, key=lambda n: (0 if n == "y" else 1 if n.startswith("final.") else
                                       3 if n.startswith("gate.") else 2, n)):
        if k not in out:
            emit(False, cf.label, k, "missing from OUT")
            continue
        e, why = relerr(out[k], res[k])
        emit(e is not None and e < args.tol, cf.label, k, why or "relerr=%.3g" % e)


def load_ref(spec):
    if ":" not in spec:
        raise SystemExit("--ref wants MODULE:FUNC or path/to/file.py:FUNC, got %r" % spec)
    mod, func = spec.rsplit(":", 1)
    if mod.endswith(".py") or os.sep in mod:
        name = "cellc_ref_" + os.path.splitext(os.path.basename(mod))[0]
        sys.path.insert(0, os.path.dirname(os.path.abspath(mod)))
        s = importlib.util.spec_from_file_location(name, mod)
        m = importlib.util.module_from_spec(s)
        s.loader.exec_module(m)
    else:
        sys.path.insert(0, os.getcwd())
        m = importlib.import_module(mod)
    return getattr(m, func)


def main(argv=None):
    global torch, cells
    ap = argparse.ArgumentParser(description="Check `cellc run` against the PyTorch reference.")
    ap.add_argument("--cellc", default="bin/cellc")
    ap.add_argument("--only", action="append", default=[], help="cell names (repeat or comma-separate)")
    ap.add_argument("--backend", default="interp")
    ap.add_argument("--precision", default="f64")
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per cellc run")
    ap.add_argument("--budget", type=float, default=75.0, help="seconds for all cellc runs together")
    ap.add_argument("-j", "--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--keep", metavar="DIR", help="keep the IN/OUT files under DIR")
    ap.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    ap.add_argument("--cell-file", help="check a cell of this file against --ref instead of the stdlib")
    ap.add_argument("--ref", help="MODULE:FUNC or file.py:FUNC, the reference for --cell-file")
    ap.add_argument("--cell", help="with --cell-file: which cell (default: cellc's default, the last)")
    ap.add_argument("--dims", default="H=5,D=4", help="with --cell-file: dims")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="with --cell-file: options")
    args = ap.parse_args(argv)
    args.deadline = time.monotonic() + args.budget
    if bool(args.cell_file) != bool(args.ref):
        ap.error("--cell-file and --ref go together")

    if args.cell_file:
        ref = load_ref(args.ref)
        dims = dict(kv.split("=", 1) for kv in args.dims.split(",") if kv)
        dims = {k: int(v) for k, v in dims.items()}
        sets = [tuple(kv.split("=", 1)) for kv in args.set]
        name = args.cell or os.path.splitext(os.path.basename(args.cell_file))[0]
        configs = [Config(name, 1, 1, dims, 3, sets, cell_file=args.cell_file, ref=ref),
                   Config(name, 7, 3, dims, 11, sets, cell_file=args.cell_file, ref=ref)]
    else:
        configs = stdlib_configs()
        only = {n for o in args.only for n in o.split(",") if n}
        if only:
            unknown = only - {cf.cell for cf in configs}
            if unknown:
                ap.error("unknown cell(s): %s" % ", ".join(sorted(unknown)))
            configs = [cf for cf in configs if cf.cell in only]
    import cells as _cells
    cells = _cells

    workdir = args.keep or tempfile.mkdtemp(prefix="cellc-parity-")
    os.makedirs(workdir, exist_ok=True)
    counts = [0, 0]

    def emit(ok, label, what, detail):
        counts[0 if ok else 1] += 1
        if ok and args.quiet:
            return
        print("%s %s %s %s" % ("PASS" if ok else "FAIL", label, what, detail), flush=True)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = [ex.submit(prepare_and_run, args, cf, workdir) for cf in configs]
            import torch as _torch
            torch = _torch
            torch.set_default_dtype(torch.float64)
            for cf, fu in zip(configs, futs):
                try:
                    in_t, outp, err = fu.result()
                except Exception as e:
                    in_t, outp, err = None, None, "harness error: %s: %s" % (type(e).__name__, e)
                check_config(args, cf, in_t or {}, outp, err, emit)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("%d passed, %d failed" % (counts[0], counts[1]))
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
