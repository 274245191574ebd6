"""Finding cellc and its standard library, the cache of emitted cells, and the initial values.

A cache entry is one directory, CACHE/<key>, holding what `cellc emit --target cpu --torch
--torch-ops` wrote (P.h, P.json, P.o, libP.so, P_torch.py, P_ops.py) and one
`init-<seed>.safetensors` per seed used (`init-<seed>-f64.safetensors` for float64 modules: the
output of `cellc run --T 1 --B 1 --seed S [--precision f64]`, whose param.*, buffer.* and h0.*
are the cell's initial values). The key hashes everything the emitted code or the initial values depend on:
the source of the cell file and of every file it imports, the cell, the dims, the options, the
mode, the target CPU level, and cellc itself (its version and a hash of its binary's bytes, so a
rebuilt cellc never reuses an older one's code, and a byte-identical copy of it finds the same
entries). No CELLC_* tuning variable
changes emitted code (docs/tuning.md), so none is part of the key.
Entries are created whole: emitted into a fresh temporary directory inside the cache, then
renamed into place; a process that loses the race to another removes its own copy and uses the
winner's. Files added later (init-<seed>) are written beside and renamed over, also whole.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

# How many times this process emitted a cell, drew initial values, emitted a cell's CUDA code and
# built a CUDA library (tests read them).
stats = {"compiles": 0, "inits": 0, "cuda_emits": 0, "cuda_builds": 0}

_HERE = os.path.dirname(os.path.abspath(__file__))
_IMPORT = re.compile(r'^\s*import\s+"([^"]+)"', re.M)


class CellcError(RuntimeError):
    """cellc failed (the message is its standard error): a bad cell, dims or options."""


def cellc_binary():
    """CELLC_BIN; else the cellc this package was installed with; else the cellc of the checkout
    the package lies in (python/cellc -> bin/cellc); else cellc on the PATH."""
    env = os.environ.get("CELLC_BIN")
    if env:
        return env
    try:
        from ._install import CELLC_BIN  # written by `make install`
        if os.access(CELLC_BIN, os.X_OK):
            return CELLC_BIN
    except ImportError:
        pass
    repo = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "bin", "cellc")
    if os.access(repo, os.X_OK):
        return repo
    found = shutil.which("cellc")
    if not found:
        raise CellcError("cellc: no cellc binary found (set CELLC_BIN, or put cellc on the PATH)")
    return found


def stdlib_dir(binary):
    """Where cellc looks for its standard library (cmd/cli.c, cli_stdlib_dir: the same order)."""
    env = os.environ.get("CELLC_STDLIB")
    if env:
        return env
    exe = os.path.dirname(os.path.realpath(binary))
    for c in ("../stdlib", "../share/cellc/stdlib", "../../stdlib"):
        d = os.path.normpath(os.path.join(exe, c))
        if os.access(d, os.R_OK):
            return d
    return "stdlib"


def resolve(path_or_name, binary):
    """A file path as given; a bare name (gru, lru.cell) not found as a file: the stdlib's."""
    if os.path.isfile(path_or_name):
        return os.path.abspath(path_or_name)
    name = path_or_name if path_or_name.endswith(".cell") else path_or_name + ".cell"
    if os.sep not in path_or_name:
        cand = os.path.join(stdlib_dir(binary), name)
        if os.path.isfile(cand):
            return os.path.abspath(cand)
    raise FileNotFoundError("cellc: no cell file '%s' (and no %s in the standard library %s)"
                            % (path_or_name, name, stdlib_dir(binary)))


def sources(path, binary):
    """[(path, text)] of the file and every file it imports, recursively, as cellc finds them
    (next to the importing file, then in the standard library)."""
    seen, out, queue = set(), [], [os.path.abspath(path)]
    lib = stdlib_dir(binary)
    while queue:
        p = queue.pop(0)
        if p in seen:
            continue
        seen.add(p)
        with open(p, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
        out.append((p, text))
        for imp in _IMPORT.findall(text):
            for cand in (os.path.join(os.path.dirname(p), imp), os.path.join(lib, imp)):
                if os.path.isfile(cand):
                    queue.append(os.path.abspath(cand))
                    break
    return out


def run_cellc(binary, args):
    p = subprocess.run([binary] + args, capture_output=True, text=True)
    if p.returncode != 0:
        raise CellcError(p.stderr.strip() or "cellc %s: exit status %d" % (args[0], p.returncode))
    return p.stdout


def check(binary, path, cell):
    """The cell's entry of `cellc check --json` (the last cell of the file when cell is None)."""
    args = ["check", path, "--json"] + (["--cell", cell] if cell else [])
    cells = json.loads(run_cellc(binary, args))["cells"]
    if cell:
        for c in cells:
            if c["name"] == cell:
                return c
    return cells[-1]


def cpu_level():
    """x86-64-v3 (emit's default: AVX2, FMA) where this CPU has them; else the x86-64 baseline."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((l for l in f if l.startswith("flags")), "").split())
    except OSError:
        return "x86-64-v3"
    return "x86-64-v3" if {"avx2", "fma"} <= flags else "generic"


def cache_root():
    return os.environ.get("CELLC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cellc")


_identities = {}  # (real path, size, mtime) -> identity: a binary is read once per process


def cellc_identity(binary):
    """cellc's version and a hash of its binary's bytes: a rebuilt cellc never reuses an older one's
    code, and a copy of the same binary (a bundle for another machine) finds the entries it made."""
    real = os.path.realpath(binary)
    st = os.stat(real)
    stamp = (real, st.st_size, st.st_mtime_ns)
    if stamp not in _identities:
        h = hashlib.sha256()
        with open(real, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _identities[stamp] = [run_cellc(binary, ["--version"]).strip(), h.hexdigest()]
    return _identities[stamp]


def key(binary, path, cell, dims, options, mode, cpu):
    doc = {
        "cellc": cellc_identity(binary),
        "sources": [text for _, text in sources(path, binary)],
        "cell": cell, "dims": sorted(dims.items()), "options": sorted(options.items()),
        "mode": mode or "auto", "cpu": cpu,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _cell_args(path, cell, dims, options, mode):
    args = [path, "--cell", cell]
    if dims:
        args += ["--dims", ",".join("%s=%s" % kv for kv in dims.items())]
    for k, v in options.items():
        args += ["--set", "%s=%s" % (k, v)]
    if mode:
        args += ["--mode", mode]
    return args


def compiled(binary, path, cell, dims, options, mode):
    """The cache directory of this cell, emitting it first if no entry exists."""
    cpu = cpu_level()
    root = cache_root()
    entry = os.path.join(root, key(binary, path, cell, dims, options, mode, cpu))
    if os.path.isfile(os.path.join(entry, "P.json")):
        return entry
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=root)
    try:
        out = os.path.join(tmp, "out")
        run_cellc(binary, ["emit"] + _cell_args(path, cell, dims, options, mode)
                  + ["--out", out, "--torch", "--torch-ops", "--name", "P", "--cpu", cpu])
        stats["compiles"] += 1
        try:
            os.rename(out, entry)
        except OSError:  # another process made the entry first: use its copy
            if not os.path.isfile(os.path.join(entry, "P.json")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def initial_values(binary, entry, path, cell, dims, options, mode, seed, f64=False):
    """The path of entry/init-<seed>.safetensors: `cellc run --T 1 --B 1 --seed S`'s output, whose
    param.*, buffer.* and h0.* are drawn as `cellc run --seed S` draws them for any T and B (with
    f64, at `--precision f64`, as that run draws them)."""
    dst = os.path.join(entry, "init-%d%s.safetensors" % (seed, "-f64" if f64 else ""))
    if os.path.isfile(dst):
        return dst
    fd, tmp = tempfile.mkstemp(prefix=".init-", suffix=".safetensors", dir=entry)
    os.close(fd)
    os.chmod(tmp, 0o644)  # readable as the entry's other files are (mkstemp makes it private)
    try:
        # the interpreter at float32 (cellc run's default precision): no code is compiled for one step
        cell_options = {k: v for k, v in options.items() if k != "train_noise"}  # an emit setting only
        run_cellc(binary, ["run"] + _cell_args(path, cell, dims, cell_options, mode)
                  + ["--T", "1", "--B", "1", "--seed", str(seed), "--backend", "interp", "--out", tmp]
                  + (["--precision", "f64"] if f64 else []))
        stats["inits"] += 1
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dst


# ---- the CUDA target ----
#
# The CUDA code of a cell is emitted once (`cellc emit --target cuda`) into CACHE/cuda-<hash of
# P.cu>/, and the cpu entry of the same cell names that hash in its file `cuda.src` (so a second
# use emits nothing). Each way of building P.cu into a library has a folder of its own there:
# `sm_90/libP.so` (nvcc for that arch), or the test's emulated build. Keyed by the bytes of P.cu,
# a library built on one machine serves another that emits the same P.cu (a GPU machine without a
# host compiler runs what was built here: carry the cache, docs/python.md).


def _nvcc():
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if d and os.access(os.path.join(d, "bin", "nvcc"), os.X_OK):
            return os.path.join(d, "bin", "nvcc")
    return shutil.which("nvcc")


def nvcc_build(src, out, arch):
    """P.cu -> out/libP.so: `nvcc -shared` for arch with cuBLAS (the CUDA runtime linked in)."""
    nvcc = _nvcc()
    if not nvcc:
        raise CellcError("cellc: no nvcc to build the CUDA library of this cell (set CUDA_HOME), and no library "
                         "prebuilt for %s in the cache %s" % (arch, cache_root()))
    # The CUDA runtime is linked in statically and bound inside the library (-Bsymbolic), so that
    # the libcudart PyTorch loaded into the process, of whatever version, serves none of its calls;
    # cuBLAS is found where the toolkit that built it lies (an RPATH: also for libcublasLt), or on
    # the loader's path.
    lib64 = os.path.join(os.path.dirname(os.path.dirname(nvcc)), "lib64")
    lib64 = lib64 if lib64 == "/usr/local/cuda/lib64" else lib64 + ":/usr/local/cuda/lib64"
    p = subprocess.run([nvcc, "-O3", "-arch=" + arch, "-shared", "-Xcompiler", "-fPIC", "-Xlinker", "-Bsymbolic",
                        "-Xlinker", "--disable-new-dtags", "-Xlinker", "-rpath=" + lib64, os.path.join(src, "P.cu"),
                        "-o", os.path.join(out, "libP.so"), "-lcublas"], capture_output=True, text=True)
    if p.returncode != 0:
        raise CellcError("cellc: nvcc failed to build %s/P.cu for %s:\n%s" % (src, arch, (p.stderr or p.stdout).strip()))


def cuda_source(binary, entry, path, cell, dims, options, mode):
    """The directory of the cell's emitted CUDA code (P.cu, P.h, P.json, P.ptx)."""
    root = cache_root()
    ref = os.path.join(entry, "cuda.src")
    if os.path.isfile(ref):
        with open(ref) as f:
            src = os.path.join(root, f.read().strip())
        if os.path.isfile(os.path.join(src, "P.cu")):
            return src
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=root)
    try:
        out = os.path.join(tmp, "out")
        run_cellc(binary, ["emit"] + _cell_args(path, cell, dims, options, mode)
                  + ["--out", out, "--target", "cuda", "--name", "P"])
        stats["cuda_emits"] += 1
        with open(os.path.join(out, "P.cu"), "rb") as f:
            name = "cuda-" + hashlib.sha256(f.read()).hexdigest()[:32]
        src = os.path.join(root, name)
        try:
            os.rename(out, src)
        except OSError:  # the same P.cu is there already (another cell, or another process)
            if not os.path.isfile(os.path.join(src, "P.cu")):
                raise
        with open(os.path.join(tmp, "cuda.src"), "w") as f:
            f.write(name + "\n")
        os.chmod(os.path.join(tmp, "cuda.src"), 0o644)
        os.replace(os.path.join(tmp, "cuda.src"), ref)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return src


def cuda_library(src, kind, build):
    """src/<kind>/libP.so, built first by build(src, out_dir) where it is missing."""
    lib = os.path.join(src, kind, "libP.so")
    if os.path.isfile(lib):
        return lib
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=src)
    try:
        out = os.path.join(tmp, kind)
        os.makedirs(out)
        build(src, out)
        stats["cuda_builds"] += 1
        try:
            os.rename(out, os.path.join(src, kind))
        except OSError:
            if not os.path.isfile(lib):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib
