"""Runs worth looking at and seeds as an axis (spec/cli.md after the Tasks table; docs/training.md
"Keeping the best checkpoint", docs/cli.md "Seeds and sweeps", "cellc plot"):
train.keep = best (best.safetensors is the params of the best validation step, against a run
stopped at that step; --resume keeps the best so far; eval reads it; the test_best row), log.csv
(metrics.csv holds metrics.jsonl's rows), --seeds and --set lists (the directories, each run's
configuration, summary.json's statistics recomputed here from the runs' metrics.jsonl, the errors
and their exit statuses), cellc plot (valid SVG and PNG, the labels, the errors).
One PASS/FAIL line per check; the last line is "N passed, M failed"; exit 1 on any failure."""
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish  # noqa: E402
import clitest  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 120
tmp = tempfile.mkdtemp(prefix="cellc-runs-")

# a small temporal XOR whose best validation accuracy comes before the last step (lr too high)
XOR = ["stdlib/gru.cell", "examples/temporal_xor.cfg", "--progress", "none",
       "--set", "task.length=20", "--set", "task.train=400", "--set", "task.valid=200", "--set", "task.test=200",
       "--set", "train.batch=100", "--set", "eval.every=4", "--set", "train.lr=2e-2", "--set", "log.every=2"]
ADDING = ["stdlib/gru.cell", "examples/adding.cfg", "--progress", "none",
          "--set", "task.length=10", "--set", "train.batch=8", "--set", "model.hidden=8", "--set", "model.layers=1",
          "--set", "eval.every=3", "--set", "eval.batches=2", "--set", "train.lr=3e-2", "--set", "train.steps=30"]


def cellc(*args):
    return clitest.run([CELLC, *args], TIMEOUT)


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def tensors(path):
    """The tensors of a safetensors file: name -> (dtype, shape, bytes)."""
    head, body = clitest.read_header(path)
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}


def params(path):
    return {k: v for k, v in tensors(path).items() if not k.startswith("optim.")}


def step_of(path):
    dtype, _, data = tensors(path)["optim.step"]
    return int(struct.unpack({"I64": "<q", "F32": "<f", "F64": "<d"}[dtype], data)[0])


def best_row(rs):
    """The rule of docs/training.md: the highest valid accuracy, ties to the lower loss (regression:
    the lowest loss); on a full tie the earlier step."""
    best = None
    for r in rs:
        if r["split"] != "valid":
            continue
        if best is None:
            best = r
        elif r["accuracy"] is not None and best["accuracy"] is not None and r["accuracy"] != best["accuracy"]:
            best = r if r["accuracy"] > best["accuracy"] else best
        elif r["loss"] < best["loss"]:
            best = r
    return best


def final_line(out, word):
    for line in out.splitlines():
        if line.startswith(word + ":"):
            return dict(kv.split("=") for kv in line.split()[1:])
    return None


# ---- train.keep = best ----
d1 = os.path.join(tmp, "best")
r = cellc("train", *XOR, "--set", "train.steps=40", "--set", "train.keep=best", "--set", "log.csv=true", "--out", d1)
check("keep=best: the run trains, exit 0", r.rc == 0, r.why())
rs = rows(d1) if r.rc == 0 else []
b = best_row(rs)
bs = step_of(os.path.join(d1, "best.safetensors")) if b else -1
check("keep=best: best.safetensors is at the best valid step of metrics.jsonl, before the last",
      b is not None and bs == b["step"] and bs < 40, f"best row {b}, best.safetensors step {bs}")
# the same run stopped at the best step: its last checkpoint holds the params best.safetensors holds
d2 = os.path.join(tmp, "upto")
r2 = cellc("train", *XOR, "--set", f"train.steps={max(bs, 1)}", "--out", d2)
check("keep=best: best.safetensors' params are bit for bit those of the run stopped at that step",
      r2.rc == 0 and params(os.path.join(d2, "checkpoint.safetensors")) == params(os.path.join(d1, "best.safetensors")),
      r2.why())
check("keep=best: checkpoint.safetensors stays the last step's",
      r.rc == 0 and step_of(os.path.join(d1, "checkpoint.safetensors")) == 40)
tb = [x for x in rs if x["split"] == "test_best"]
fb = final_line(r.out, "best")
check("keep=best: a test_best row at the best step, printed as best:",
      len(tb) == 1 and tb[0]["step"] == bs and fb is not None and abs(float(fb["accuracy"]) - tb[0]["accuracy"]) < 1e-6,
      f"{tb} {fb}")
e = cellc("eval", *[a for a in XOR if a not in ("--progress", "none")], "--checkpoint", os.path.join(d1, "best.safetensors"))
fe = final_line(e.out, "final")
check("keep=best: cellc eval --checkpoint best.safetensors gives the test_best row",
      e.rc == 0 and fe is not None and tb and abs(float(fe["accuracy"]) - tb[0]["accuracy"]) < 1e-6
      and abs(float(fe["loss"]) - tb[0]["loss"]) < 1e-5 * abs(tb[0]["loss"]), e.why())

# --resume keeps the best so far (the best step lies in the first part)
d3 = os.path.join(tmp, "resumed")
ra = cellc("train", *XOR, "--set", "train.steps=20", "--set", "train.keep=best", "--set", "log.csv=true", "--out", d3)
rb = cellc("train", *XOR, "--set", "train.steps=40", "--set", "train.keep=best", "--set", "log.csv=true", "--out", d3, "--resume")
check("keep=best: --resume keeps the best so far: best.safetensors as the uninterrupted run's",
      ra.rc == 0 and rb.rc == 0 and bs <= 20 and tensors(os.path.join(d3, "best.safetensors")) == tensors(os.path.join(d1, "best.safetensors")),
      ra.why() + rb.why())
strip = lambda rr: [{k: v for k, v in x.items() if k not in ("elapsed_s", "tokens_per_s")} for x in rr]
check("keep=best: the resumed run's metrics.jsonl reads as the uninterrupted one's (no test row of the first part)",
      rb.rc == 0 and strip(rows(d3)) == strip(rs))

d5 = os.path.join(tmp, "forced")
cellc("train", *XOR, "--set", "train.steps=8", "--set", "train.keep=best", "--set", "log.csv=true", "--out", d5)
had = os.path.exists(os.path.join(d5, "best.safetensors")) and os.path.exists(os.path.join(d5, "metrics.csv"))
rf = cellc("train", *XOR, "--set", "train.steps=4", "--out", d5, "--force")
check("--force starts over: the earlier run's best.safetensors and metrics.csv are removed",
      had and rf.rc == 0 and not os.path.exists(os.path.join(d5, "best.safetensors")) and not os.path.exists(os.path.join(d5, "metrics.csv")),
      rf.why())

# regression: the lowest valid loss
d4 = os.path.join(tmp, "adding")
r4 = cellc("train", *ADDING, "--set", "train.keep=best", "--out", d4)
b4 = best_row(rows(d4)) if r4.rc == 0 else None
check("keep=best on a regression task: best.safetensors at the lowest valid loss",
      b4 is not None and b4["accuracy"] is None and step_of(os.path.join(d4, "best.safetensors")) == b4["step"], r4.why())
r5 = cellc("train", *ADDING, "--set", "train.keep=worst", "--out", os.path.join(tmp, "bad-keep"))
check("keep = worst: a configuration error naming the key, exit 1", r5.rc == 1 and "keep" in r5.err, r5.why())


# ---- log.csv ----
def csv_matches(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        c = list(csv.DictReader(f))
    j = rows(run_dir)
    if len(c) != len(j) or not j:
        return False, f"{len(c)} csv rows, {len(j)} jsonl rows"
    for a, x in zip(c, j):
        for k, v in x.items():
            got = a[k]
            if k == "split":
                ok = got == v
            elif v is None:
                ok = got == ""
            else:
                ok = got != "" and float(got) == float(v)
            if not ok:
                return False, f"{k}: csv {got!r}, jsonl {v!r} at step {x['step']}"
    return True, ""


ok, why = csv_matches(d1)
check("log.csv: metrics.csv holds metrics.jsonl's rows, field for field (null as empty)", ok, why)
ok, why = csv_matches(d3)
check("log.csv: after --resume, metrics.csv still holds metrics.jsonl's rows", ok, why)
check("log.csv = false (the default): no metrics.csv", not os.path.exists(os.path.join(d2, "metrics.csv")))

# ---- --seeds and --set lists ----
sw = os.path.join(tmp, "sweep")
r = cellc("train", *XOR, "--set", "train.steps=12", "--set", "train.keep=best", "--seeds", "1..3",
          "--set", "train.data_seed=1,2", "--out", sw)
names = [f"data_seed-{d}_seed-{s}" for d in (1, 2) for s in (1, 2, 3)]
check("--seeds 1..3 --set train.data_seed=1,2: six runs, one directory each, exit 0",
      r.rc == 0 and all(os.path.exists(os.path.join(sw, n, "metrics.jsonl")) for n in names), r.why())


def cfg_value(run_dir, section, key):
    sec = None
    for line in open(os.path.join(run_dir, "config.cfg")):
        line = line.split("#")[0].strip()
        if line.startswith("["):
            sec = line[1:-1]
        elif "=" in line and sec == section and line.split("=")[0].strip() == key:
            return line.split("=", 1)[1].strip()
    return None


check("each run's config.cfg holds its seed and data seed",
      r.rc == 0 and all(cfg_value(os.path.join(sw, f"data_seed-{d}_seed-{s}"), "train", "seed") == str(s)
                        and cfg_value(os.path.join(sw, f"data_seed-{d}_seed-{s}"), "train", "data_seed") == str(d)
                        for d in (1, 2) for s in (1, 2, 3)))
# train.data_seed unset is train.seed: the run with both 1 is the plain run of seed 1
plain = os.path.join(tmp, "plain")
rp = cellc("train", *XOR, "--set", "train.steps=12", "--set", "train.keep=best", "--out", plain)
check("data_seed unset is train.seed: the sweep's data_seed=1 seed=1 run equals the plain run",
      rp.rc == 0 and r.rc == 0 and strip(rows(plain)) == strip(rows(os.path.join(sw, "data_seed-1_seed-1"))))
check("data_seed changes the data alone: data_seed=2 seed=1 differs from data_seed=1 seed=1",
      r.rc == 0 and strip(rows(os.path.join(sw, "data_seed-2_seed-1"))) != strip(rows(os.path.join(sw, "data_seed-1_seed-1"))))


def finals(run_dir):
    """The final metrics recomputed from metrics.jsonl: each split's last row, the best valid row."""
    out = {}
    rr = rows(run_dir)
    for x in rr:
        for k in ("loss", "accuracy"):
            key = f"{x['split']}.{k}"
            out.pop(key, None)
            if x[k] is not None:
                out[key] = x[k]
    bb = best_row(rr)
    for k in ("loss", "accuracy", "step"):
        if bb and bb[k] is not None:
            out[f"best_valid.{k}"] = bb[k]
    return out


def quantile(v, q):
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    return v[-1] if lo >= len(v) - 1 else v[lo] + (pos - lo) * (v[lo + 1] - v[lo])


def summary_ok(sdir, groups):
    """summary.json against the runs' metrics; groups: [(sets, [dirs])]."""
    s = json.load(open(os.path.join(sdir, "summary.json")))
    if len(s["groups"]) != len(groups):
        return False, f"{len(s['groups'])} groups"
    for g, (sets, dirs) in zip(s["groups"], groups):
        if g["sets"] != sets or g["runs"] != dirs:
            return False, f"group {g['sets']} {g['runs']}"
        fs = [finals(os.path.join(sdir, d)) for d in dirs]
        keys = set().union(*fs)
        if set(g["metrics"]) != keys:
            return False, f"metrics {sorted(g['metrics'])} vs {sorted(keys)}"
        for k in keys:
            v = [f[k] for f in fs if k in f]
            m = g["metrics"][k]
            want = {"n": len(v), "median": quantile(v, 0.5), "q1": quantile(v, 0.25), "q3": quantile(v, 0.75),
                    "min": min(v), "max": max(v)}
            want["iqr"] = want["q3"] - want["q1"]
            for f, w in want.items():
                if abs(m[f] - w) > 1e-9 * max(1, abs(w)):
                    return False, f"{k}.{f}: {m[f]} != {w}"
    for run in s["runs"]:
        if run["final"] != finals(os.path.join(sdir, run["dir"])):
            return False, f"run {run['dir']}: final {run['final']}"
    return True, ""


ok, why = summary_ok(sw, [({}, names)]) if r.rc == 0 else (False, "no sweep")
check("summary.json: seed axes only: one group of six runs, median/q1/q3/iqr/min/max recomputed from metrics.jsonl", ok, why)
check("the table: a row per metric with the median", r.rc == 0 and "test_best.accuracy" in r.out and "median" in r.out)

sw2 = os.path.join(tmp, "lr")
r = cellc("train", *XOR, "--set", "train.steps=8", "--set", "train.lr=1e-2,2e-2", "--seeds", "1,2", "--out", sw2)
ok, why = summary_ok(sw2, [({"train.lr": "1e-2"}, ["lr-1e-2_seed-1", "lr-1e-2_seed-2"]),
                           ({"train.lr": "2e-2"}, ["lr-2e-2_seed-1", "lr-2e-2_seed-2"])]) if r.rc == 0 else (False, r.why())
check("--set train.lr=1e-2,2e-2 --seeds 1,2: a group per lr over its two seeds", ok, why)

out = os.path.join(tmp, "seeds-only")
r = cellc("train", *XOR, "--seeds", "1..2,7", "--out", out, "--dry-run")
check("--seeds 1..2,7 alone: DIR/seed-1, seed-2, seed-7 (spec's layout)",
      r.rc == 0 and all(f"{out}/seed-{k}: --set" in r.out for k in (1, 2, 7)) and "a sweep of 3 runs" in r.out, r.why())

# a value that is itself a list: ';' separates the sweep's values, ',' stays in the value
r = cellc("train", *XOR, "--set", "train.betas=0.9,0.95;0.8,0.9", "--out", os.path.join(tmp, "betas"), "--dry-run")
check("--set train.betas=0.9,0.95;0.8,0.9: two runs, each list whole",
      r.rc == 0 and "train.betas=0.9,0.95\n" in r.out.replace(" ", "\n").replace("\n\n", "\n") + "\n"
      and "train.betas=0.8,0.9" in r.out and "a sweep of 2 runs" in r.out, r.why())
r = cellc("train", *XOR, "--set", "train.betas=0.9,0.95", "--dry-run")
check("--set train.betas=0.9,0.95 alone is one run (the key's own list)", r.rc == 0 and "sweep" not in r.out, r.why())
r = cellc("train", *XOR, "--set", "model.init.bz=gumbel(0, 0.5),ugi", "--dry-run", "--out", os.path.join(tmp, "g"))
check("--set model.init.bz=gumbel(0, 0.5),ugi: the comma inside the call stays",
      r.rc == 0 and "a sweep of 2 runs" in r.out and "model.init.bz=gumbel(0, 0.5)" in r.out, r.why())
check("--dry-run of a sweep writes nothing", not os.path.exists(os.path.join(tmp, "g")))

# errors
for args, rc, words, what in [
        (["--seeds", "5..1"], 2, "must go up", "a range going down"),
        (["--seeds", "a,b"], 2, "whole numbers", "seeds that are not numbers"),
        (["--seeds", "-3"], 2, "whole numbers", "a negative seed"),
        (["--seeds", "1,,2"], 2, "empty value", "an empty value"),
        (["--seeds"], 2, "needs a list", "--seeds without its value"),
        (["--seeds", "1,2", "--set", "train.seed=3"], 2, "not both", "--seeds with --set train.seed"),
        (["--set", "train.lr=1e-3,"], 2, "empty value", "a list with an empty value"),
        (["--set", "train.lr=1e-3,2e-3", "--set", "train.lr=1,2"], 2, "two lists", "two lists for one key"),
        (["--set", "train.lr=1e-3,abc"], 1, "lr-abc", "a bad value in a list (the configuration's error, naming the run)")]:
    out = os.path.join(tmp, "err")
    shutil.rmtree(out, ignore_errors=True)
    r = cellc("train", *XOR, "--out", out, *args)
    check(f"{what}: exit {rc} with a clear message, nothing written",
          r.rc == rc and words in r.err and not os.path.exists(out), r.why())

r = clitest.run([CELLC, "train", *XOR, "--seeds", "1,2", "--out", os.path.join(tmp, "mpi")], TIMEOUT,
                env=dict(os.environ, OMPI_COMM_WORLD_SIZE="2"))
check("a sweep under mpirun: exit 2, nothing written",
      r.rc == 2 and "mpirun" in r.err and not os.path.exists(os.path.join(tmp, "mpi")), r.why())

# ---- cellc plot ----
r = cellc("plot", sw)
svg, png = os.path.join(sw, "curves.svg"), os.path.join(sw, "curves.png")
check("cellc plot SWEEP_DIR: curves.svg and curves.png, exit 0", r.rc == 0 and os.path.exists(svg) and os.path.exists(png), r.why())
try:
    root = ET.parse(svg).getroot()
    texts = " ".join("".join(t.itertext()) for t in root.iter() if t.tag.endswith("text"))
    svg_ok = root.tag.endswith("svg")
except (ET.ParseError, OSError) as ex:
    texts, svg_ok = str(ex), False
check("the SVG parses as XML with an <svg> root", svg_ok, texts[:200])
check("the SVG's legend labels each run by its differing keys, and says train and valid apart",
      "seed=3" in texts and "data_seed=2" in texts and "valid" in texts and "accuracy" in texts, texts[:300])
try:
    with open(png, "rb") as f:
        head = f.read(24)
    w, h = struct.unpack(">II", head[16:24])
    png_ok = head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and w > 500 and h > 300
except OSError:
    png_ok, w, h = False, 0, 0
check("the PNG has the PNG signature and a header of a real size", png_ok, f"{w}x{h}")
out = os.path.join(tmp, "two")
r = cellc("plot", d1, d4, "--out", out + ".svg")
check("cellc plot of two runs (one without accuracy) --out PATH.svg: PATH.svg and PATH.png",
      r.rc == 0 and os.path.exists(out + ".svg") and os.path.exists(out + ".png"), r.why())
r = cellc("plot", d1)
check("cellc plot RUN_DIR: RUN_DIR/curves.svg", r.rc == 0 and os.path.exists(os.path.join(d1, "curves.svg")), r.why())
for args, rc, what in [([], 2, "no RUN_DIR"), ([d1, d4], 2, "several RUN_DIRs without --out"),
                       ([tmp + "/none"], 1, "a directory without metrics.jsonl"), ([d1, "--bogus"], 2, "an unknown flag")]:
    r = cellc("plot", *args)
    check(f"cellc plot with {what}: exit {rc} with a message", r.rc == rc and r.err.strip(), r.why())

shutil.rmtree(tmp, ignore_errors=True)
finish()
