"""thesis.py: the table and figures of examples/repro/thesis.sh from what it left in OUT
(docs/experiments.md): OUT/<mixed|hard>/ a `cellc train` sweep over init and data seeds, each run
with grad_per_step.json (the largest ||dL/dh_t|| per step during training) and diag/diag.json
(`cellc diag --by-token` on its best-valid checkpoint). Prints per training mode, as median
[25%, 75%] over the runs: the test accuracy of the best-valid checkpoint and how many runs
generalize (0.95 or more); the largest ||dL/dh_t|| at t = 1, T/2 and T and the ratio t = 1 over
t = T; each gate's mean and the state change on the informative tokens and on the fillers (a run's
filler value: its mean over the filler tokens). Writes summary.json and, through `cellc plot
--figure`, grad_per_step (per mode: the median and the quartiles of the runs' curves against t,
one y range), tokens (the first gate's mean and the state change) and tokens_gates (every gate's
mean): per token, both modes' medians with their quartiles as markers, the tokens named as diag
names them.
Usage: python3 thesis.py OUT [--cellc bin/cellc]"""
import json
import os
import subprocess
import sys

from repro_stats import mqi

MODES = [("mixed", "mixed (40% easy)"), ("hard", "hard only")]


def fmt(t, f="%.3f"):
    return "n/a" if t[0] is None else ("%s [%s, %s]" % (f, f, f)) % tuple(t)


def load(path):
    with open(path) as f:
        return json.load(f)


def plot(cellc, path, fig):
    with open(path + ".json", "w") as f:
        json.dump(fig, f)
    subprocess.run([cellc, "plot", "--figure", path + ".json", "--out", path], check=True, stdout=subprocess.DEVNULL)


def token_names(diag_dir, n):
    """the token names of diag's own token plot (plots.json), else the ids"""
    try:
        for fig in load(os.path.join(diag_dir, "plots.json")):
            if fig["file"].startswith("tokens_layer0"):
                names = fig["panels"][0].get("xnames")
                if names and len(names) == n:
                    return names
    except (OSError, ValueError, KeyError):
        pass
    return [str(i) for i in range(n)]


def mode_stats(sweep):
    """one mode's runs that finished and have their probes"""
    runs = [os.path.join(sweep, r["dir"]) for r in load(os.path.join(sweep, "summary.json"))["runs"] if r.get("status") == 0]
    runs = [r for r in runs if os.path.exists(os.path.join(r, "grad_per_step.json")) and
            os.path.exists(os.path.join(r, "diag", "diag.json"))]
    if not runs:
        return None
    finals = {r["dir"]: r["final"] for r in load(os.path.join(sweep, "summary.json"))["runs"] if r.get("status") == 0}
    grads = [load(os.path.join(r, "grad_per_step.json"))["layers"][0]["max_grad_norm_per_step"] for r in runs]
    layers = [load(os.path.join(r, "diag", "diag.json"))["layers"][0] for r in runs]
    T = min(len(g) for g in grads)
    tokens = sorted(layers[0]["state_change_by_token"], key=int)
    names = token_names(os.path.join(runs[0], "diag"), len(tokens))
    # informative tokens: those diag names by their id alone (temporal_xor: 0, 1; the rest "fill N")
    informative = [t for t, n in zip(tokens, names) if not n.startswith("fill")]
    fillers = [t for t in tokens if t not in informative]
    acc = [finals[os.path.basename(r)].get("test_best.accuracy", finals[os.path.basename(r)].get("test.accuracy")) for r in runs]
    st = {"runs": len(runs), "T": T, "test_best_accuracy": mqi(acc),
          "generalize": sum(a is not None and a >= 0.95 for a in acc),
          "grad": [mqi([g[t] for g in grads]) for t in range(T)],
          "grad_ratio_first_last": mqi([g[0] / g[T - 1] if g[T - 1] else None for g in grads]),
          "tokens": tokens, "names": names, "informative": informative, "fillers": fillers, "gates": {}}
    for gi, g in enumerate(layers[0]["gates"]):
        by = [L["gates"][gi]["by_token"] for L in layers]
        st["gates"][g["name"]] = {"by_token": {t: mqi([b[t] for b in by]) for t in tokens},
                                  "fillers": mqi([sum(b[t] for t in fillers) / len(fillers) for b in by]) if fillers else None}
    sc = [L["state_change_by_token"] for L in layers]
    st["state_change"] = {"by_token": {t: mqi([s[t] for s in sc]) for t in tokens},
                          "fillers": mqi([sum(s[t] for t in fillers) / len(fillers) for s in sc]) if fillers else None}
    return st


def main():
    out = sys.argv[1]
    cellc = sys.argv[sys.argv.index("--cellc") + 1] if "--cellc" in sys.argv else "bin/cellc"
    summary = {}
    for mode, _ in MODES:
        if os.path.exists(os.path.join(out, mode, "summary.json")):
            st = mode_stats(os.path.join(out, mode))
            if st:
                summary[mode] = st
    if not summary:
        sys.exit("thesis.py: no finished runs with their probes under %s" % out)
    grad_panels = []
    for mode, name in MODES:
        if mode not in summary:
            continue
        st = summary[mode]
        t = list(range(1, st["T"] + 1))
        grad_panels.append({"title": "%s: %d runs" % (name, st["runs"]), "xlabel": "step t", "logy": True,
                            "ylabel": "largest ||dL/dh_t|| in training",
                            "series": [{"label": "median", "x": t, "y": [g[0] for g in st["grad"]]},
                                       {"label": "25% quantile", "x": t, "y": [g[1] for g in st["grad"]]},
                                       {"label": "75% quantile", "x": t, "y": [g[2] for g in st["grad"]]}]})
    plot(cellc, os.path.join(out, "grad_per_step"), {"share_y": True, "panels": grad_panels})
    first = summary[next(m for m, _ in MODES if m in summary)]

    def token_panel(title, ylabel, key, g):
        series = []
        for mode, name in MODES:
            if mode not in summary:
                continue
            st = summary[mode]
            q = st[key][g] if g else st[key]
            x = list(range(len(st["tokens"])))
            series += [{"label": "%s: median" % name, "x": x, "y": [q["by_token"][t][0] for t in st["tokens"]]},
                       {"label": "%s: 25%% and 75%%" % name.split(" ")[0], "x": x + x, "points": True,
                        "y": [q["by_token"][t][1] for t in st["tokens"]] + [q["by_token"][t][2] for t in st["tokens"]]}]
        return {"title": "%s by input token" % title, "xlabel": "input token", "ylabel": ylabel,
                "xnames": first["names"], "series": series}
    gates = [token_panel("gate " + g, "mean of gate %s (0 to 1)" % g, "gates", g) for g in first["gates"]]
    state = token_panel("state change", "mean ||h_t - h_{t-1}|| (state units)", "state_change", None)
    # the thesis's pair, the first gate (a GRU's update gate z) and the state change; then every gate
    plot(cellc, os.path.join(out, "tokens"), {"panels": [gates[0], state]})
    plot(cellc, os.path.join(out, "tokens_gates"), {"panels": gates})

    print("== GRU on temporal XOR, per training mode (median [25%, 75%] over the runs)")
    for mode, name in MODES:
        if mode not in summary:
            continue
        st = summary[mode]
        T = st["T"]
        print("%-17s %d runs: test accuracy (best-valid checkpoint) %s, %d of %d at 0.95 or more" % (
            name, st["runs"], fmt(st["test_best_accuracy"]), st["generalize"], st["runs"]))
        print("  largest ||dL/dh_t|| in training: t=1 %s, t=%d %s, t=%d %s; t=1 / t=%d %s" % (
            fmt(st["grad"][0], "%.3g"), T // 2, fmt(st["grad"][T // 2 - 1], "%.3g"), T, fmt(st["grad"][T - 1], "%.3g"),
            T, fmt(st["grad_ratio_first_last"], "%.3g")))
        for g, q in list(st["gates"].items()) + [("||h_t - h_{t-1}||", st["state_change"])]:
            label = "gate %s mean" % g if not g.startswith("|") else "state change " + g
            print("  %-28s %s; fillers %s" % (label, "; ".join(
                "token %s %s" % (t, fmt(q["by_token"][t])) for t in st["informative"]),
                fmt(q["fillers"]) if q["fillers"] else "n/a"))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("wrote %s/summary.json and the figures grad_per_step, tokens, tokens_gates (.svg, .png)" % out)


if __name__ == "__main__":
    main()
