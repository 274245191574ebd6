"""cellc train on the device (train.device = cuda-emu: the CUDA training path on the CPU emulator)
against train.device = cpu on small configurations: every training step's loss and gradient norm,
the valid and test losses within 1e-4 relative; copying (embedding, readout all, masked
cross-entropy, AdamW, warmup and cosine, clipping; mgu in scan and sequential mode), temporal XOR
(GRU, readout last and mean, Adam with L2 and a per-tag group), adding (LRU with complex params,
linear encoder, MSE, SGD with momentum, clipping), residual blocks (LRU with batch norm and GLU,
GRU with layer norm and MLP, mgu with RMS norm), dropout and gumbel noise (the same counter-based
draws on both devices); a resume cpu -> cuda-emu -> cpu that continues the cpu run's curve; eval on the device;
exit 3 for a model larger than the device's free memory and for `cuda` without a driver. The last
line is "N passed, M failed"."""
import json
import re
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import check, finish  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 300
RTOL = 1e-4
tmp = tempfile.mkdtemp(prefix="cellc-gpu-train-")


def cellc(*args):
    return clitest.run([CELLC] + list(args), TIMEOUT)


def write(name, text):
    return clitest.write_in(tmp, name, text)


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


COMMON = """
[eval]
every   = 10
batches = 2

[log]
every = 1
"""

COPYING = write("copying.cfg", """
[task]
name     = copying
tokens   = 6
memorize = 2
length   = 4

[model]
layers  = 2
width   = 8
hidden  = 8
encoder = embed
block   = stack
readout = all

[train]
steps        = 20
batch        = 4
optimizer    = adamw
lr           = 1e-2
weight_decay = 1e-2
schedule     = cosine
warmup       = 3
clip         = 0.5
seed         = 3
""" + COMMON)

XOR = write("xor.cfg", """
[task]
name          = temporal_xor
length        = 10
vocab         = 6
window        = 4
classes       = 2
train         = 64
valid         = 12
test          = 10

[model]
layers  = 1
width   = 6
hidden  = 8
encoder = embed
readout = last

[train]
steps        = 20
batch        = 4
optimizer    = adam
lr           = 5e-3
weight_decay = 1e-3
schedule     = constant
seed         = 2

[optim.recurrent]
lr_scale     = 0.5
weight_decay = 0
""" + COMMON)

ADDING = write("adding.cfg", """
[task]
name           = adding
length         = 8
noise_channels = 2

[model]
layers  = 2
width   = 3
hidden  = 6
encoder = linear
readout = last

[train]
steps     = 20
batch     = 4
optimizer = sgd
lr        = 5e-2
momentum  = 0.9
weight_decay = 1e-3
schedule  = linear
clip      = 0.3
seed      = 1
""" + COMMON)


def run(name, cell, cfg, device, *sets, resume_dir=None):
    d = resume_dir or os.path.join(tmp, "runs", f"{name}-{device}")
    args = ["train", cell, cfg, "--out", d, "--set", f"train.device={device}"]
    for s in sets:
        args += ["--set", s]
    if resume_dir:
        args.append("--resume")
    return cellc(*args), d


def close(a, b):
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-30)


def follows(ref, got):
    """None when every line of got matches ref's line for the same step and split, else the first
    difference."""
    want = {(m["step"], m["split"]): m for m in ref}
    if len(got) != len(ref):
        return f"{len(got)} metrics lines, the cpu run has {len(ref)}"
    for m in got:
        r = want.get((m["step"], m["split"]))
        if r is None:
            return f"no cpu line for step {m['step']} {m['split']}"
        for key in ("loss", "grad_norm", "accuracy"):
            a, b = r.get(key), m.get(key)
            if isinstance(a, float) and isinstance(b, float) and not close(a, b):
                return f"step {m['step']} {m['split']} {key}: cpu {a!r}, cuda-emu {b!r}"
    return None


def compare(name, cell, cfg, *sets):
    rc, dc = run(name, cell, cfg, "cpu", *sets)
    re_, de = run(name, cell, cfg, "cuda-emu", *sets)
    ok = rc.rc == 0 and re_.rc == 0
    check(f"{name}: cpu and cuda-emu train (exit 0)", ok, rc.why() + " | " + re_.why())
    if not ok:
        return
    mc, me = metrics(dc), metrics(de)
    diff = follows(mc, me)
    steps = sum(1 for m in mc if m["split"] == "train")
    check(f"{name}: {steps} steps of cuda-emu follow cpu within {RTOL} (loss, grad norm, valid, test)", diff is None and steps == 20,
          diff or "")
    check(f"{name}: the loss moved", mc[0]["loss"] != mc[-2]["loss"], str(mc[0]))
    check(f"{name}: the final lines agree", rc.last().split()[1] == re_.last().split()[1] and
          close(float(rc.last().split()[2][5:]), float(re_.last().split()[2][5:])), rc.last() + " | " + re_.last())


compare("copying mgu", "stdlib/mgu.cell", COPYING)
compare("copying mgu see_h (sequential)", "stdlib/mgu.cell", COPYING, "model.option.see_h=true")
compare("temporal_xor gru", "stdlib/gru.cell", XOR)
compare("temporal_xor gru, readout mean", "stdlib/gru.cell", XOR, "model.readout=mean")
compare("adding lru", "stdlib/lru.cell", ADDING)

LRU_RES = write("lru_residual.cfg", """
[task]
name   = mnist1d
length = 10
train  = 64
test   = 16

[model]
layers  = 2
width   = 6
hidden  = 6
encoder = linear
block   = residual
norm    = batch
mixer   = glu
readout = mean

[train]
steps        = 20
batch        = 4
optimizer    = adamw
lr           = 4e-3
weight_decay = 0.05
schedule     = cosine
warmup       = 0.1
seed         = 1

[optim.recurrent]
lr_scale     = 0.5
weight_decay = 0.0
""" + COMMON)

compare("mnist1d lru residual, batch norm, glu", "stdlib/lru.cell", LRU_RES)
compare("mnist1d gru residual, layer norm, mlp", "stdlib/gru.cell", LRU_RES, "model.norm=layer", "model.mixer=mlp",
        "train.optimizer=adam")
compare("copying mgu stacked, dropout 0.3 between layers", "stdlib/mgu.cell", COPYING, "model.dropout=0.3")
compare("mnist1d lru residual, batch norm, glu, dropout 0.2", "stdlib/lru.cell", LRU_RES, "model.dropout=0.2")
compare("copying learned_gate (gumbel noise, learned initial state)", "tests/cells/learned_gate.cell", COPYING)
compare("copying mgu residual, rms norm, no mixer", "stdlib/mgu.cell", COPYING, "model.block=residual", "model.norm=rms",
        "model.hidden=8")

# a text model as examples/small/lm_text.cfg builds it, smaller: next-byte cross-entropy over every
# step, hgru layers with depth-raised lower bounds, residual blocks, RMS norm, GLU, dropout
TEXT = write("text.cfg", """
[task]
name    = text
path    = docs/language.md
context = 24

[model]
layers  = 2
width   = 8
hidden  = 8
encoder = embed
block   = residual
norm    = rms
mixer   = glu
dropout = 0.1
readout = all
layer.0.option.lb = 0.0
layer.1.option.lb = 0.5

[train]
steps        = 20
batch        = 4
optimizer    = adamw
lr           = 2e-3
betas        = 0.9, 0.98
weight_decay = 0.01
schedule     = inverse_sqrt
warmup       = 0.1
seed         = 1
""" + COMMON)
compare("text hgru residual, rms norm, glu, dropout (the small text model)", "stdlib/hgru.cell", TEXT)

# ---- resume across devices: cpu (steps 1-10) -> cuda-emu (11-15) -> cpu (16-20) ----
XOR_CONST = ["train.optimizer=adamw", "eval.every=5"]
ref, dref = run("xor-straight", "stdlib/gru.cell", XOR, "cpu", *XOR_CONST)
d = os.path.join(tmp, "runs", "xor-resume")
r1 = cellc("train", "stdlib/gru.cell", XOR, "--out", d, *sum((["--set", s] for s in XOR_CONST + ["train.steps=10"]), []))
r2 = cellc("train", "stdlib/gru.cell", XOR, "--out", d, "--resume",
           *sum((["--set", s] for s in XOR_CONST + ["train.steps=15", "train.device=cuda-emu"]), []))
r3 = cellc("train", "stdlib/gru.cell", XOR, "--out", d, "--resume", *sum((["--set", s] for s in XOR_CONST), []))
ok = ref.rc == 0 and r1.rc == 0 and r2.rc == 0 and r3.rc == 0
check("resume cpu -> cuda-emu -> cpu: every leg exits 0", ok, " | ".join(x.why() for x in (ref, r1, r2, r3)))
if ok:
    # each leg ends with a test line: the chain's last one against the straight run's
    legs = [m for m in metrics(d) if m["split"] != "test" or m["step"] == 20]
    diff = follows(metrics(dref), legs)
    check("resume cpu -> cuda-emu -> cpu continues the cpu run's curve within 1e-4", diff is None, diff or "")
    check("resume: the cuda-emu leg said it resumed at step 10", "resuming at step 10" in r2.out, r2.out[-300:])
    ev_c = cellc("eval", "stdlib/gru.cell", XOR, "--checkpoint", os.path.join(d, "checkpoint.safetensors"))
    ev_e = cellc("eval", "stdlib/gru.cell", XOR, "--checkpoint", os.path.join(d, "checkpoint.safetensors"),
                 "--set", "train.device=cuda-emu")
    ok = ev_c.rc == 0 and ev_e.rc == 0
    check("eval on cuda-emu and on cpu (exit 0)", ok, ev_c.why() + " | " + ev_e.why())
    if ok:
        lc, le = (float(x.last().split()[2][5:]) for x in (ev_c, ev_e))
        check("eval on cuda-emu gives the cpu's test loss within 1e-4", close(lc, le), ev_c.last() + " | " + ev_e.last())

# ---- what the device cannot run: exit 3, saying why ----
r, _ = run("oom", "stdlib/mgu.cell", COPYING, "cuda-emu", "model.width=2048", "model.hidden=2048", "model.layers=600")
m = re.search(r"the model needs at least (\d+) bytes .* the device has (\d+) bytes", r.err)
check("a model larger than the device's free memory: exit 3 with the bytes it needs, before any step",
      r.rc == 3 and m is not None and int(m.group(1)) > int(m.group(2)) and "step" not in r.out, r.why())
r, _ = run("nogpu", "stdlib/mgu.cell", COPYING, "cuda")
check("train.device = cuda without a GPU: exit 3 naming the driver", r.rc == 3 and "libcuda" in r.err, r.why())

finish()
