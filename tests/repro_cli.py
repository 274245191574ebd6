"""The model of the time-scale paper (seeds.md sections 1, 4): input -> cell -> z = W_o h, with
model.encoder = none (layer 0 reads the task's channels themselves) and model.head_bias = false;
their errors. One PASS/FAIL line per check; the last line is "N passed, M failed"."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import clitest  # noqa: E402
from clitest import check, finish  # noqa: E402

import sft  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 300
tmp = tempfile.mkdtemp(prefix="cellc-repro-")

ADDING = """
[task]
name = adding
length = 12
noise_channels = 3

[model]
layers = 1
width = 4
hidden = 8
readout = last

[train]
steps = 20
batch = 16
optimizer = sgd
lr = 0.1
seed = 2

[eval]
every = 20
batches = 2
"""


def cellc(*args):
    return clitest.run([CELLC] + list(args), TIMEOUT)


def load(path):
    with open(path, "rb") as f:
        return sft.parse(f.read())[0]


def check_model_keys():
    cfg = clitest.write_in(tmp, "adding.cfg", ADDING)
    run = os.path.join(tmp, "plain")
    r = cellc("train", "stdlib/leaky.cell", cfg, "--out", run, "--progress", "none",
              "--set", "model.encoder=none", "--set", "model.head_bias=false")
    # leaky: Wr [8, 8] and Wi [8, 4]; the head W_o [1, 8]; no encoder, no bias
    check("encoder none, head_bias false: the params are the cell's and W_o only (64 + 32 + 8)",
          r.rc == 0 and "104 params" in r.out, r.why())
    if r.rc:
        return
    init = os.path.join(tmp, "init")
    r0 = cellc("train", "stdlib/leaky.cell", cfg, "--out", init, "--progress", "none", "--set", "train.lr=1e-30",
               "--set", "model.encoder=none", "--set", "model.head_bias=false")
    t, t0 = load(os.path.join(run, "checkpoint.safetensors")), load(os.path.join(init, "checkpoint.safetensors"))
    eye = [[1.0 if i == j else 0.0 for j in range(4)] for i in range(4)]
    check("the encoder is the identity and the head's bias 0, after 20 SGD steps as at the start",
          r0.rc == 0 and t["encoder.weight"].tolist() == eye and not t["encoder.bias"].any() and
          not t["head.bias"].any(), str({k: v.shape for k, v in t.items()}))
    check("... while W_o and the cell's weights trained",
          r0.rc == 0 and (t["head.weight"] != t0["head.weight"]).any() and (t["layer.0.Wr"] != t0["layer.0.Wr"]).any())
    r = cellc("train", "stdlib/leaky.cell", cfg, "--out", os.path.join(tmp, "bad"), "--set", "model.encoder=none",
              "--set", "model.width=6")
    check("encoder none with width 6 on 4 channels: exit 1 naming model.encoder and the width to set",
          r.rc == 1 and "model.encoder" in r.err and "model.width = 4" in r.err, r.why())
    copy = clitest.write_in(tmp, "copy.cfg", "[task]\nname = copying\ntokens = 6\nmemorize = 2\nlength = 3\n"
                            "[model]\nlayers = 1\nwidth = 4\nhidden = 4\n[train]\nsteps = 2\nbatch = 3\n")
    r = cellc("train", "stdlib/gru.cell", copy, "--out", os.path.join(tmp, "bad2"), "--set", "model.encoder=none")
    check("encoder none on a token task: exit 1 at model.encoder", r.rc == 1 and "model.encoder" in r.err, r.why())
    r = cellc("diag", "stdlib/leaky.cell", cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--set", "model.encoder=none", "--set", "model.head_bias=false", "--out", os.path.join(tmp, "diag"))
    check("diag reads the checkpoint of such a model", r.rc == 0 and "slope" in r.out, r.why())


def check_diag_sequences():
    """diag --sequences N --starts all: the Jacobian statistics over N sequences and every start;
    the per-lag predictor medians; the least-squares slope beside Theil-Sen's."""
    cfg = clitest.write_in(tmp, "adding.cfg", ADDING)
    one, many = os.path.join(tmp, "d1"), os.path.join(tmp, "d3")
    r1 = cellc("diag", "stdlib/scalar_gate.cell", cfg, "--out", one)
    r3 = cellc("diag", "stdlib/scalar_gate.cell", cfg, "--out", many, "--sequences", "3", "--starts", "all")
    ok = r1.rc == 0 and r3.rc == 0
    j1 = json.load(open(os.path.join(one, "diag.json")))["layers"][0]["jacobian"] if ok else {}
    j3 = json.load(open(os.path.join(many, "diag.json")))["layers"][0]["jacobian"] if ok else {}
    check("--sequences 3 --starts all: 3 sequences, 12 starts (T); the default 1 and 12 (T < 16)",
          ok and j3["sequences"] == 3 and j3["starts"] == 12 and j1["sequences"] == 1 and j1["starts"] == 12,
          r3.why() if r3.rc else str({k: j3.get(k) for k in ("sequences", "starts")}))
    check("... the medians of S change with the sequences pooled, lag 1's eff_lr stays 1",
          ok and j1["S_median"] != j3["S_median"] and abs(j3["eff_lr"][0] - 1) < 1e-12)
    # scalar gate: P(lag) of the complement is the median of prod g, between 0 and 1, falling with the lag
    pc = j3.get("P_complement_median") or []
    check("P_median and P_complement_median per lag: in (0, 1), falling with the lag, P + Pc = 1 at lag 1",
          ok and len(pc) == 12 and all(0 < v < 1 for v in pc) and all(b < a for a, b in zip(pc, pc[1:])) and
          abs(j3["P_median"][0] + pc[0] - 1) < 1e-9, str(pc)[:200])
    check("slope_complement_ols: a least-squares slope next to Theil-Sen's, near it",
          ok and isinstance(j3["slope_complement_ols"], float) and abs(j3["slope_complement_ols"] - j3["slope_complement"]) < 0.5,
          str({k: j3.get(k) for k in ("slope_complement", "slope_complement_ols")}))
    for bad in (["--sequences", "0"], ["--starts", "some"], ["--starts"]):
        r = cellc("diag", "stdlib/scalar_gate.cell", cfg, "--out", os.path.join(tmp, "dbad"), *bad)
        check("diag %s: exit 2" % " ".join(bad), r.rc == 2 and bad[0] in r.err, r.why())


def check_plot_figure():
    """cellc plot --figure: panels of given numbers drawn as diag's plots, SVG and PNG."""
    fig = os.path.join(tmp, "fig.json")
    with open(fig, "w") as f:
        json.dump({"share_y": True, "panels": [
            {"title": "first", "xlabel": "lag (steps)", "ylabel": "ratio A", "logy": True,
             "series": [{"label": "falling", "x": [1, 2, 3, 4], "y": [1, 0.1, 0.01, 0.001]}]},
            {"title": "second", "xlabel": "lag (steps)", "ylabel": "ratio B",
             "series": [{"label": "flat", "x": [1, 2, 3, 4], "y": [1, 0.998, None, 0.992], "points": True}]}]}, f)
    r = cellc("plot", "--figure", fig, "--out", os.path.join(tmp, "fig-out"))
    svg = os.path.join(tmp, "fig-out.svg")
    ok = r.rc == 0 and os.path.exists(svg) and open(os.path.join(tmp, "fig-out.png"), "rb").read(4) == b"\x89PNG"
    text = open(svg).read() if ok else ""
    check("plot --figure: SVG and PNG with the titles, the axis names and the legends",
          ok and all(w in text for w in ("first", "second", "falling", "flat")) or
          ok and all(html_has(svg, w) for w in ("first", "second", "falling", "flat", "ratio A", "ratio B")), r.why())
    r = cellc("plot", "--figure", os.path.join(tmp, "missing.json"))
    check("plot --figure of a missing file: exit 1", r.rc == 1, r.why())
    r = cellc("plot", "--figure", fig, tmp)
    check("plot --figure with a RUN_DIR: exit 2", r.rc == 2, r.why())


def check_time_scale_script():
    """examples/repro/time_scale.sh at a tiny size (T = 12, hidden 8, probes at 0, 3, 6): every
    probe written, the table printed, summary.json's medians those of the diag.json files, the
    alternative initialization at the first and last probe, the figures."""
    out = os.path.join(tmp, "ts")
    sets = ["--set", "task.length=12", "--set", "model.hidden=8"]
    r = clitest.run(["sh", "examples/repro/time_scale.sh", "--seeds", "3", "--tasks", "adding", "--checkpoints", "0 3 6",
                     "--out", out] + sets, 900, env=dict(os.environ, CELLC=CELLC))
    check("time_scale.sh (tiny): exit 0, the table of each cell", r.rc == 0 and all(
        c in r.out for c in ("leaky", "scalar_gate", "multi_gate")) and "init N(0, 1/64)" in r.out, r.why())
    if r.rc:
        return
    probes = [os.path.join(out, "adding", c, "seed-%d" % s, "diag-%d" % st, "diag.json")
              for c in ("leaky", "scalar_gate", "multi_gate") for s in (1, 2, 3) for st in (0, 3, 6)]
    alt = [os.path.join(out, "adding", "normal-multi_gate", "seed-%d" % s, "diag-%d" % st, "diag.json")
           for s in (1, 2, 3) for st in (0, 6)]
    check("a probe per cell, seed and checkpoint; the alternative init at 0 and 6",
          all(os.path.exists(p) for p in probes + alt), str([p for p in probes + alt if not os.path.exists(p)][:3]))
    js = [json.load(open(os.path.join(out, "adding", "scalar_gate", "seed-%d" % s, "diag-6", "diag.json")))
          for s in (1, 2, 3)]
    j = js[0]["layers"][0]["jacobian"]
    check("the probe batch: 12 sequences of the probe seed", j["sequences"] == 12 and j["starts"] == 12, str(j)[:200])
    slopes = sorted(x["layers"][0]["jacobian"]["slope_complement"] for x in js)
    summ = json.load(open(os.path.join(out, "summary.json")))
    got = summ["adding"]["scalar_gate"]["s"]["6"]
    check("summary.json: s at step 6 is the median of the seeds' slope_complement, quartiles around it",
          abs(got[0] - slopes[1]) < 1e-12 and got[1] <= got[0] <= got[2], "%s %s" % (got, slopes))
    d0 = json.load(open(os.path.join(out, "adding", "leaky", "seed-1", "diag-0", "diag.json")))
    ck = os.path.join(out, "adding", "leaky", "seed-1", "run", "checkpoint.safetensors")
    with open(os.path.join(out, "adding", "leaky", "seed-1", "run", "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    check("the run resumed to the last checkpoint; the leaky cell at alpha 0.8 (P(1) = 0.8)",
          os.path.exists(ck) and abs(d0["layers"][0]["jacobian"]["P_complement_median"][0] - 0.8) < 1e-12 and
          max(steps) == 6, str(steps))
    figs = [os.path.join(out, f + ext) for f in ("profile_adding", "slope_adding") for ext in (".svg", ".png")]
    check("the figures profile_adding and slope_adding, SVG and PNG", all(os.path.exists(f) for f in figs))


def html_has(path, word):
    import html
    import re
    with open(path) as f:
        return word in html.unescape(re.sub(r"<[^>]+>", "", f.read()))


def main():
    check_model_keys()
    check_diag_sequences()
    check_plot_figure()
    check_time_scale_script()
    shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
