"""summary.py: the numbers of examples/diag/*.sh, read from the diag.json files that cellc diag
wrote (docs/diagnostics.md explains each). Usage:
  python3 summary.py gates  DIR...     layer 0's gate: mean, below_0.1, above_0.9, share in (0.1, 0.9)
  python3 summary.py slope  DIR...     layer 0's slope of log S against log P, S at lag 1, eff_lr at lags 5, 10
  python3 summary.py tokens DIR...     layer 0's gate means and state change by input token
  python3 summary.py grad   DIR...     layer 0's mean ||dL/dh_t|| at t = 1, T/2, T
  python3 summary.py final  RUN...     the test accuracy or loss of training runs (metrics.jsonl)"""
import json
import os
import sys


def layer0(d):
    with open(os.path.join(d, "diag.json")) as f:
        return json.load(f)["layers"][0]


def gates(dirs):
    print("%-44s %-5s %6s %9s %9s %10s" % ("run", "gate", "mean", "below_0.1", "above_0.9", "in_0.1_0.9"))
    for d in dirs:
        for g in layer0(d)["gates"]:
            print("%-44s %-5s %6.3f %9.3f %9.3f %10.3f" % (d[-44:], g["name"], g["mean"], g["below_0.1"], g["above_0.9"],
                                                        1 - g["below_0.1"] - g["above_0.9"]))


def slope(dirs):
    print("%-40s %-9s %7s %-6s %7s %9s %9s %9s" % ("run", "predictor", "slope", "compl.", "slope", "S(lag 1)", "eff_lr 5",
                                                  "eff_lr 10"))

    def f(v):
        return "%7.3f" % v if v is not None else "%7s" % "null"
    for d in dirs:
        j = layer0(d)["jacobian"]
        e = j["eff_lr"]
        print("%-40s %-9s %s %-6s %s %9.3g %9.3g %9.3g" % (
            d[-40:], j["predictor"], f(j["slope"]), j["predictor_complement"], f(j["slope_complement"]), j["S_median"][0],
            e[4] if len(e) > 4 else float("nan"), e[9] if len(e) > 9 else float("nan")))


def tokens(dirs):
    for d in dirs:
        L = layer0(d)
        print(d)
        for g in L["gates"]:
            print("  gate %s mean by token: %s" % (g["name"], ", ".join("%s: %.3f" % kv for kv in sorted(g["by_token"].items(), key=lambda kv: int(kv[0])))))
        print("  ||h_t - h_{t-1}|| by token: %s" % ", ".join("%s: %.3f" % kv for kv in sorted(L["state_change_by_token"].items(), key=lambda kv: int(kv[0]))))


def grad(dirs):
    for d in dirs:
        g = layer0(d)["grad_norm_per_step"]
        T = len(g)
        print("%-44s t=1 %.3g  t=%d %.3g  t=%d %.3g  (ratio t=1 / t=T %.3g)" % (d[-44:], g[0], T // 2, g[T // 2 - 1], T, g[-1], g[0] / g[-1] if g[-1] else float("nan")))


def final(runs):
    for r in runs:
        with open(os.path.join(r, "metrics.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        test = [x for x in lines if x.get("split") == "test"][-1]
        valid = [x for x in lines if x.get("split") == "valid"]
        print("%-44s test loss %.4g accuracy %s; valid accuracy (loss for MSE) by step: %s" % (
            r[-44:], test["loss"], test.get("accuracy"),
            " ".join("%d:%.3f" % (v["step"], v["accuracy"] if v.get("accuracy") is not None else v["loss"]) for v in valid)))


if __name__ == "__main__":
    {"gates": gates, "slope": slope, "tokens": tokens, "grad": grad, "final": final}[sys.argv[1]](sys.argv[2:])
