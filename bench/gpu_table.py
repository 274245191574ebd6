"""The table of `make bench-gpu` (bench/gpu.sh) from its JSON lines: per cell and size, cellc's
cuda back end (scan and sequential) against PyTorch on the same GPU, and the scans' bandwidth as a
fraction of the device's copy bandwidth (bytes a scan must move: a and b read, h written)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
copy = max((r["gpu_copy_bytes_per_s"] for r in rows if r.get("kind") == "machine"), default=0)
print("GPU copy bandwidth (device to device, read + write): %.0f GB/s" % (copy / 1e9))
print()
print("| cell | T | H | cellc ms (mode) | PyTorch ms | PyTorch / cellc | scan GB/s | of copy |")
print("|---|---|---|---|---|---|---|---|")
torch = {(r["cell"], r["T"], r["H"]): r["total_s"] for r in rows if r.get("kind") == "torch"}
for r in rows:
    if r.get("kind") != "cellc":
        continue
    t = torch.get((r["name"], r["T"], r["H"]))
    scan_s = r["scan_s"] + r["rscan_s"]
    bw = (r["scan_bytes"] + r["rscan_bytes"]) / scan_s if scan_s > 0 and r["scan_bytes"] else 0
    print("| %s | %d | %d | %.2f (%s) | %s | %s | %s | %s |" % (
        r["name"], r["T"], r["H"], 1e3 * r["total_s"], r["mode"],
        "%.2f" % (1e3 * t) if t else "-", "%.1fx" % (t / r["total_s"]) if t else "-",
        "%.0f" % (bw / 1e9) if bw else "-", "%.0f%%" % (100 * bw / copy) if bw and copy else "-"))
