"""Formats bench/run.sh's JSON lines as the markdown table of docs/performance.md."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
machines = [r for r in rows if r["kind"] == "machine"]
memcpy_bw = max(m["copy_bytes_per_s"] for m in machines)
copy_bw = max(m["stream_copy_bytes_per_s"] for m in machines)
gemm = max(m["sgemm_flops"] for m in machines)
print(f"Machine limits measured in this run: STREAM copy {copy_bw / 1e9:.2f} GB/s (read + write; memcpy {memcpy_bw / 1e9:.2f} GB/s), "
      f"sgemm {gemm / 1e9:.1f} GFLOP/s ([T*B, D] x [D, 3H] at T=512, B=64, H=D=128).\n")
cores = sorted({r.get("blas_core", "") for r in rows if r["kind"] == "torch"})
print(f"PyTorch's OpenBLAS kernels: {', '.join(c or 'unknown' for c in cores)} (bench/blas_env.sh: the CPUID choice); "
      "cellc's GEMM kernels: in the limits below.\n")
print("| cell | T | H=D | cellc s | PyTorch s | peer | speedup | PyTorch x[t] loop s | speedup vs x[t] | cellc GEMM share | scan-mode elementwise + scan GB/s (of copy) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
torch = {}
for r in rows:
    if r["kind"] == "torch":
        key = (r["cell"], r["T"], r["H"], r["style"])
        torch[key] = min(torch.get(key, float("inf")), r["total_s"])
best = {}
for r in rows:
    if r["kind"] == "cellc":
        key = (r["name"], r["T"], r["H"])
        if key not in best or r["total_s"] < best[key]["total_s"]:
            best[key] = r
for r in best.values():
    name, T, H = r["name"], r["T"], r["H"]
    style = "nn" if name in ("gru", "lstm") else "unbind"
    peer = "nn.GRU" if name == "gru" else "nn.LSTM" if name == "lstm" else "loop (unbind)"
    t = torch.get((name, T, H, style))
    ti = torch.get((name, T, H, "index"))
    c = r["total_s"]
    gshare = r["gemm_s"] / max(r["profiled_s"], 1e-12)
    scan = ""
    if r["scan_bytes"]:
        bw = (r["scan_bytes"] + r["rscan_bytes"] + r["elem_bytes"]) / max(r["scan_s"] + r["rscan_s"] + r["elem_s"], 1e-12)
        scan = f"{bw / 1e9:.2f} ({bw / copy_bw:.0%})"
    print(f"| {name} | {T} | {H} | {c:.3f} | {t:.3f} | {peer} | {t / c:.1f}x | "
          + (f"{ti:.2f} | {ti / c:.0f}x" if ti else " | ") + f" | {gshare:.0%} | {scan} |")
