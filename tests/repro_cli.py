"""The model of the time-scale paper (seeds.md sections 1, 4): input -> cell -> z = W_o h, with
model.encoder = none (layer 0 reads the task's channels themselves) and model.head_bias = false;
their errors. One PASS/FAIL line per check; the last line is "N passed, M failed"."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import clitest  # noqa: E402
from clitest import check, finish  # noqa: E402

import sft  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 300
tmp = tempfile.mkdtemp(prefix="cellc-repro-")

ADDING = """
[task]
name = adding
length = 12
noise_channels = 3

[model]
layers = 1
width = 4
hidden = 8
readout = last

[train]
steps = 20
batch = 16
optimizer = sgd
lr = 0.1
seed = 2

[eval]
every = 20
batches = 2
"""


def cellc(*args):
    return clitest.run([CELLC] + list(args), TIMEOUT)


def load(path):
    with open(path, "rb") as f:
        return sft.parse(f.read())[0]


def check_model_keys():
    cfg = clitest.write_in(tmp, "adding.cfg", ADDING)
    run = os.path.join(tmp, "plain")
    r = cellc("train", "stdlib/leaky.cell", cfg, "--out", run, "--progress", "none",
              "--set", "model.encoder=none", "--set", "model.head_bias=false")
    # leaky: Wr [8, 8] and Wi [8, 4]; the head W_o [1, 8]; no encoder, no bias
    check("encoder none, head_bias false: the params are the cell's and W_o only (64 + 32 + 8)",
          r.rc == 0 and "104 params" in r.out, r.why())
    if r.rc:
        return
    init = os.path.join(tmp, "init")
    r0 = cellc("train", "stdlib/leaky.cell", cfg, "--out", init, "--progress", "none", "--set", "train.lr=1e-30",
               "--set", "model.encoder=none", "--set", "model.head_bias=false")
    t, t0 = load(os.path.join(run, "checkpoint.safetensors")), load(os.path.join(init, "checkpoint.safetensors"))
    eye = [[1.0 if i == j else 0.0 for j in range(4)] for i in range(4)]
    check("the encoder is the identity and the head's bias 0, after 20 SGD steps as at the start",
          r0.rc == 0 and t["encoder.weight"].tolist() == eye and not t["encoder.bias"].any() and
          not t["head.bias"].any(), str({k: v.shape for k, v in t.items()}))
    check("... while W_o and the cell's weights trained",
          r0.rc == 0 and (t["head.weight"] != t0["head.weight"]).any() and (t["layer.0.Wr"] != t0["layer.0.Wr"]).any())
    r = cellc("train", "stdlib/leaky.cell", cfg, "--out", os.path.join(tmp, "bad"), "--set", "model.encoder=none",
              "--set", "model.width=6")
    check("encoder none with width 6 on 4 channels: exit 1 naming model.encoder and the width to set",
          r.rc == 1 and "model.encoder" in r.err and "model.width = 4" in r.err, r.why())
    copy = clitest.write_in(tmp, "copy.cfg", "[task]\nname = copying\ntokens = 6\nmemorize = 2\nlength = 3\n"
                            "[model]\nlayers = 1\nwidth = 4\nhidden = 4\n[train]\nsteps = 2\nbatch = 3\n")
    r = cellc("train", "stdlib/gru.cell", copy, "--out", os.path.join(tmp, "bad2"), "--set", "model.encoder=none")
    check("encoder none on a token task: exit 1 at model.encoder", r.rc == 1 and "model.encoder" in r.err, r.why())
    r = cellc("diag", "stdlib/leaky.cell", cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--set", "model.encoder=none", "--set", "model.head_bias=false", "--out", os.path.join(tmp, "diag"))
    check("diag reads the checkpoint of such a model", r.rc == 0 and "slope" in r.out, r.why())


def main():
    check_model_keys()
    shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
