#!/usr/bin/env python3
"""results_compare.py A B: the dumps of tests/results_dump.sh in A and B hold the same bits: every
tensor of every safetensors file equal byte for byte (the files' metadata, which holds times and
paths, aside), every metrics line equal but its time fields."""
import json, os, struct, sys

TIMES = {"tokens_per_s", "elapsed_s", "time", "seconds", "steps_per_s"}

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}

def metrics(path):
    rows = []
    for line in open(path):
        r = json.loads(line)
        rows.append({k: v for k, v in r.items() if k not in TIMES})
    return rows

def main(a, b):
    bad = n = 0
    for root, _, files in os.walk(a):
        for name in sorted(files):
            if not (name.endswith(".safetensors") or name == "metrics.jsonl"):
                continue
            fa = os.path.join(root, name)
            fb = os.path.join(b, os.path.relpath(fa, a))
            n += 1
            if not os.path.exists(fb):
                print("missing in %s: %s" % (b, os.path.relpath(fa, a)))
                bad += 1
                continue
            ta, tb = (metrics(fa), metrics(fb)) if name == "metrics.jsonl" else (tensors(fa), tensors(fb))
            if ta != tb:
                what = ""
                if isinstance(ta, dict):
                    what = " (" + ", ".join(sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))) + ")"
                print("differs: %s%s" % (os.path.relpath(fa, a), what))
                bad += 1
    print("results_compare: %d files, %d differ" % (n, bad))
    return 1 if bad or n == 0 else 0

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: results_compare.py A B")
    sys.exit(main(sys.argv[1], sys.argv[2]))
