"""diag's per-sample gradient anisotropy (param_grad) against NumPy, and the anisotropy study's
script (examples/repro/anisotropy.sh) at a tiny size: every run and probe
written, the optimizer and clip of each model as the protocol has them, the table's shape and its
values finite and ordered (median within its quartiles), summary.json's medians those of the
diag.json files, the figures, and a rerun that redoes nothing. One PASS/FAIL line per check; the
last line is "N passed, M failed"."""
import json
import math
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import numpy as np  # noqa: E402

import clitest  # noqa: E402
import sft  # noqa: E402
from clitest import check, finish  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp(prefix="cellc-repro-aniso-")

TASKS = ("delay_sum",)
MODELS = ("elman", "scalar_gate", "multi_gate")
SEEDS = (1, 2, 3)
NUM = r"(-?[0-9.e+-]+)"
CELL = re.compile(r"^%s \[%s, %s\]$" % (NUM, NUM, NUM))


def config(path):
    """config.cfg's [train] keys: {key: value text}."""
    keys, section = {}, ""
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                section = line.strip("[]")
            elif "=" in line and section == "train":
                k, v = (s.strip() for s in line.split("=", 1))
                keys[k] = v
    return keys


def table_rows(out, task):
    """The rows of the printed table of task: lists of cell texts, the header first."""
    lines = out.splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("== %s:" % task)]
    if not start:
        return []
    rows = []
    for line in lines[start[0] + 1:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


PG_CFG = """
[task]
name = file
path = %s

[model]
layers = 1
width = 2
hidden = 6
encoder = none
head_bias = false
readout = last

[train]
steps = 3
batch = 16
optimizer = sgd
lr = 0.1
seed = 4

[eval]
every = 3
batches = 1
"""


def check_param_grad_numpy():
    """diag's param_grad (AI_10 and CE_10 of the per-sample gradient matrix, the study's gradient
    columns) against a direct NumPy computation: an Elman RNN with z = W_o h_T on 16 sequences of a
    file task, each sequence's gradient of Wx, Wh, b by backpropagation through time in float64,
    rows normalized, columns centred, the singular values by numpy's SVD. The valid split is the
    16 sequences, so the probe batch holds each once (the values do not depend on the order)."""
    rng = np.random.default_rng(7)
    N, T, D, H = 16, 9, 2, 6
    x = rng.normal(size=(N, T, D)).astype(np.float32)
    y = (x[:, -1, 0] * 0.7 + x[:, 2, 1]).astype(np.float32)
    data = os.path.join(tmp, "pg.safetensors")
    sft.write(data, {"train.x": x, "train.y": y, "valid.x": x, "valid.y": y})
    cfg = clitest.write_in(tmp, "pg.cfg", PG_CFG % data)
    run = os.path.join(tmp, "pg-run")
    r = clitest.run([CELLC, "train", "stdlib/elman.cell", cfg, "--out", run, "--progress", "none"], 300)
    check("param_grad check: train elman on the file task", r.rc == 0, r.why())
    if r.rc:
        return
    ck = os.path.join(run, "checkpoint.safetensors")
    r = clitest.run([CELLC, "diag", "stdlib/elman.cell", cfg, "--checkpoint", ck, "--out", os.path.join(tmp, "pg-diag")], 300)
    check("param_grad check: diag", r.rc == 0, r.why())
    if r.rc:
        return
    got = json.load(open(os.path.join(tmp, "pg-diag", "diag.json")))["layers"][0]["param_grad"]
    P = {k: v.astype(np.float64) for k, v in sft.read(ck)[0].items()}
    Wx, Wh, b, Wo = P["layer.0.Wx"], P["layer.0.Wh"], P["layer.0.b"], P["head.weight"]
    xd = x.astype(np.float64)
    rows = []
    for n in range(N):
        hs = [np.zeros(H)]
        for t in range(T):
            hs.append(np.tanh(Wx @ xd[n, t] + Wh @ hs[-1] + b))
        z = Wo @ hs[-1]
        dh = Wo.T @ (2 * (z - y[n]))  # the sign of dL/dz matters once the columns are centred
        gWx, gWh, gb = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
        for t in range(T - 1, -1, -1):
            da = dh * (1 - hs[t + 1] ** 2)
            gWx += np.outer(da, xd[n, t])
            gWh += np.outer(da, hs[t])
            gb += da
            dh = Wh.T @ da
        g = np.concatenate([gWx.ravel(), gWh.ravel(), gb])
        rows.append(g / np.linalg.norm(g))
    G = np.array(rows)
    G -= G.mean(axis=0)
    sv = np.linalg.svd(G, compute_uv=False)[:N - 1]
    r_ = min(10, N - 1)
    ai, ce = sv[0] / sv[r_ - 1], (sv[:r_] ** 2).sum() / (sv ** 2).sum()
    # diag takes dL/dh_T from the model's float32 backward: its direction is float32-rounded
    check("param_grad: AI_10 and CE_10 of 16 per-sample gradients equal NumPy's (rel. 1e-6)",
          got.get("samples") == N and abs(got["AI10"] - ai) <= 1e-6 * ai and abs(got["CE10"] - ce) <= 1e-6 and
          ai > 1.5 and ce < 0.999, "diag %s, numpy AI10 %.12g CE10 %.12g" % (got, ai, ce))


def main():
    out = os.path.join(tmp, "an")
    # T = 40 (delay_sum needs 37), hidden 8, 4 steps, 16 probe sequences for the per-sample gradients
    cmd = ["sh", "examples/repro/anisotropy.sh", "--seeds", "3", "--tasks", " ".join(TASKS), "--samples", "16",
           "--out", out, "--set", "task.length=40", "--set", "model.hidden=8", "--set", "train.steps=4"]
    env = dict(os.environ, CELLC=CELLC)
    r = clitest.run(cmd, 900, env=env)
    check("anisotropy.sh (tiny): exit 0, a table per task", r.rc == 0 and all("== %s:" % t in r.out for t in TASKS), r.why())
    if r.rc:
        return
    dirs = [os.path.join(out, t, m, "clip-%d" % c, "seed-%d" % s)
            for t in TASKS for m in MODELS for c in (0, 1) for s in SEEDS]
    missing = [d for d in dirs if not os.path.exists(os.path.join(d, "diag", "diag.json"))]
    check("a run and a probe per task, model, clip and seed", not missing, str(missing[:3]))
    if missing:
        return

    cfgs = {(m, c): config(os.path.join(out, "delay_sum", m, "clip-%d" % c, "seed-2", "run", "config.cfg"))
            for m in MODELS for c in (0, 1)}
    ok = all(cfgs[("elman", c)]["optimizer"] == "adam" and float(cfgs[("elman", c)]["lr"]) == 1e-3 for c in (0, 1))
    ok = ok and all(cfgs[(m, c)]["optimizer"] == "sgd" and float(cfgs[(m, c)]["lr"]) == 1e-2 and
                    float(cfgs[(m, c)]["momentum"]) == 0 for m in MODELS[1:] for c in (0, 1))
    ok = ok and all(float(cfgs[(m, c)]["clip"]) == c and cfgs[(m, c)]["seed"] == "2" for m in MODELS for c in (0, 1))
    check("the plain RNN with Adam lr 1e-3, the gated cells with SGD lr 1e-2, the clip of each run", ok, str(cfgs))

    d = json.load(open(os.path.join(dirs[0], "diag", "diag.json")))["layers"][0]
    j = d["jacobian"]
    check("the probe: 12 sequences x 16 starts for the products, 16 samples for the per-sample gradients",
          j["sequences"] == 12 and j["starts"] == 16 and d["param_grad"]["samples"] == 16 and len(j["lags"]) == 40,
          str(j)[:200] + str(d.get("param_grad")))

    bad = []
    for t in TASKS:
        rows = table_rows(r.out, t)
        if len(rows) != 7 or len(rows[0]) != 12:
            bad.append("%s: %d rows, header %s" % (t, len(rows), rows[:1]))
            continue
        for row in rows[1:]:
            if len(row) != 12 or row[1] not in ("0", "1"):
                bad.append(str(row))
                continue
            for k, text in enumerate(row[2:], 2):
                if rows[0][k].endswith("lag 100"):  # T = 40: no lag 100
                    if text != "n/a":
                        bad.append("%s: %s" % (rows[0][k], text))
                    continue
                m = CELL.match(text)
                v = [float(x) for x in m.groups()] if m else []
                if not m or not all(math.isfinite(x) for x in v) or not v[1] <= v[0] <= v[2]:
                    bad.append("%s: %r" % (rows[0][k], text))
                elif rows[0][k].startswith("AI_10") and v[1] < 1 - 1e-9:
                    bad.append("%s below 1: %r" % (rows[0][k], text))
                elif rows[0][k].startswith("CE_10") and not (0 < v[1] and v[2] <= 1 + 1e-9):
                    bad.append("%s outside (0, 1]: %r" % (rows[0][k], text))
    check("the table: per task a header and 6 rows (3 models x 2 clips) of 12 columns, every value finite, "
          "AI_10 >= 1, 0 < CE_10 <= 1, quartiles around the median", not bad, str(bad[:4]))

    summ = json.load(open(os.path.join(out, "summary.json")))
    ds = [json.load(open(os.path.join(out, "delay_sum", "multi_gate", "clip-1", "seed-%d" % s, "diag", "diag.json")))
          ["layers"][0] for s in SEEDS]
    row = [x for x in summ["delay_sum"] if x["model"] == "multi_gate" and x["clip"] == 1][0]
    ai10 = sorted(x["jacobian"]["AI10"][9] for x in ds)
    ce40 = sorted(x["jacobian"]["CE10"][39] for x in ds)
    gce = sorted(x["param_grad"]["CE10"] for x in ds)
    check("summary.json: the medians over the seeds of the diag.json values (AI_10 lag 10, CE_10 lag 40, "
          "the gradients' CE_10)", abs(row["AI10"]["10"][0] - ai10[1]) < 1e-12 * ai10[1] and
          abs(row["CE10"]["40"][0] - ce40[1]) < 1e-12 and abs(row["grad_CE10"][0] - gce[1]) < 1e-12 and
          row["seeds"] == 3, "%s %s %s" % (row, ai10, gce))

    figs = [os.path.join(out, f + ext) for f in ["anisotropy_" + t for t in TASKS] + ["param_grad"]
            for ext in (".svg", ".png")]
    check("the figures anisotropy_<task> and param_grad, SVG and PNG", all(os.path.exists(f) for f in figs),
          str([f for f in figs if not os.path.exists(f)]))

    stamp = {p: os.stat(p).st_mtime_ns for dd in dirs
             for p in (os.path.join(dd, "diag", "diag.json"), os.path.join(dd, "run", "checkpoint.safetensors"))}
    r2 = clitest.run(cmd, 300, env=env)
    same = all(os.stat(p).st_mtime_ns == t for p, t in stamp.items())
    check("a rerun trains and probes nothing again and prints the same table", r2.rc == 0 and same and
          all(table_rows(r2.out, t) == table_rows(r.out, t) for t in TASKS), r2.why())


if __name__ == "__main__":
    try:
        check_param_grad_numpy()
        main()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()
