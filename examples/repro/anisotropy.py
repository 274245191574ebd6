"""anisotropy.py: the table and figures of examples/repro/anisotropy.sh from the diag.json files it
left in OUT/<task>/<cell>/clip-<c>/seed-<s>/diag/ (docs/experiments.md). Prints, per task, one
row per model and clip: AI_10 and CE_10 of the Jacobian products M_{t,k} at the lags 10, 40 and
100 (diag's medians over the start times and sequences of one seed's probe), AI_10 and CE_10 of
the per-sample parameter gradients (diag's param_grad), the training gradient's norm before clipping
(the mean of the logged interval means) and the final validation MSE, each as
median [25%, 75%] over the seeds. Writes summary.json and, through `cellc plot --figure`, the
figures anisotropy_<task> (AI_10 and CE_10 of the products against the lag, the median over the
seeds of each model and clip) and param_grad (the per-sample gradients' AI_10 and CE_10 per task).
Usage: python3 anisotropy.py OUT [--cellc bin/cellc]"""
import glob
import json
import math
import os
import subprocess
import sys

from repro_stats import final_mse, mqi, quantile

TASKS = ["adding", "ar2", "delay_sum", "moving_average"]
CELLS = ["elman", "scalar_gate", "multi_gate"]
NAMES = {"elman": "plain RNN (Adam)", "scalar_gate": "scalar gate (SGD)", "multi_gate": "multi gate (SGD)"}
LAGS = [10, 40, 100]


def fmt(t):
    if t[0] is None:
        return "n/a"
    # three significant digits for values far from 1 (AI_10 of long products, a near-zero MSE)
    wide = max(abs(x) for x in t) >= 1000 or min(abs(x) for x in t) < 0.01
    return ("%.3g [%.3g, %.3g]" if wide else "%.3f [%.3f, %.3f]") % tuple(t)


def mean_grad_norm(seed_dir):
    """The mean over training of the gradient norm before clipping (the train records' interval
    means): how far a clip of 1 is from binding."""
    path = os.path.join(seed_dir, "run", "metrics.jsonl")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        g = [r["grad_norm"] for r in map(json.loads, f) if r.get("split") == "train" and r.get("grad_norm") is not None]
    return sum(g) / len(g) if g else None


def at_lag(values, lag):
    return values[lag - 1] if len(values) >= lag else None


def plot(cellc, path, fig):
    with open(path + ".json", "w") as f:
        json.dump(fig, f)
    subprocess.run([cellc, "plot", "--figure", path + ".json", "--out", path], check=True, stdout=subprocess.DEVNULL)


def runs_of(out, task, cell, clip):
    """The finished probes of one task, model and clip, by seed."""
    dirs = glob.glob(os.path.join(out, task, cell, "clip-" + clip, "seed-*"))
    dirs = [d for d in dirs if os.path.exists(os.path.join(d, "diag", "diag.json"))]
    return sorted(dirs, key=lambda d: int(d.rsplit("-", 1)[1]))


def main():
    out = sys.argv[1]
    cellc = sys.argv[sys.argv.index("--cellc") + 1] if "--cellc" in sys.argv else "bin/cellc"
    tasks = [t for t in TASKS if os.path.isdir(os.path.join(out, t))]
    clips = sorted({os.path.basename(d)[len("clip-"):] for t in tasks for c in CELLS
                    for d in glob.glob(os.path.join(out, t, c, "clip-*"))}, key=float)
    summary, pg_ai, pg_ce = {}, [], []
    head = (["model", "clip"] + ["AI_10 lag %d" % g for g in LAGS] + ["CE_10 lag %d" % g for g in LAGS] +
            ["AI_10 grads", "CE_10 grads", "grad norm", "valid MSE"])
    for task in tasks:
        rows, ai_series, ce_series = [], [], []
        for cell in CELLS:
            for clip in clips:
                seeds = runs_of(out, task, cell, clip)
                if not seeds:
                    continue
                ds = [json.load(open(os.path.join(d, "diag", "diag.json")))["layers"][0] for d in seeds]
                js = [d["jacobian"] for d in ds]
                row = {"model": cell, "clip": float(clip), "seeds": len(seeds),
                       "samples": ds[0].get("param_grad", {}).get("samples"),
                       "sequences": js[0]["sequences"], "starts": js[0]["starts"],
                       "AI10": {g: mqi([at_lag(j["AI10"], g) for j in js]) for g in LAGS},
                       "CE10": {g: mqi([at_lag(j["CE10"], g) for j in js]) for g in LAGS},
                       "grad_AI10": mqi([d.get("param_grad", {}).get("AI10") for d in ds]),
                       "grad_CE10": mqi([d.get("param_grad", {}).get("CE10") for d in ds]),
                       "grad_norm": mqi([mean_grad_norm(d) for d in seeds]),
                       "valid_mse": mqi([final_mse(d) for d in seeds])}
                rows.append(row)
                n = min(len(j["AI10"]) for j in js)
                lags = list(range(1, n + 1))
                label = "%s%s" % (NAMES[cell], ", clip %s" % clip if float(clip) > 0 else "")
                ai_series.append({"label": label, "x": lags, "y": [quantile([j["AI10"][i] for j in js], 0.5) for i in range(n)]})
                ce_series.append({"label": label, "x": lags, "y": [quantile([j["CE10"][i] for j in js], 0.5) for i in range(n)]})
                pg_ai.append((label, TASKS.index(task) + 1, row["grad_AI10"][0]))
                pg_ce.append((label, TASKS.index(task) + 1, row["grad_CE10"][0]))
        if not rows:
            continue
        summary[task] = rows
        plot(cellc, os.path.join(out, "anisotropy_" + task), {"panels": [
            {"title": "%s: Jacobian products, AI_10" % task, "xlabel": "lag t - k (steps)",
             "ylabel": "AI_10 = s_1 / s_10 (ratio)", "logy": True, "series": ai_series},
            {"title": "%s: Jacobian products, CE_10" % task, "xlabel": "lag t - k (steps)",
             "ylabel": "CE_10 (share of energy)", "series": ce_series}]})
        r0 = rows[0]
        print("== %s: median [25%%, 75%%] over %d seeds; products from %d sequences x %d starts, "
              "per-sample gradients of %s sequences" % (task, r0["seeds"], r0["sequences"], r0["starts"], r0["samples"]))
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            cells = ([NAMES[r["model"]], "%g" % r["clip"]] + [fmt(r["AI10"][g]) for g in LAGS] +
                     [fmt(r["CE10"][g]) for g in LAGS] + [fmt(r["grad_AI10"]), fmt(r["grad_CE10"]), fmt(r["grad_norm"]),
                                                          fmt(r["valid_mse"])])
            print("| " + " | ".join(cells) + " |")
    if pg_ai:
        panels = []
        for title, ylabel, pts, logy in (("per-sample gradients, AI_10", "AI_10 = s_1 / s_10 (ratio)", pg_ai, True),
                                         ("per-sample gradients, CE_10", "CE_10 (share of energy)", pg_ce, False)):
            series = []
            for label in dict.fromkeys(p[0] for p in pts):
                xs = [p[1] for p in pts if p[0] == label]
                ys = [p[2] if p[2] is not None and math.isfinite(p[2]) else None for p in pts if p[0] == label]
                series.append({"label": label, "x": xs, "y": ys, "points": True})
            panels.append({"title": title, "xlabel": "task: 1 adding, 2 ar2, 3 delay, 4 mov. average",
                           "ylabel": ylabel, "logy": logy, "series": series})
        plot(cellc, os.path.join(out, "param_grad"), {"panels": panels})
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("wrote %s/summary.json and the figures anisotropy_<task>, param_grad (.svg, .png)" % out)


if __name__ == "__main__":
    main()
