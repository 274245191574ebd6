"""What the studies' scripts share (examples/repro/*.py): the statistics their tables report over
the seeds, and a run's last validation loss."""
import json
import math
import os


def quantile(v, q):
    """numpy's linear quantile of the values that are not None; an infinite value (a run that
    never got there) stays infinite"""
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    p = q * (len(v) - 1)
    i = int(p)
    if i + 1 >= len(v) or p == i or v[i] == v[i + 1]:
        return v[i]
    if math.isinf(v[i + 1]):
        return math.inf
    return v[i] + (v[i + 1] - v[i]) * (p - i)


def mqi(v):
    """[median, 25% quantile, 75% quantile]"""
    return [quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75)]


def final_mse(seed_dir):
    """The last validation loss of the run in SEED_DIR/run (metrics.jsonl), None before one"""
    path = os.path.join(seed_dir, "run", "metrics.jsonl")
    if not os.path.exists(path):
        return None
    last = None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") == "valid":
                last = r["loss"]
    return last
