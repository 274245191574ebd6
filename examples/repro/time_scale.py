"""time_scale.py: the table and figures of examples/repro/time_scale.sh from the diag.json files
it left in OUT/<task>/<cell>/seed-<s>/diag-<step>/ (docs/experiments.md). Prints, per task and
cell, the slope s (diag's slope_complement: log S against the log of the product of the gate on
the new input) at each probe step as median [25%, 75%] over the seeds; the same at step 800 by
least squares (slope_complement_ols) and with the alternative initialization (OUT/adding/normal-*);
the effective learning rate at lags 10 and 40; the final validation MSE. Writes summary.json and
the figures through `cellc plot --figure`: profile_<task> (per cell: the median effective-LR
profile at step 800 with the zeroth-order overlay P(lag)/P(1) and the fitted power (P/P(1))^s)
and slope_<task> (per cell: s across the probe steps, median and quartiles).
Usage: python3 time_scale.py OUT [--cellc bin/cellc]"""
import glob
import json
import os
import re
import subprocess
import sys

from repro_stats import final_mse, mqi, quantile

CELLS = ["leaky", "scalar_gate", "multi_gate"]
NAMES = {"leaky": "leaky (alpha 0.8)", "scalar_gate": "scalar gate", "multi_gate": "multi gate"}


def fmt(t):
    if t[0] is None:
        return "n/a"
    return "%.3f [%.3f, %.3f]" % tuple(t)


def jac(path):
    with open(path) as f:
        return json.load(f)["layers"][0]["jacobian"]


def seeds_of(out, task, tag, cell):
    return sorted(glob.glob(os.path.join(out, task, tag + cell, "seed-*")), key=lambda d: int(d.rsplit("-", 1)[1]))


def steps_of(seed_dir):
    return sorted(int(m.group(1)) for d in os.listdir(seed_dir) for m in [re.match(r"diag-(\d+)$", d)]
                  if m and os.path.exists(os.path.join(seed_dir, d, "diag.json")))


def median_curve(curves):
    n = min(len(c) for c in curves)
    return [quantile([c[i] for c in curves], 0.5) for i in range(n)]


def plot(cellc, path, fig):
    with open(path + ".json", "w") as f:
        json.dump(fig, f)
    subprocess.run([cellc, "plot", "--figure", path + ".json", "--out", path], check=True, stdout=subprocess.DEVNULL)


def main():
    out = sys.argv[1]
    cellc = sys.argv[sys.argv.index("--cellc") + 1] if "--cellc" in sys.argv else "bin/cellc"
    summary = {}
    for task in sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))):
        rows, profile_panels, slope_panels = {}, [], []
        for cell in CELLS:
            seeds = seeds_of(out, task, "", cell)
            if not seeds:
                continue
            steps = sorted(set.intersection(*[set(steps_of(d)) for d in seeds]))
            js = {st: [jac(os.path.join(d, "diag-%d" % st, "diag.json")) for d in seeds] for st in steps}
            row = {"seeds": len(seeds), "steps": steps,
                   "s": {st: mqi([j["slope_complement"] for j in js[st]]) for st in steps},
                   "predictor": js[steps[0]][0]["predictor_complement"]}
            last = steps[-1]
            row["s_ols_last"] = mqi([j["slope_complement_ols"] for j in js[last]])
            row["eff_lr10_last"] = mqi([j["eff_lr"][9] for j in js[last]])
            row["eff_lr40_last"] = mqi([j["eff_lr"][39] if len(j["eff_lr"]) > 39 else None for j in js[last]])
            row["valid_mse"] = mqi([final_mse(d) for d in seeds])
            alt = seeds_of(out, task, "normal-", cell)
            if alt:
                for st in (0, last):
                    vals = [jac(os.path.join(d, "diag-%d" % st, "diag.json"))["slope_complement"] for d in alt
                            if os.path.exists(os.path.join(d, "diag-%d" % st, "diag.json"))]
                    row["s_normal_init_%d" % st] = mqi(vals)
                row["valid_mse_normal_init"] = mqi([final_mse(d) for d in alt])
            rows[cell] = row
            # the profile at the last probe: medians over the seeds
            eff = median_curve([j["eff_lr"] for j in js[last]])
            pc = median_curve([j["P_complement_median"] for j in js[last]])
            lags = list(range(1, len(eff) + 1))
            s_med = row["s"][last][0]
            zeroth = [p / pc[0] for p in pc]
            profile_panels.append({
                "title": "%s, step %d" % (NAMES[cell], last), "xlabel": "lag t - k (steps)",
                "ylabel": "eff. learning rate S(lag)/S(1)", "logy": True,
                "series": [{"label": "measured, median of %d seeds" % len(seeds), "x": lags, "y": eff},
                           {"label": "zeroth order P(lag)/P(1)", "x": lags, "y": zeroth},
                           {"label": "fitted (P/P(1))^s, s = %.3f" % s_med, "x": lags,
                            "y": [z ** s_med for z in zeroth]}]})
            slope_panels.append({
                "title": NAMES[cell], "xlabel": "training step", "ylabel": "slope s of log S on log P",
                "series": [{"label": "median over %d seeds" % len(seeds), "x": steps, "y": [row["s"][st][0] for st in steps]},
                           {"label": "25% quantile", "x": steps, "y": [row["s"][st][1] for st in steps], "points": True},
                           {"label": "75% quantile", "x": steps, "y": [row["s"][st][2] for st in steps], "points": True}]})
        if not rows:
            continue
        summary[task] = rows
        plot(cellc, os.path.join(out, "profile_" + task), {"panels": profile_panels, "share_y": True})
        plot(cellc, os.path.join(out, "slope_" + task), {"panels": slope_panels, "share_y": True})
        print("== %s: slope s (median [25%%, 75%%] over seeds) at each probe step" % task)
        for cell, row in rows.items():
            print("%-12s P = prod %-4s %d seeds" % (cell, row["predictor"], row["seeds"]))
            print("  " + "  ".join("%d: %s" % (st, fmt(row["s"][st])) for st in row["steps"]))
            print("  step %d: s by least squares %s; eff. lr lag 10 %s, lag 40 %s; valid MSE %s" % (
                row["steps"][-1], fmt(row["s_ols_last"]), fmt(row["eff_lr10_last"]), fmt(row["eff_lr40_last"]),
                fmt(row["valid_mse"])))
            if "s_normal_init_0" in row:
                print("  init N(0, 1/64): s at 0 %s, at %d %s; valid MSE %s" % (
                    fmt(row["s_normal_init_0"]), row["steps"][-1], fmt(row["s_normal_init_%d" % row["steps"][-1]]),
                    fmt(row["valid_mse_normal_init"])))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("wrote %s/summary.json and the figures profile_<task>, slope_<task> (.svg, .png)" % out)


if __name__ == "__main__":
    main()
