# Role: a small, dependency-free (numpy only) reader and writer of safetensors files,
# used by the PyTorch oracle (parity.py, selftest.py) to talk to `cellc run`.
#
# Format: 8-byte little-endian unsigned header length N, then N bytes of JSON
#   {"__metadata__": {str: str}?, NAME: {"dtype": "F64", "shape": [..], "data_offsets": [b, e]}, ...}
# then the data buffer; offsets are relative to the buffer's start, row-major, little-endian.
# write() emits what the reference implementation emits: compact JSON, "__metadata__" first,
# tensors sorted by dtype size (largest first, so every tensor is naturally aligned) and then by
# name, data laid out in that order without holes, and the header padded with spaces so that
# the data starts on an 8-byte boundary.
import json
import struct

import numpy as np

DTYPES = {  # safetensors name -> numpy dtype (little-endian)
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
MAX_HEADER = 100 * 1000 * 1000


class SafetensorsError(ValueError):
    pass


def _dtype_name(dt):
    dt = np.dtype(dt)
    key = dt.newbyteorder("<") if dt.itemsize > 1 else dt
    for name, npdt in DTYPES.items():
        if npdt == key:
            return name
    raise SafetensorsError("unsupported dtype %s" % dt)


def parse(buf, strict=True):
    """Parse the bytes of a safetensors file: returns ({name: ndarray}, metadata dict or None)."""
    if len(buf) < 8:
        raise SafetensorsError("file too short (%d bytes) for the header length" % len(buf))
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER or 8 + n > len(buf):
        raise SafetensorsError("header length %d does not fit in a file of %d bytes" % (n, len(buf)))
    raw = buf[8:8 + n]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError("header is not UTF-8: %s" % e)
    if strict and not text.startswith("{"):
        raise SafetensorsError("header does not start with '{'")

    def no_dups(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise SafetensorsError("duplicate key %r in header" % k)
            d[k] = v
        return d
    try:
        header = json.loads(text, object_pairs_hook=no_dups)
    except json.JSONDecodeError as e:
        raise SafetensorsError("header is not valid JSON: %s" % e)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise SafetensorsError("__metadata__ must map strings to strings")
    data = buf[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"} or \
                not {"dtype", "shape", "data_offsets"} <= set(info):
            raise SafetensorsError("tensor %r: entry must have dtype, shape, data_offsets" % name)
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise SafetensorsError("tensor %r: bad shape %r" % (name, shape))
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)
                and 0 <= offs[0] <= offs[1] <= len(data)):
            raise SafetensorsError("tensor %r: bad data_offsets %r (buffer %d bytes)" % (name, offs, len(data)))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dt == "BF16":
            if offs[1] - offs[0] != 2 * count:
                raise SafetensorsError("tensor %r: %d bytes for %d BF16 elements" % (name, offs[1] - offs[0], count))
            u = np.frombuffer(data, dtype="<u2", count=count, offset=offs[0]).astype(np.uint32) << 16
            arr = u.view(np.float32).reshape(shape).copy()
        elif dt in DTYPES:
            npdt = DTYPES[dt]
            if offs[1] - offs[0] != npdt.itemsize * count:
                raise SafetensorsError("tensor %r: %d bytes for %d %s elements" % (name, offs[1] - offs[0], count, dt))
            arr = np.frombuffer(data, dtype=npdt, count=count, offset=offs[0]).reshape(shape)
            arr = arr.astype(npdt.newbyteorder("=") if npdt.itemsize > 1 else npdt, copy=True)
        else:
            raise SafetensorsError("tensor %r: unsupported dtype %r" % (name, dt))
        out[name] = arr
        spans.append((offs[0], offs[1], name))
    if strict:
        pos = 0
        for b, e, name in sorted(spans):
            if b != pos:
                raise SafetensorsError("tensor %r starts at %d, expected %d (holes or overlap)" % (name, b, pos))
            pos = e
        if pos != len(data):
            raise SafetensorsError("data buffer is %d bytes but the tensors cover %d" % (len(data), pos))
    return out, meta


def read(path, strict=True):
    """Read a safetensors file: returns ({name: ndarray}, metadata dict or None)."""
    with open(path, "rb") as f:
        buf = f.read()
    try:
        return parse(buf, strict)
    except SafetensorsError as e:
        raise SafetensorsError("%s: %s" % (path, e))


def load(path):
    return read(path)[0]


def dumps(tensors, metadata=None):
    """Serialize {name: array-like} (and optional {str: str} metadata) to bytes."""
    items = []
    for name, a in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorsError("bad tensor name %r" % (name,))
        a = np.asarray(a)
        dt = _dtype_name(a.dtype)
        items.append((name, dt, a))
    items.sort(key=lambda it: (-DTYPES[it[1]].itemsize, it[0]))
    header = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    chunks = []
    pos = 0
    for name, dt, a in items:
        b = np.ascontiguousarray(a, dtype=DTYPES[dt]).tobytes(order="C")
        header[name] = {"dtype": dt, "shape": [int(s) for s in a.shape], "data_offsets": [pos, pos + len(b)]}
        chunks.append(b)
        pos += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(chunks)


def write(path, tensors, metadata=None):
    """Write {name: array-like} to path (atomically: temporary file, then rename)."""
    import os
    buf = dumps(tensors, metadata)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(buf)
    os.replace(tmp, path)
