"""gated_linear.py: the tables and figures of examples/repro/gated_linear.sh from what it left in
OUT (docs/experiments.md):
  OUT/gates/see_h-<false|true>/seed-<s>/        the training runs (a `cellc train --seeds` sweep)
  OUT/gates/see_h-<...>/diag/seed-<s>-init/      cellc diag at initialization
  OUT/gates/see_h-<...>/diag/seed-<s>-trained/   cellc diag after training
  OUT/copy-T<L>/<ugi|gumbel>/seed-<s>/           copying at L blanks, each init a sweep
Prints (1) the first layer's gate z: the share of its values in (0.1, 0.9) at initialization and
after training, below 0.1 and above 0.9 after, the test accuracy; (2) per length and init the
valid accuracy at some of the evaluations, the steps to reach the threshold and the test
accuracy; all as median [25%, 75%] over the seeds. Writes summary.json and, through `cellc plot
--figure`, gates_layer0 (the median histogram of layer 0's gate, before and after, per see_h)
and copying_accuracy (the valid accuracy by step per length: medians and quartiles).
Usage: python3 gated_linear.py OUT [--cellc bin/cellc] [--threshold 0.5]"""
import glob
import json
import math
import os
import re
import subprocess
import sys

from repro_stats import mqi, quantile

INITS = [("ugi", "UGI"), ("gumbel", "Gumbel-UGI (layer 0 gumbel(0, 0.5))")]


def num(x, f):
    return "n/a" if x is None else "never" if math.isinf(x) else f % x


def fmt(t, f="%.3f"):
    return "n/a" if t[0] is None else "%s [%s, %s]" % (num(t[0], f), num(t[1], f), num(t[2], f))


def seed_dirs(sweep):
    return sorted((d for d in glob.glob(os.path.join(sweep, "seed-*")) if re.search(r"seed-\d+$", d)),
                  key=lambda d: int(d.rsplit("-", 1)[1]))


def metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(x) for x in f if x.strip()]


def test_accuracy(rows):
    t = [r for r in rows if r.get("split") == "test"]
    return t[-1].get("accuracy") if t else None


def gate0(path):
    with open(os.path.join(path, "diag.json")) as f:
        g = json.load(f)["layers"][0]["gates"][0]
    return g


def plot(cellc, path, fig):
    with open(path + ".json", "w") as f:
        json.dump(fig, f)
    subprocess.run([cellc, "plot", "--figure", path + ".json", "--out", path], check=True, stdout=subprocess.DEVNULL)


def gates_part(out, cellc, summary):
    rows, panels = {}, []
    for see in ("false", "true"):
        base = os.path.join(out, "gates", "see_h-" + see)
        runs = [d for d in seed_dirs(base) if os.path.exists(os.path.join(base, "diag", os.path.basename(d) + "-trained", "diag.json"))]
        if not runs:
            continue
        init = [gate0(os.path.join(base, "diag", os.path.basename(d) + "-init")) for d in runs]
        done = [gate0(os.path.join(base, "diag", os.path.basename(d) + "-trained")) for d in runs]
        inside = [1 - g["below_0.1"] - g["above_0.9"] for g in init]
        inside_t = [1 - g["below_0.1"] - g["above_0.9"] for g in done]
        rows[see] = {"seeds": len(runs), "gate": done[0]["name"], "in_0.1_0.9_init": mqi(inside),
                     "in_0.1_0.9_trained": mqi(inside_t), "below_0.1_trained": mqi([g["below_0.1"] for g in done]),
                     "above_0.9_trained": mqi([g["above_0.9"] for g in done]), "mean_trained": mqi([g["mean"] for g in done]),
                     "test_accuracy": mqi([test_accuracy(metrics(d)) for d in runs])}
        nb = len(init[0]["hist"])
        x = [(i + 0.5) / nb for i in range(nb)]

        def med_hist(gs):
            fr = [[c / max(1, sum(g["hist"])) for c in g["hist"]] for g in gs]
            return [quantile([f[i] for f in fr], 0.5) for i in range(nb)]
        panels.append({"title": "mgu, see_h = %s: layer 0's gate %s" % (see, done[0]["name"]),
                       "xlabel": "gate value", "ylabel": "share of values per bin (fraction)",
                       "series": [{"label": "at initialization, median of %d seeds" % len(runs), "x": x, "y": med_hist(init)},
                                  {"label": "after training, median of %d seeds" % len(runs), "x": x, "y": med_hist(done)}]})
    if not rows:
        return
    summary["gates"] = rows
    plot(cellc, os.path.join(out, "gates_layer0"), {"share_y": True, "panels": panels})
    print("== 1. layer 0's gate z of mgu on copying (median [25%, 75%] over the seeds)")
    print("%-7s %5s  %-25s %-25s %-25s %-25s %s" % ("see_h", "seeds", "in (0.1, 0.9) at init", "in (0.1, 0.9) trained",
                                                    "below 0.1 trained", "above 0.9 trained", "test accuracy"))
    for see, r in rows.items():
        print("%-7s %5d  %-25s %-25s %-25s %-25s %s" % (see, r["seeds"], fmt(r["in_0.1_0.9_init"]), fmt(r["in_0.1_0.9_trained"]),
                                                        fmt(r["below_0.1_trained"]), fmt(r["above_0.9_trained"]),
                                                        fmt(r["test_accuracy"])))


def copy_part(out, cellc, threshold, summary):
    lengths = sorted((int(m.group(1)) for d in os.listdir(out) for m in [re.match(r"copy-T(\d+)$", d)] if m))
    panels, result = [], {}
    for L in lengths:
        rows, series = {}, []
        for init, name in INITS:
            runs = seed_dirs(os.path.join(out, "copy-T%d" % L, init))
            # a run still going (or stopped) has no test row yet: left out
            ms = [m for m in (metrics(d) for d in runs if os.path.exists(os.path.join(d, "metrics.jsonl")))
                  if test_accuracy(m) is not None]
            curves = [[(r["step"], r["accuracy"]) for r in m if r.get("split") == "valid"] for m in ms]
            curves = [c for c in curves if c]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            steps = [s for s, _ in curves[0][:n]]
            by_step = [mqi([c[i][1] for c in curves]) for i in range(n)]
            reach = [next((s for s, a in c if a >= threshold), math.inf) for c in curves]
            rows[init] = {"seeds": len(curves), "steps": steps, "valid_accuracy": by_step,
                          "steps_to_threshold": mqi(reach), "reached": sum(not math.isinf(r) for r in reach),
                          "test_accuracy": mqi([test_accuracy(m) for m in ms])}
            short = name.split(" ")[0]  # the legend's room: "UGI", "Gumbel-UGI"
            series += [{"label": "%s: median of %d seeds" % (short, len(curves)), "x": steps, "y": [b[0] for b in by_step]},
                       {"label": "%s: 25%% and 75%%" % short, "x": steps + steps,
                        "y": [b[1] for b in by_step] + [b[2] for b in by_step], "points": True}]
        if not rows:
            continue
        result[str(L)] = rows
        panels.append({"title": "mgu on copying, %d blanks" % L, "xlabel": "training step", "ylabel": "valid accuracy (fraction)",
                       "series": series})
        print("== 2. copying with %d blanks, mgu see_h = false: valid accuracy by step (median [25%%, 75%%] over the seeds)" % L)
        for init, name in INITS:
            if init not in rows:
                continue
            r = rows[init]
            pick = sorted(set([len(r["steps"]) - 1] + [i * (len(r["steps"]) - 1) // 5 for i in range(5)]))
            print("%-38s %d seeds" % (name, r["seeds"]))
            print("  " + "  ".join("%d: %s" % (r["steps"][i], fmt(r["valid_accuracy"][i])) for i in pick))
            print("  steps to valid accuracy %g: %s (%d of %d reached it); test accuracy %s" % (
                threshold, fmt(r["steps_to_threshold"], "%.0f"), r["reached"], r["seeds"], fmt(r["test_accuracy"])))
    if panels:
        summary["copying"] = result
        summary["threshold"] = threshold
        plot(cellc, os.path.join(out, "copying_accuracy"), {"share_y": True, "panels": panels})


def finite(x):
    """summary.json's numbers: a run that never reached the threshold (infinite steps) as null"""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return None if isinstance(x, float) and math.isinf(x) else x


def main():
    out = sys.argv[1]
    cellc = sys.argv[sys.argv.index("--cellc") + 1] if "--cellc" in sys.argv else "bin/cellc"
    threshold = float(sys.argv[sys.argv.index("--threshold") + 1]) if "--threshold" in sys.argv else 0.5
    summary = {}
    gates_part(out, cellc, summary)
    copy_part(out, cellc, threshold, summary)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(finite(summary), f, indent=1)
    print("wrote %s/summary.json and the figures gates_layer0, copying_accuracy (.svg, .png)" % out)


if __name__ == "__main__":
    main()
