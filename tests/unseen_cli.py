"""unseen_cli.py: cells written from the language spec alone (tests/cells/unseen/), the way a
researcher would write today's gated linear RNNs and the version-2 built-ins, run end to end:
`cellc check` (class per state, mode, --json), `cellc run` on interp in float64 against the cpu
and cuda-emu back ends in float32 (y, every final state, every gradient; both modes where both
apply; chunked and whole sequences for tensor states), a finite-difference check of every
gradient tensor on the float64 interpreter, PyTorch references (tests/torch/unseen.py), the module of
`cellc emit --torch` for a few; and cells that are wrong on purpose
(tests/cells/unseen/bad/), each of which must give one located error with exit status 1 that
names what the spec says it names. Ends with "N passed, M failed"."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
from clitest import check, finish, run  # noqa: E402
import sft  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELLC = os.environ.get("CELLC", os.path.join(ROOT, "bin", "cellc"))  # CELLC=build/asan/cellc: the sanitized build
CELLS = os.path.join(ROOT, "tests", "cells", "unseen")
T, B = 7, 2

# name, dims, mode of `check`, {state: class}, modes `run` is compared in
VALID = [
    ("gla_heads", "D=3,NH=2,K=3,V=2", "scan", {"S": "diagonal-linear"}, ["scan", "sequential"]),
    ("delta_rule", "D=3,NH=2,K=3,V=2", "sequential", {"S": "matrix-linear"}, ["sequential"]),
    ("block_rnn", "D=3,NH=2,P=3", "sequential", {"h": "nonlinear"}, ["sequential"]),
    ("selective_ssm", "D=3,N=2", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("mamba2_heads", "D=3,NH=2,P=2,N=3", "scan", {"S": "diagonal-linear"}, ["scan", "sequential"]),
    ("mlstm_stab", "D=3,NH=2,K=3,V=2", "sequential",
     {"C": "nonlinear", "n": "nonlinear", "m": "nonlinear"}, ["sequential"]),
    ("where_ops", "D=3,H=4", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("softmax_axes", "D=3,A=2,B=2,C=3", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("shapes_misc", "D=3,H=4", "scan", {"h": "diagonal-linear", "S": "diagonal-linear"},
     ["scan", "sequential"]),
    ("prev_conv", "D=3,H=4", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("complex_lin", "D=3,H=4,N=2", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("amax_heads", "D=3,NH=2,P=3", "sequential", {"h": "nonlinear"}, ["sequential"]),
    ("linear_heads", "D=3,NH=2,P=3", "sequential", {"h": "matrix-linear"}, ["sequential"]),
    ("dense_linear", "D=3,H=4", "sequential", {"h": "matrix-linear", "M": "nonlinear"},
     ["sequential"]),
    ("chain_tensor", "D=3,H=4", "scan", {"S": "diagonal-linear", "Q": "diagonal-linear"},
     ["scan", "sequential"]),
    ("softmax_state", "D=3,NH=2,P=3", "sequential", {"h": "nonlinear", "m": "nonlinear"},
     ["sequential"]),
    ("complex_heads", "D=3,NH=2,K=3", "scan", {"S": "diagonal-linear"}, ["scan", "sequential"]),
    ("rwkv_like", "D=3,NH=2,K=2", "sequential", {"S": "diagonal-linear"}, ["sequential"]),
    ("rglru_like", "D=3,H=4", "scan", {"h": "diagonal-linear"}, ["scan", "sequential"]),
    ("roundtrip", "D=3,NH=2,K=3", "sequential", {"S": "matrix-linear"}, ["sequential"]),
    ("conv_gate", "D=3,H=4", "scan", {"h": "diagonal-linear", "S": "diagonal-linear"},
     ["scan", "sequential"]),
]


# file under bad/, command and extra flags, the line of the error, what the message must name
BAD = [
    ("broadcast", ["check"], 6, ["shape mismatch", "[2, H]", "[3, H]"]),
    ("axis_range", ["check"], 7, ["axis 2", "rank 2"]),
    ("axis_neg", ["check"], 6, ["axis -2", "rank 1"]),
    ("prev_state", ["check"], 7, ["prev", "'u'", "previous value of state 'h'"]),
    ("reshape_count", ["check"], 6, ["reshape", "[H]", "2*H"]),
    ("cmp_outside", ["check"], 6, ["comparison", "where"]),
    ("output_matrix", ["check"], 7, ["output", "[H, D]", "vector"]),
    ("matmul_shape", ["check"], 8, ["'@'", "[NH, P, P]", "[NH, 1, P]"]),
    ("rank4", ["check"], 5, ["at most 3"]),
    ("where_not_cmp", ["check"], 6, ["where", "comparison"]),
    ("conv_shape", ["check"], 8, ["conv", "[D, 4]", "[H]"]),
    ("slice_range", ["check", "--dims", "H=4,D=3"], 6, ["slice", "start 2", "length 4", "axis 0"]),
    ("slice_range", ["run", "--dims", "H=4,D=3", "--out", "@OUT"], 6, ["slice", "axis 0"]),
    ("groupnorm_split", ["check", "--dims", "H=4,D=3"], 6, ["groupnorm", "4", "3 groups"]),
    ("scan_nonlinear", ["check", "--mode", "scan"], 8, ["scan", "'S'", "nonlinear", "tanh(S)"]),
    ("buffer_update", ["check"], 7, ["'b'", "buffer"]),
    ("transpose_vec", ["check"], 6, ["transpose", "[H]"]),
    ("outer_batch", ["check"], 10, ["outer", "[NH, K]", "[1, 1, K]"]),
    ("prev_param", ["check"], 7, ["'b'", "param", "prev"]),
    ("prev_lag0", ["check"], 7, ["prev", "lag", "0"]),
    ("complex_where", ["check"], 6, ["where", "complex"]),
    ("eye_dim", ["check"], 6, ["'@'", "[D, D]", "[H]"]),
    ("unsqueeze_axis", ["check"], 6, ["axis -3", "rank 1", "-2 to 1"]),
]


# cellc emit --torch compiles what it writes (about 2 s a cell): a few cells of different kinds
EMITTED = ("gla_heads", "delta_rule", "prev_conv", "complex_heads")


ORTHOGONAL = {}  # cell: its rank-3 params initialized orthogonal (from check --json)


def cellc(*args, timeout=120):
    return run([CELLC, *args], timeout)


def rel_err(a, b):
    """The largest error of a against b over b's largest value (1e-30 floor)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def loss(out):
    """L = sum(y * dy) + sum(final * dfinal) of a run's output tensors."""
    total = float(np.sum(out["y"] * out["dy"]))
    for name, v in out.items():
        if name.startswith("final."):
            total += float(np.sum(v * out["d" + name]))
    return total


def compared(out):
    return sorted(n for n in out if n == "y" or n.startswith(("final.", "grad.", "gate.")))


def check_json(name, dims, mode, classes):
    path = os.path.join(CELLS, name + ".cell")
    r = cellc("check", path, "--dims", dims)
    check(f"{name}: check", r.rc == 0 and f"mode {mode}" in r.out, r.why())
    r = cellc("check", path, "--dims", dims, "--json")
    try:
        doc = json.loads(r.out)
    except ValueError:
        check(f"{name}: check --json parses", False, r.why())
        return set()
    cell = doc["cells"][0]
    complex_names = {("buffer." if q.get("buffer") else "param.") + q["name"] for q in cell["params"] if q.get("complex")}
    complex_names |= {"h0." + st["name"] for st in cell["states"] if st.get("complex")}
    ORTHOGONAL[name] = [q["name"] for q in cell["params"] if q.get("init") == "orthogonal" and len(q["shape"]) == 3]
    got = {st["name"]: st.get("class") for st in cell["states"]}
    ok = all(got.get(n) == c for n, c in classes.items()) and all(
        isinstance(st.get("bytes_per_token"), int) and isinstance(st.get("shape"), list)
        for st in cell["states"])
    check(f"{name}: check --json: states[].class {classes}, shape, bytes_per_token", ok, f"got {cell['states']}")
    mem = cell.get("memory") or {}
    check(f"{name}: check --json: memory.train_peak_bytes_per_token and memory.chunk",
          isinstance(mem.get("train_peak_bytes_per_token"), int) and "chunk" in mem, str(mem))
    return complex_names


def inputs_for(name, dims, tmp):
    """A float64 interp run's file with nonzero initial states, histories and final gradients."""
    path = os.path.join(CELLS, name + ".cell")
    first = os.path.join(tmp, name + ".gen.safetensors")
    r = cellc("run", path, "--dims", dims, "--backend", "interp", "--precision", "f64",
              "--T", str(T), "--B", str(B), "--seed", "3", "--out", first)
    if r.rc != 0:
        return None, r
    t = sft.load(first)
    rng = np.random.default_rng(11)
    keep = {}
    for n, v in t.items():
        if n.startswith(("param.", "buffer.")) or n in ("x", "dy"):
            keep[n] = v
        elif n.startswith("h0.") and "param." + n[3:] + ".init" in t:
            continue  # a learned initial state: h0 would take its place
        elif n.startswith(("h0.", "hist.", "dfinal.")):
            keep[n] = 0.5 * rng.standard_normal(v.shape)
    inp = os.path.join(tmp, name + ".in.safetensors")
    sft.write(inp, keep)
    return inp, r


def run_one(path, dims, inp, out, backend, precision="f32", mode=None, chunk=None):
    args = ["run", path, "--dims", dims, "--backend", backend, "--precision", precision,
            "--inputs", inp, "--out", out]
    if mode:
        args += ["--mode", mode]
    if chunk is not None:
        args += ["--set", f"chunk={chunk}"]
    return cellc(*args, timeout=300)


def fd_check(name, path, dims, inp, ref, tmp):
    """Central differences of L on the float64 interpreter, two entries of every gradient
    tensor (the runs cost more than the cells; the per-op finite differences are test_ops)."""
    base = sft.load(inp)
    rng = np.random.default_rng(5)
    worst, where = 0.0, ""
    for g in sorted(n for n in ref if n.startswith("grad.")):
        src = g[len("grad."):]
        if src not in base:
            continue
        flat = base[src].reshape(-1)
        for _ in range(2):
            i = int(rng.integers(flat.size))
            vals = []
            for s in (1, -1):
                t = dict(base)
                p = t[src].copy().reshape(-1)
                eps = 1e-6 * max(1.0, abs(p[i]))
                p[i] += s * eps
                t[src] = p.reshape(base[src].shape)
                fin = os.path.join(tmp, "fd.safetensors")
                sft.write(fin, t)
                fout = os.path.join(tmp, "fd.out.safetensors")
                r = run_one(path, dims, fin, fout, "interp", "f64")
                if r.rc != 0:
                    check(f"{name}: finite differences of {g}", False, r.why())
                    return
                vals.append(loss(sft.load(fout)))
            fd = (vals[0] - vals[1]) / (2 * eps)
            an = float(ref[g].reshape(-1)[i])
            err = abs(fd - an) / max(1.0, abs(an))
            if err > worst:
                worst, where = err, f"{g}[{i}]: fd {fd} analytic {an}"
    check(f"{name}: finite differences of every gradient (float64 interp, worst {worst:.1e})",
          worst < 1e-5, where)


def torch_check(name, ref, complex_names):
    """The cell's PyTorch reference (tests/torch/unseen.py, float64 autograd) against the float64
    interpreter: y, every final state and every gradient."""
    import unseen as refs  # tests/torch: imports torch, which takes a second
    if name not in refs.REFS:
        return
    errs = refs.compare(name, ref, complex_names)
    bad = {n: e for n, e in errs.items() if not e < 1e-9}
    missing = [n for n in compared(ref) if n not in errs and not n.startswith("gate.")]
    check(f"{name}: PyTorch float64 reference: y, finals, every gradient (worst {max(errs.values()):.1e})",
          not bad and not missing, f"differ {bad} missing {missing}")


def emitted_torch(name, path, dims, mode, t, tmp):
    """`cellc emit --torch`: the emitted module, given the reference run's params, x, initial
    states and histories, gives its y, finals and every gradient (float32: 1e-4)."""
    import importlib.util
    import torch
    out = os.path.join(tmp, name + "_emit")
    r = cellc("emit", path, "--dims", dims, "--mode", mode, "--torch", "--out", out)
    check(f"{name}: emit --torch --mode {mode}", r.rc == 0, r.why())
    if r.rc != 0:
        return
    spec = importlib.util.spec_from_file_location(name + "_torch", os.path.join(out, name + "_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.Module()
    with torch.no_grad():
        for n, v in list(m.named_parameters()) + list(m.named_buffers()):
            v.copy_(torch.tensor(t[("buffer." if n in mod.BUFFERS else "param.") + n]))
    x = torch.tensor(t["x"], dtype=torch.float32, requires_grad=True)
    B = x.shape[1]
    h0, files = {}, {}
    for sname, shape, cplx in mod.STATES:  # a history hist.NAME is the module's state hist_NAME
        key = "h0." + sname if "h0." + sname in t else "hist." + sname[len("hist_"):]
        files[sname] = key
        full = (B,) + tuple(shape) + ((2,) if cplx else ())
        h0[sname] = torch.tensor(t[key], dtype=torch.float32).reshape(full).requires_grad_()
    y, fin = m(x, h0)
    loss = (y * torch.tensor(t["dy"], dtype=torch.float32)).sum()
    errs = {"y": rel_err(y.detach().numpy(), t["y"])}
    for sname, f in fin.items():
        fk = "final." + files[sname].split(".", 1)[1] if files[sname].startswith("h0.") else "final." + files[sname]
        loss = loss + (f * torch.tensor(t["d" + fk], dtype=torch.float32).reshape(f.shape)).sum()
        errs[fk] = rel_err(f.detach().numpy().reshape(t[fk].shape), t[fk])
    loss.backward()
    errs["grad.x"] = rel_err(x.grad.numpy(), t["grad.x"])
    for n, v in m.named_parameters():
        if v.requires_grad:
            errs["grad.param." + n] = rel_err(v.grad.numpy(), t["grad.param." + n])
    for sname, v in h0.items():
        g = "grad." + files[sname]
        errs[g] = rel_err(v.grad.numpy().reshape(t[g].shape), t[g])
    worst = max(errs, key=errs.get)
    check(f"{name}: the emitted PyTorch module matches interp f64 (worst {errs[worst]:.1e} at {worst})",
          errs[worst] < 1e-4, str(errs))


def valid(tmp, backends):
    for name, dims, mode, classes, modes in VALID:
        path = os.path.join(CELLS, name + ".cell")
        complex_names = check_json(name, dims, mode, classes)
        inp, r = inputs_for(name, dims, tmp)
        if inp is None:
            check(f"{name}: run interp f64", False, r.why())
            continue
        refp = os.path.join(tmp, name + ".ref.safetensors")
        r = run_one(path, dims, inp, refp, "interp", "f64")
        if r.rc != 0:
            check(f"{name}: run interp f64", False, r.why())
            continue
        ref = sft.load(refp)
        for q in ORTHOGONAL.get(name, []):  # spec section 9: orthogonal per head of [NH, O, I]
            R = ref["param." + q]
            gram = np.einsum("hoi,hoj->hij", R, R) if R.shape[1] >= R.shape[2] else np.einsum("hio,hjo->hij", R, R)
            err = float(np.max(np.abs(gram - np.eye(gram.shape[1]))))
            check(f"{name}: param {q} {list(R.shape)} is orthogonal per head (worst {err:.1e})", err < 1e-12)
        fd_check(name, path, dims, inp, ref, tmp)
        torch_check(name, ref, complex_names)
        tensor_state = any(len(ref[n].shape) >= 3 for n in ref if n.startswith("final.")
                           and not n.startswith("final.hist."))
        runs = [("interp", "f32", None, None)]
        for backend in backends:
            for m in modes:
                runs.append((backend, "f32", m, None))
                if tensor_state and backend == "cpu" and m == modes[0]:
                    runs.append((backend, "f32", m, 3))
                    runs.append((backend, "f32", m, 0))
        for backend, prec, m, chunk in runs:
            label = f"{name}: {backend} {prec}" + (f" --mode {m}" if m else "") + \
                    (f" chunk={chunk}" if chunk is not None else "")
            outp = os.path.join(tmp, name + ".o.safetensors")
            r = run_one(path, dims, inp, outp, backend, prec, m, chunk)
            if r.rc != 0:
                check(label, False, r.why())
                continue
            out = sft.load(outp)
            names = compared(ref)
            missing = [n for n in names if n not in out]
            errs = {n: rel_err(out[n], ref[n]) for n in names if n in out}
            bad = {n: e for n, e in errs.items() if not e < 2e-4}
            check(f"{label} matches interp f64 (worst {max(errs.values()):.1e})",
                  not missing and not bad, f"missing {missing} differ {bad}")
        if name in EMITTED:
            emitted_torch(name, path, dims, modes[0], ref, tmp)


def bad(tmp):
    """Each wrong cell: exit status 1, one located error at its line naming what it must."""
    for name, args, line, words in BAD:
        path = os.path.join(CELLS, "bad", name + ".cell")
        args = [a.replace("@OUT", os.path.join(tmp, "bad.safetensors")) for a in args]
        r = cellc(args[0], path, *args[1:])
        first = r.err.splitlines()[0] if r.err else ""
        ok = (r.rc == 1 and first.startswith(f"{path}:{line}:") and ": error: " in first
              and all(w in first for w in words) and len(r.err.splitlines()) >= 3
              and "^" in r.err.splitlines()[2] and r.out == "")
        check(f"bad/{name}: {args[0]} gives a located error naming {words}", ok, r.why())


def main():
    backends = ["cpu", "cuda-emu"]
    if "--no-emu" in sys.argv:
        backends = ["cpu"]
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    global VALID
    if only:
        VALID = [c for c in VALID if c[0] in only]
    with tempfile.TemporaryDirectory() as tmp:
        valid(tmp, backends)
        bad(tmp)
    finish()


if __name__ == "__main__":
    main()
