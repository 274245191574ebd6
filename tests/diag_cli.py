"""cellc diag end to end (spec/cli.md "cellc diag", seeds.md section 5, docs/diagnostics.md):
the exact step Jacobians in jacobians.safetensors against a PyTorch autograd Jacobian of the same
step (tests/torch/cells.py, float64, from the checkpoint's params and the dumped inputs) for every
stdlib cell, complex ones included, to 1e-9; the gates dumped against PyTorch's; diag.json's
shape and its histograms counting every gate value once; the plots; --compare; the error cases
and their exit statuses; the training-time probe [log] grad_per_step.
One PASS/FAIL line per check; the last line is "N passed, M failed"; exit 1 on any failure."""
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import clitest  # noqa: E402
from clitest import check, finish  # noqa: E402

import torch  # noqa: E402

import cells  # noqa: E402
import sft  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 120
tmp = tempfile.mkdtemp(prefix="cellc-diag-")
torch.set_default_dtype(torch.float64)

CFG = """
[task]
name     = copying
tokens   = 6
memorize = 2
length   = 3

[model]
layers  = 2
width   = 4
hidden  = 4

[train]
steps = 2
batch = 3
lr    = 1e-2
seed  = 3
"""

# every stdlib cell, with the options that change its structure
# (the Jacobian reference takes the cells with a dim H and states of their own: version 1's)
def _plain(c):
    return "H" in cells.SPECS[c].dims(4, 4) and not any(k.startswith("hist.") for k in cells.SPECS[c].states(4, 4))


CASES = [(c, {}) for c in sorted(cells.SPECS) if _plain(c)] + [("mgu", {"see_h": True})]
# the others (heads, histories): diag runs on a trained checkpoint
OTHER_CELLS = [c for c in sorted(cells.SPECS) if not _plain(c)]


def cellc(*args):
    return clitest.run([CELLC] + list(args), TIMEOUT)


def write(name, text):
    return clitest.write_in(tmp, name, text)


def opt_sets(opts):
    out = []
    for k, v in opts.items():
        out += ["--set", "model.option.%s=%s" % (k, str(v).lower())]
    return out


def state_vector(name, s, H):
    """The states as s of the spec: declaration order, a complex state's real parts then imaginary."""
    parts = []
    for k, (shp, c) in cells.SPECS[name].states(H, H).items():
        v = s[k][0]
        parts += [v.real, v.imag] if c else [v]
    return torch.cat(parts)


def states_of(name, vec, H):
    out, off = {}, 0
    for k, (shp, c) in cells.SPECS[name].states(H, H).items():
        n = shp[0]
        if c:
            out[k] = torch.complex(vec[off:off + n], vec[off + n:off + 2 * n]).unsqueeze(0)
            off += 2 * n
        else:
            out[k] = vec[off:off + n].unsqueeze(0)
            off += n
    return out


def torch_jacobians(name, opts, params, x, h0, H):
    """J_t = d s_t / d s_{t-1} and the gates of the sequence, by autograd on cells.py's step."""
    sp = cells.SPECS[name]
    o = cells.options(name, opts)
    pspec, sspec = cells.shapes(name, H, x.shape[1], o)
    p = {k: (cells.as_complex(params[k]) if pspec[k][1] else params[k]) for k in pspec}
    s = {k: (cells.as_complex(h0[k]) if sspec[k][1] else h0[k]).unsqueeze(0) for k in sspec}
    Js, gates = [], {}
    for t in range(x.shape[0]):
        xt = x[t:t + 1]

        def f(vec):
            new, _, _ = sp.step(p, xt, states_of(name, vec, H), o)
            return state_vector(name, new, H)
        vec = state_vector(name, s, H)
        Js.append(torch.autograd.functional.jacobian(f, vec))
        new, _, g = sp.step(p, xt, s, o)
        for k, v in g.items():
            gates.setdefault(k, []).append(v[0])
        s = new
    return torch.stack(Js), {k: torch.stack(v) for k, v in gates.items()}


def layer_params(ckpt, k):
    pre = "layer.%d." % k
    return {n[len(pre):]: torch.tensor(v, dtype=torch.float64) for n, v in ckpt.items()
            if n.startswith(pre) and "." not in n[len(pre):]}


def check_jacobians(name, opts):
    tag = name + ("(" + ",".join("%s=%s" % kv for kv in opts.items()) + ")" if opts else "")
    cfg = write("copy.cfg", CFG)
    run = os.path.join(tmp, "run-" + tag)
    r = cellc("train", "stdlib/%s.cell" % name, cfg, "--out", run, *opt_sets(opts))
    check("train %s for its checkpoint" % tag, r.rc == 0, r.why())
    if r.rc:
        return
    out = os.path.join(tmp, "diag-" + tag)
    r = cellc("diag", "stdlib/%s.cell" % name, cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--out", out, *opt_sets(opts))
    check("diag %s exits 0" % tag, r.rc == 0, r.why())
    if r.rc:
        return
    ckpt = sft.load(os.path.join(run, "checkpoint.safetensors"))
    jac = sft.load(os.path.join(out, "jacobians.safetensors"))
    for k in range(2):
        x = torch.tensor(jac["layer.%d.x" % k])
        H = 4
        h0 = {s: torch.tensor(jac["layer.%d.h0.%s" % (k, s)]) for s in cells.SPECS[name].states(H, H)}
        J_ref, g_ref = torch_jacobians(name, opts, layer_params(ckpt, k), x, h0, H)
        J = torch.tensor(jac["layer.%d.J" % k])
        err = (J - J_ref).abs().max().item() if J.shape == J_ref.shape else float("inf")
        check("%s layer %d: J [T, S, S] = %s matches autograd to 1e-9 (max |diff| %.2e)" % (
            tag, k, list(J.shape), err), err <= 1e-9, "shapes %s vs %s" % (list(J.shape), list(J_ref.shape)))
        gerr = 0.0
        for g, v in g_ref.items():
            got = torch.tensor(jac["layer.%d.gate.%s" % (k, g)])
            gerr = max(gerr, (got.reshape(v.shape) - v).abs().max().item())
        check("%s layer %d: gates match PyTorch's (max |diff| %.2e)" % (tag, k, gerr), gerr <= 1e-12)
    with open(os.path.join(out, "diag.json")) as f:
        d = json.load(f)
    T = x.shape[0]
    ok = all(sum(g["hist"]) == T * 3 * len(jac["layer.%d.gate.%s" % (L["layer"], g["name"])][0])
             for L in d["layers"] for g in L["gates"])
    check("%s: every gate value counted once in the histograms (T B units per gate)" % tag, ok)


ADDING = """
[task]
name   = adding
length = 12

[model]
width  = 4
hidden = 6

[train]
steps = 2
batch = 4
seed  = 2
"""


def svg_text(path):
    """The text an SVG shows (PLplot writes each character as a character reference)."""
    with open(path) as f:
        return html.unescape(re.sub(r"<[^>]+>", "", f.read()))


def svg_texts(path):
    """Each text element of an SVG, as shown."""
    with open(path) as f:
        return [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in re.findall(r"<text.*?</text>", f.read(), re.S)]


def is_number(t):
    try:
        float(t)
        return True
    except ValueError:
        return False


def check_plot_layout(d, name):
    """plots.json against the SVGs of diag directory d: a PNG beside every SVG; each panel's axis
    names in its figure; tick labels on every numeric axis; a log axis only over a decade or more;
    the legends below the data boxes, outside them; one quantity per y axis."""
    svgs = sorted(f for f in os.listdir(d) if f.endswith(".svg"))
    ok = svgs and all(open(os.path.join(d, f[:-4] + ".png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n" for f in svgs)
    check("%s: a PNG beside every SVG" % name, ok, str(os.listdir(d)))
    with open(os.path.join(d, "plots.json")) as f:
        figs = json.load(f)
    check("%s: plots.json names every SVG" % name, sorted(f["file"] for f in figs) == svgs, str([f["file"] for f in figs]))
    bad = []
    for fig in figs:
        texts = svg_texts(os.path.join(d, fig["file"]))
        numeric_axes = sum((p["xscale"] != "names") + 1 for p in fig["panels"])
        if sum(is_number(t) for t in texts) < 2 * numeric_axes:
            bad.append((fig["file"], "fewer than two tick labels per axis", texts))
        for p in fig["panels"]:
            if not any(t.startswith(p["ylabel"]) for t in texts) or not any(t.startswith(p["xlabel"]) for t in texts):
                bad.append((fig["file"], "axis names", p["ylabel"], p["xlabel"]))
            lo, hi = p["ydata"]
            if p["yscale"] == "log" and not (lo > 0 and hi / lo >= 10):
                bad.append((fig["file"], "log axis under a decade", lo, hi))
            if p["yscale"] == "linear" and lo > 0 and hi / lo < 10 and not (p["y"][0] <= lo and hi <= p["y"][1]):
                bad.append((fig["file"], "linear range misses the data", p["y"], lo, hi))
            lb, b = p["legend_box"], p["box"]
            if p["legend"] and not lb[3] <= min(q["box"][2] for q in fig["panels"]):
                bad.append((fig["file"], "legend overlaps the data", lb, b))
            if "AI_10" in p["ylabel"] and "CE_10" in p["ylabel"]:
                bad.append((fig["file"], "AI_10 and CE_10 on one axis"))
    check("%s: tick labels and names on every axis, log only over a decade, legends outside the data, "
          "one quantity per axis" % name, not bad, str(bad)[:600])
    return figs


def load_json(d):
    with open(os.path.join(d, "diag.json")) as f:
        return json.load(f)


def check_json_and_plots():
    """diag.json's keys (spec/cli.md) on a token task and a real-valued one; the plots; --compare."""
    cfg = write("copy.cfg", CFG)
    init = os.path.join(tmp, "d-init")
    r = cellc("diag", "stdlib/gru.cell", cfg, "--out", init, "--batches", "2")
    check("diag at initialization exits 0 and prints a summary", r.rc == 0 and "layer 1:" in r.out, r.why())
    if r.rc:
        return
    d = load_json(init)
    L = d["layers"][0]
    check("diag.json: cell, task, checkpoint null, two layers",
          d["cell"] == "gru" and d["task"] == "copying" and d["checkpoint"] is None and len(d["layers"]) == 2, str(d)[:300])
    T = len(L["grad_norm_per_step"])
    ok = all(len(g["hist"]) == 50 and sum(g["hist"]) == T * 3 * 2 * 4 for g in L["gates"])
    check("two batches: every gate value of both counted once (T B units batches)", ok, str(T))
    check("gates have mean, below_0.1, above_0.9 and by_token (a token task)",
          all({"mean", "below_0.1", "above_0.9", "by_token"} <= set(g) for g in L["gates"]) and
          all(0 < g["mean"] < 1 for g in L["gates"]) and "state_change_by_token" in L, str(L["gates"][0])[:200])
    j = L["jacobian"]
    check("jacobian: lags from 1, eff_lr 1 at lag 1, AI10 >= 1, 0 < CE10 <= 1, predictor z, a slope",
          j["lags"][0] == 1 and abs(j["eff_lr"][0] - 1) < 1e-12 and all(a >= 1 for a in j["AI10"]) and
          all(0 < c <= 1 + 1e-12 for c in j["CE10"]) and j["predictor"] == "z" and isinstance(j["slope"], float), str(j)[:300])
    check("preact: the input and state parts of z and r", [p["name"] for p in L["preact"]] == ["z", "r"] and
          all(p["state"] is not None and sum(p["input"]["sigmoid_hist"]) == T * 24 for p in L["preact"]), str(L["preact"])[:200])
    pg = L.get("param_grad") or {}
    check("param_grad: the per-sample parameter gradients of the batch's sequences, AI10 >= 1, 0 < CE10 <= 1",
          pg.get("samples") == 3 and pg["AI10"] is not None and pg["AI10"] >= 1 and 0 < pg["CE10"] <= 1 + 1e-12, str(pg))
    plots = ["gates_layer0.svg", "preact_layer0.svg", "grad_per_step_layer0.svg", "eff_lr_layer0.svg",
             "anisotropy_layer0.svg", "S_vs_predictor_layer0.svg", "gates_layer1.svg", "tokens_layer0.svg"]
    ok = all(open(os.path.join(init, f)).read().lstrip().startswith("<?xml") for f in plots)
    check("one SVG per diagnostic, per layer", ok, str(os.listdir(init)))
    text = svg_text(os.path.join(init, "S_vs_predictor_layer0.svg"))
    check("the S plot is titled and labelled", "sensitivity" in text and "product of z" in text)
    figs = {f["file"]: f for f in check_plot_layout(init, "diag at initialization")}
    an = figs["anisotropy_layer0.svg"]["panels"]
    check("anisotropy: AI_10 and CE_10 in panels of their own, each axis named",
          len(an) == 2 and "AI_10" in an[0]["ylabel"] and "CE_10" in an[1]["ylabel"], str(an)[:300])
    tk = figs["tokens_layer0.svg"]["panels"]
    names = svg_texts(os.path.join(init, "tokens_layer0.svg"))
    check("tokens: gate means and the state change in separate panels, the tokens named (blank, marker)",
          len(tk) == 2 and "gate mean" in tk[0]["ylabel"] and "h_t - h_t-1" in tk[1]["ylabel"] and
          tk[0]["xnames"][0] == "blank" and tk[0]["xnames"][-1] == "marker" and "blank" in names and "marker" in names,
          str(tk)[:300])
    run = os.path.join(tmp, "run-gru-compare")
    r = cellc("train", "stdlib/gru.cell", cfg, "--out", run)
    after = os.path.join(tmp, "d-after")
    r = cellc("diag", "stdlib/gru.cell", cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--out", after, "--compare", init)
    text = svg_text(os.path.join(after, "gates_layer0.svg")) if r.rc == 0 else ""
    check("--compare: the earlier run's histograms next to this one's", r.rc == 0 and "step 2" in text and "d-init" in text,
          r.why())
    if r.rc == 0:
        figs = {f["file"]: f for f in check_plot_layout(after, "diag --compare")}
        g = figs["gates_layer0.svg"]["panels"]
        check("--compare: the before and after panels on one y range",
              len(g) == 4 and all(p["y"] == g[0]["y"] for p in g) and "d-init" in g[0]["title"], str(g)[:400])
    ad = write("adding.cfg", ADDING)
    out = os.path.join(tmp, "d-adding")
    r = cellc("diag", "stdlib/multi_gate.cell", ad, "--out", out)
    d = load_json(out) if r.rc == 0 else {"layers": [{}]}
    L = d["layers"][0]
    check("a real-valued task: no by_token, no state_change_by_token; predictor 1-g",
          r.rc == 0 and "by_token" not in L["gates"][0] and "state_change_by_token" not in L and
          L["jacobian"]["predictor"] == "1-g" and len(L["grad_norm_per_step"]) == 12, r.why())
    check("... and the complement's predictor g (seeds.md's prod g) with its own slope",
          r.rc == 0 and L["jacobian"]["predictor_complement"] == "g" and isinstance(L["jacobian"]["slope_complement"], float))
    out = os.path.join(tmp, "d-scalar")
    r = cellc("diag", "stdlib/scalar_gate.cell", ad, "--out", out)
    j = load_json(out)["layers"][0]["jacobian"] if r.rc == 0 else {}
    check("scalar_gate: the scalar gate, broadcast over h, found as the predictor 1-g", r.rc == 0 and j["predictor"] == "1-g",
          r.why())
    out = os.path.join(tmp, "d-elman")
    r = cellc("diag", "stdlib/elman.cell", ad, "--out", out)
    d = load_json(out) if r.rc == 0 else {"layers": [{"jacobian": {}}]}
    check("a cell without gates: a note, exit 0, no gates, predictor and slope null",
          r.rc == 0 and "has no gates" in r.err and d["layers"][0]["gates"] == [] and
          d["layers"][0]["jacobian"]["predictor"] is None and d["layers"][0]["jacobian"]["slope"] is None, r.why())
    out = os.path.join(tmp, "d-leaky")
    r = cellc("diag", "stdlib/leaky.cell", ad, "--out", out, "--set", "model.option.alpha=0.25")
    j = load_json(out)["layers"][0]["jacobian"] if r.rc == 0 else {}
    check("leaky: the constant 1 - alpha multiplies h (predictor coef(h)), a slope", r.rc == 0 and
          j["predictor"] == "coef(h)" and isinstance(j["slope"], float), r.why())


def check_errors():
    cfg = write("copy.cfg", CFG)
    ad = write("adding.cfg", ADDING)
    r = cellc("diag", "stdlib/gru.cell", ad, "--by-token", "--out", os.path.join(tmp, "e1"))
    check("--by-token on a task without tokens: exit 1, says why", r.rc == 1 and "not tokens" in r.err and
          not os.path.exists(os.path.join(tmp, "e1")), r.why())
    bad = write("bad.safetensors", "not a safetensors file at all")
    r = cellc("diag", "stdlib/gru.cell", cfg, "--checkpoint", bad, "--out", os.path.join(tmp, "e2"))
    check("a malformed checkpoint: exit 1 naming the file", r.rc == 1 and "bad.safetensors" in r.err, r.why())
    run = os.path.join(tmp, "run-mgu-errors")
    cellc("train", "stdlib/mgu.cell", cfg, "--out", run)
    r = cellc("diag", "stdlib/gru.cell", cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--out", os.path.join(tmp, "e3"))
    check("a checkpoint of another cell: exit 1, 'another model'", r.rc == 1 and "another model" in r.err, r.why())
    r = cellc("diag", "stdlib/mgu.cell", cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--set", "model.hidden=5", "--out", os.path.join(tmp, "e4"))
    check("a checkpoint of another size: exit 1, names the shapes", r.rc == 1 and "shape" in r.err, r.why())
    r = cellc("diag", "stdlib/gru.cell", cfg, "--frobnicate")
    check("an unknown flag: exit 2 with the usage", r.rc == 2 and "usage: cellc diag" in r.err, r.why())
    r = cellc("diag", "stdlib/gru.cell")
    check("no TASK.cfg: exit 2", r.rc == 2, r.why())
    r = cellc("diag", "stdlib/gru.cell", cfg, "--batches", "0")
    check("--batches 0: exit 2", r.rc == 2, r.why())
    full = os.path.join(tmp, "full")
    os.makedirs(full, exist_ok=True)
    write("full/keep.txt", "x")
    r = cellc("diag", "stdlib/gru.cell", cfg, "--out", full)
    check("--out holding files: exit 3, the files left alone", r.rc == 3 and os.path.exists(os.path.join(full, "keep.txt")) and
          not [f for f in os.listdir(tmp) if ".tmp-" in f], r.why())
    r = cellc("diag", "stdlib/gru.cell", cfg, "--compare", tmp, "--out", os.path.join(tmp, "e5"))
    check("--compare without a diag.json: exit 1", r.rc == 1 and "diag.json" in r.err, r.why())
    r = cellc("diag", "--help")
    check("diag --help: the usage and exit statuses, exit 0", r.rc == 0 and "--checkpoint" in r.out and "70" in r.out, r.why())
    r = cellc("diag", "stdlib/gru.cell", write("u.cfg", CFG + "\n[model]\nwidht = 3\n"))
    check("an unknown cfg key: exit 1", r.rc == 1, r.why())


def check_train_probe():
    cfg = write("probe.cfg", CFG.replace("steps = 2", "steps = 4") + "\n[log]\nevery = 2\ngrad_per_step = true\n")
    run = os.path.join(tmp, "run-probe")
    r = cellc("train", "stdlib/gru.cell", cfg, "--out", run)
    path = os.path.join(run, "grad_per_step.json")
    ok = r.rc == 0 and os.path.exists(path)
    g = json.load(open(path)) if ok else {}
    ok = ok and g["batches_probed"] == 2 and len(g["layers"]) == 2
    T = len(g["layers"][0]["max_grad_norm_per_step"]) if ok else 0
    ok = ok and T == 7 and all(v >= 0 for L in g["layers"] for v in L["max_grad_norm_per_step"]) and \
        all(max(L["max_grad_norm_per_step"]) > 0 for L in g["layers"])
    check("[log] grad_per_step = true: grad_per_step.json, the largest ||dL/dh_t|| per layer and step", ok, r.why())
    check("... and its plot", ok and "largest" in svg_text(os.path.join(run, "grad_per_step.svg")))
    r = cellc("train", "stdlib/gru.cell", cfg, "--out", os.path.join(tmp, "run-noprobe"), "--set", "log.grad_per_step=false")
    check("grad_per_step = false: no grad_per_step.json", r.rc == 0 and
          not os.path.exists(os.path.join(tmp, "run-noprobe", "grad_per_step.json")), r.why())
    bad = write("probe-bad.cfg", CFG + "\n[log]\ngrad_per_stp = true\n")
    r = cellc("train", "stdlib/gru.cell", bad, "--out", os.path.join(tmp, "run-bad"))
    check("an unknown [log] key is still an error naming the nearest key", r.rc == 1 and "grad_per_step" in r.err, r.why())


def check_interrupt():
    cfg = write("copy.cfg", CFG)
    out = os.path.join(tmp, "d-interrupted")
    p = subprocess.Popen([CELLC, "diag", "stdlib/gru.cell", cfg, "--out", out, "--batches", "100000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # until its handler is installed (before that, SIGINT ends it by the signal); from then on the
    # flag stops it wherever it is, loading or in the batches
    clitest.wait_for(lambda: clitest.handles_signal(p.pid, signal.SIGINT) or p.poll() is not None, 60)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        err = "timed out"
    left = [f for f in os.listdir(tmp) if f.startswith("d-interrupted")]
    check("SIGINT: exit 130, 'interrupted', no directory or partial one left", p.returncode == 130 and
          "interrupted" in err and not left, "rc=%s err=%r left=%s" % (p.returncode, err[-300:], left))


def check_other_cell(name):
    """A cell with heads or histories: trained on the copying task (H as model.hidden, its other
    dims as model.dims.*), then diag on the checkpoint exits 0 and writes its JSON."""
    dims = cells.SPECS[name].dims(2, 4)
    cfg = write("copy-%s.cfg" % name, CFG if "H" in dims else
                "\n".join(line for line in CFG.splitlines() if not line.startswith("hidden")))
    sets = [a for k, v in dims.items() if k not in ("D", "H") for a in ("--set", "model.dims.%s=%d" % (k, v))]
    run = os.path.join(tmp, "run-" + name)
    r = cellc("train", "stdlib/%s.cell" % name, cfg, "--out", run, *sets)
    check("train %s for its checkpoint" % name, r.rc == 0, r.why())
    if r.rc:
        return
    out = os.path.join(tmp, "diag-" + name)
    r = cellc("diag", "stdlib/%s.cell" % name, cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--out", out, *sets)
    check("diag %s exits 0 and writes diag.json" % name, r.rc == 0 and os.path.exists(os.path.join(out, "diag.json")),
          r.why())


def main():
    check_interrupt()
    check_train_probe()
    check_json_and_plots()
    check_errors()
    for name, opts in CASES:
        check_jacobians(name, opts)
    for name in OTHER_CELLS:
        check_other_cell(name)
    shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
