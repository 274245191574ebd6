"""The gated-linear and thesis studies' scripts (examples/repro/gated_linear.sh, thesis.sh) at a
tiny size (tiny copying and temporal XOR, a few steps): each prints its table, every number in it
finite or a word the table defines, summary.json's statistics are those of the runs' own files,
the figures are written; gated_linear.sh --full's configuration on cuda-emu at a tiny size; and
`cellc plot --figure`'s categorical axis (a panel's xnames), which
the thesis's token figure uses. One PASS/FAIL line per check; the last line is "N passed, M failed"."""
import json
import math
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import check, finish  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp(prefix="cellc-repro-gl-")
# a median [25%, 75%] triple as the tables print it; "never" for a threshold no run reached
TRIPLE = re.compile(r"(-?[0-9][^\s\[]*|never|nan|-?inf|n/a) \[([^,\]]+), ([^\]]+)\]")


def numbers_ok(text, words=("never",)):
    """every median [q1, q3] triple of the table: three finite numbers (or the allowed words),
    q1 <= median <= q3; and how many there were"""
    n = 0
    for m in TRIPLE.finditer(text):
        vals = m.groups()
        if any(v in words for v in vals):
            n += 1
            continue
        try:
            a, b, c = (float(v) for v in vals)
        except ValueError:
            return False, m.group(0)
        if not all(math.isfinite(v) for v in (a, b, c)) or not b <= a <= c:
            return False, m.group(0)
        n += 1
    return n > 0, n


def quantile(v, q):
    v = sorted(v)
    p = q * (len(v) - 1)
    i = int(p)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (p - i)


def check_xnames():
    fig = os.path.join(tmp, "names.json")
    with open(fig, "w") as f:
        json.dump({"panels": [{"title": "by token", "xlabel": "input token", "ylabel": "mean gate z (0 to 1)",
                               "xnames": ["0", "1", "fill 2"],
                               "series": [{"label": "median", "x": [0, 1, 2], "y": [0.2, 0.5, 0.6]}]}]}, f)
    r = clitest.run([CELLC, "plot", "--figure", fig, "--out", os.path.join(tmp, "names")], 60)
    svg = os.path.join(tmp, "names.svg")
    import html
    text = html.unescape(re.sub(r"<[^>]+>", " ", open(svg).read())) if r.rc == 0 and os.path.exists(svg) else ""
    check("plot --figure with xnames: the names are the x axis's tick labels, PNG beside the SVG",
          r.rc == 0 and "fill 2" in text and os.path.exists(os.path.join(tmp, "names.png")), r.why())
    with open(fig, "w") as f:
        json.dump({"panels": [{"title": "t", "xnames": [1, 2], "series": []}]}, f)
    r = clitest.run([CELLC, "plot", "--figure", fig, "--out", os.path.join(tmp, "bad")], 60)
    check("plot --figure with xnames not strings: exit 1 naming xnames", r.rc == 1 and "xnames" in r.err, r.why())


def check_gated_linear():
    out = os.path.join(tmp, "gl")
    r = clitest.run(["sh", "examples/repro/gated_linear.sh", "--seeds", "2", "--lengths", "8 12", "--steps", "30",
                     "--gate-steps", "20", "--threshold", "0.15", "--out", out, "--set", "train.batch=8",
                     "--set", "eval.batches=2", "--set", "eval.every=10", "--set", "model.hidden=8",
                     "--set", "model.width=8"], 600, env=dict(os.environ, CELLC=CELLC))
    check("gated_linear.sh (tiny): exit 0, both parts' tables", r.rc == 0 and "== 1." in r.out and
          "copying with 8 blanks" in r.out and "copying with 12 blanks" in r.out and "Gumbel-UGI" in r.out, r.why())
    if r.rc:
        return
    ok, n = numbers_ok(r.out)
    check("... every median [25%, 75%] in the table finite and ordered (or never)", ok, str(n))
    rows = [ln for ln in r.out.splitlines() if re.match(r"(false|true) +2 ", ln)]
    check("... one row per see_h with its 2 seeds", len(rows) == 2, r.out[:600])
    summ = json.load(open(os.path.join(out, "summary.json")))
    shares = []
    for s in (1, 2):
        g = json.load(open(os.path.join(out, "gates", "see_h-false", "diag", "seed-%d-trained" % s, "diag.json")))
        g = g["layers"][0]["gates"][0]
        shares.append(1 - g["below_0.1"] - g["above_0.9"])
    got = summ["gates"]["false"]["in_0.1_0.9_trained"]
    check("summary.json: the trained share in (0.1, 0.9) is the median of the seeds' diag.json",
          abs(got[0] - quantile(shares, 0.5)) < 1e-12 and got[1] <= got[0] <= got[2], "%s %s" % (got, shares))
    accs = []
    for s in (1, 2):
        with open(os.path.join(out, "copy-T12", "gumbel", "seed-%d" % s, "metrics.jsonl")) as f:
            accs.append([json.loads(x)["accuracy"] for x in f if '"valid"' in x][-1])
    last = summ["copying"]["12"]["gumbel"]["valid_accuracy"][-1]
    check("summary.json: the last valid accuracy at 12 blanks (Gumbel) is the median of the runs'",
          abs(last[0] - quantile(accs, 0.5)) < 1e-9, "%s %s" % (last, accs))
    cfgs = [open(os.path.join(out, "copy-T12", i, "seed-2", "config.cfg")).read() for i in ("gumbel", "ugi")]
    check("the Gumbel runs set the first layer's gate bias to gumbel(0.0,0.5), the UGI runs to ugi",
          re.search(r"layer\.0\.init\.bz = gumbel\(0\.0,0\.5\)\n", cfgs[0]) and
          re.search(r"layer\.0\.init\.bz = ugi\n", cfgs[1]), cfgs[0][:600])
    figs = [os.path.join(out, f + e) for f in ("gates_layer0", "copying_accuracy") for e in (".svg", ".png")]
    figs += [os.path.join(out, "gates", "see_h-true", "diag", "seed-2-trained", "gates_layer0" + e) for e in (".svg", ".png")]
    check("the figures gates_layer0 and copying_accuracy, and diag's before/after per run, SVG and PNG",
          all(os.path.exists(f) for f in figs), str([f for f in figs if not os.path.exists(f)]))
    r2 = clitest.run(["sh", "examples/repro/gated_linear.sh", "--bogus"], 60, env=dict(os.environ, CELLC=CELLC))
    check("gated_linear.sh --bogus: exit 2 naming the flags", r2.rc == 2 and "--full" in r2.err, r2.why())


def check_gated_linear_full():
    """--full: examples/repro/gated_linear_full.cfg (the source's 3 layers, AdamW lr 1e-4, threshold
    0.9) run here on cuda-emu at a tiny size; diag on the host"""
    out = os.path.join(tmp, "glfull")
    r = clitest.run(["sh", "examples/repro/gated_linear.sh", "--full", "--seeds", "1", "--lengths", "6", "--steps", "2",
                     "--gate-steps", "2", "--out", out, "--set", "train.device=cuda-emu", "--set", "model.hidden=8",
                     "--set", "model.width=8", "--set", "task.length=6", "--set", "task.memorize=3",
                     "--set", "train.batch=4", "--set", "eval.every=1", "--set", "eval.batches=1"], 600,
                    env=dict(os.environ, CELLC=CELLC))
    check("gated_linear.sh --full (tiny, cuda-emu): exit 0, the threshold 0.9 in the table",
          r.rc == 0 and "steps to valid accuracy 0.9" in r.out, r.why())
    cfg = os.path.join(out, "copy-T6", "gumbel", "seed-1", "config.cfg")
    text = open(cfg).read() if os.path.exists(cfg) else ""
    check("... the runs are the full configuration's: 3 layers, AdamW lr 1e-4, the GPU device set",
          re.search(r"^layers\s*=\s*3\b", text, re.M) and re.search(r"^lr\s*=\s*1e-4\b", text, re.M) and
          re.search(r"^optimizer\s*=\s*adamw\b", text, re.M) and re.search(r"^device\s*=\s*cuda-emu\b", text, re.M),
          text[:500])
    check("... diag ran on the host for both see_h", all(os.path.exists(os.path.join(
        out, "gates", "see_h-%s" % see, "diag", "seed-1-trained", "diag.json")) for see in ("false", "true")))


def check_thesis():
    out = os.path.join(tmp, "th")
    r = clitest.run(["sh", "examples/repro/thesis.sh", "--seeds", "1..2", "--data-seeds", "1..2", "--out", out,
                     "--set", "train.steps=8", "--set", "task.length=12", "--set", "log.every=2",
                     "--set", "eval.every=4"], 600, env=dict(os.environ, CELLC=CELLC))
    check("thesis.sh (tiny, 2 x 2 seeds): exit 0, a table per mode", r.rc == 0 and "mixed (40% easy)  4 runs" in r.out and
          "hard only         4 runs" in r.out, r.why())
    if r.rc:
        return
    ok, n = numbers_ok(r.out)
    check("... every median [25%, 75%] in the table finite and ordered", ok, str(n))
    runs = [os.path.join(out, "hard", "data_seed-%d_seed-%d" % (d, s)) for d in (1, 2) for s in (1, 2)]
    check("a run per init and data seed, each with its training-time probe and its diag by token",
          all(os.path.exists(os.path.join(d, "grad_per_step.json")) and os.path.exists(os.path.join(d, "diag", "diag.json"))
              for d in runs), str(os.listdir(os.path.join(out, "hard"))))
    summ = json.load(open(os.path.join(out, "summary.json")))
    g1 = [json.load(open(os.path.join(d, "grad_per_step.json")))["layers"][0]["max_grad_norm_per_step"][0] for d in runs]
    got = summ["hard"]["grad"][0]
    check("summary.json: the largest ||dL/dh_1|| is the median of the 4 runs', quartiles around it",
          abs(got[0] - quantile(g1, 0.5)) < 1e-12 * max(1, abs(got[0])) and got[1] <= got[0] <= got[2], "%s %s" % (got, g1))
    cfgs = [open(os.path.join(out, m, "data_seed-2_seed-1", "config.cfg")).read() for m in ("mixed", "hard")]
    check("the modes' runs train with easy fraction 0.4 and 0",
          re.search(r"easy_fraction\s*=\s*0\.4\b", cfgs[0]) and re.search(r"easy_fraction\s*=\s*0(\.0*)?\s", cfgs[1]),
          cfgs[1][:400])
    names = summ["mixed"]["names"]
    check("the token names are diag's (informative 0 and 1, then fill 2..9)",
          names[:3] == ["0", "1", "fill 2"] and len(names) == 10 and summ["mixed"]["informative"] == ["0", "1"], str(names))
    figs = [os.path.join(out, f + e) for f in ("grad_per_step", "tokens", "tokens_gates") for e in (".svg", ".png")]
    check("the figures grad_per_step, tokens and tokens_gates, SVG and PNG", all(os.path.exists(f) for f in figs))
    figs = [json.load(open(os.path.join(out, f + ".json"))) if os.path.exists(os.path.join(out, f + ".json"))
            else {"panels": []} for f in ("tokens", "tokens_gates")]
    titles = [[p["title"] for p in f["panels"]] for f in figs]
    check("the token figures: gate z with the state change, and each gate (z, r), every panel naming the tokens",
          titles == [["gate z by input token", "state change by input token"],
                     ["gate z by input token", "gate r by input token"]] and
          all(p.get("xnames") == names for f in figs for p in f["panels"]), str(titles))


def main():
    check_xnames()
    check_gated_linear()
    check_gated_linear_full()
    check_thesis()
    shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
