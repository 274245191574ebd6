"""The few lines of safetensors cellc's Python package reads: `cellc run --out` files (F32, F64; I32, I64 for lengths)."""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64}


def read(path):
    """{name: tensor} of every tensor in the file, and its __metadata__ dict."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError("%s: tensor '%s' has dtype %s (only F32, F64, I32 and I64 are read)" % (path, name, info["dtype"]))
        lo, hi = info["data_offsets"]
        raw = bytearray(blob[base + lo:base + hi])
        t = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta
