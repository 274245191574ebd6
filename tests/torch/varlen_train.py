# Role: the PyTorch oracle for training on sequences of their own lengths, with bidirectional
# layers: `cellc train` on a `file` dataset with lengths follows, step by step, the same model
# built with nn.GRU / nn.LSTM over pack_padded_sequence.
#
# The data: a safetensors file per split written here (x F32 [N, T, D] with NaN in the padding
# after each length, which cellc must never read; y classes per sequence or per step; lengths
# 1..T). build/task_dump writes the train split in cellc's first-epoch order (the batches cellc
# trains on: rows [8 s, 8 s + 8) at step s). The initial weights: cellc's checkpoint after one
# step of lr 1e-30 (its initialization, the update far below float32's resolution). Then per
# configuration and device (cpu, cuda-emu): `cellc train` for 20 steps with a per-step log
# (metrics.jsonl), and PyTorch in float64 from those weights on those batches: a linear encoder,
# nn.GRU (the cell below, PyTorch's GRU: reset gate inside the recurrent product, two biases) or
# nn.LSTM (stdlib lstm: PyTorch's gate order i, f, g, o; bias_hh 0), packed by length, the
# readout (last: h_n, the forward direction's last step and the reverse one's step 0; mean over
# each sequence's steps; all: every real step; a join by sum: the two directions' outputs added),
# a linear head, cross-entropy (classes per sequence or per step) or mean squared error (float
# targets per sequence or per step) averaged over what counts, SGD with momentum. Check per run:
# cellc's loss at every step within 1e-4 relative of PyTorch's, and every cell param moved by
# more than 1e-4 (the later steps test the gradients). Ends with "N passed, M failed".
#
#   varlen_train.py [--cellc bin/cellc] [--dump build/task_dump] [--devices cpu,cuda-emu] [--keep DIR]
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sft  # noqa: E402

N, T, D, K, B, STEPS = 160, 9, 3, 3, 8, 20
WIDTH, H = 4, 5

TORCH_GRU = """# PyTorch's GRU (nn.GRU): the reset gate scales the recurrent product with its bias
cell gru_torch {
  input x[D]
  dim   H
  state h[H]
  param Wir[H, D] ~ standard
  param Wiz[H, D] ~ standard
  param Win[H, D] ~ standard
  param Whr[H, H] ~ standard tag recurrent
  param Whz[H, H] ~ standard tag recurrent
  param Whn[H, H] ~ standard tag recurrent
  param bir[H] ~ standard
  param biz[H] ~ standard
  param bxn[H] ~ standard
  param bhr[H] ~ standard
  param bhz[H] ~ standard
  param bhn[H] ~ standard
  gate r = sigmoid(Wir @ x + bir + Whr @ h + bhr)
  gate z = sigmoid(Wiz @ x + biz + Whz @ h + bhz)
  let  n = tanh(Win @ x + bxn + r * (Whn @ h + bhn))
  h = (1 - z) * n + z * h
}
"""

# (name, cell, layers, bidirectional, readout, join): per-sequence classes unless readout all; a
# join by sum (one layer: nn.GRU's layers join by concat) is PyTorch's two directions added
CONFIGS = [(f"{c}_l{n}{'_bi' if bi else ''}", c, n, bi, "last", "concat") for c in ("gru", "lstm") for n in (1, 2)
           for bi in (False, True)]
CONFIGS += [("gru_l2_bi_tags", "gru", 2, True, "all", "concat"), ("lstm_l1_bi_mean", "lstm", 1, True, "mean", "concat"),
            ("gru_l1_bi_sum", "gru", 1, True, "last", "sum"), ("lstm_l1_bi_sum_tags", "lstm", 1, True, "all", "sum"),
            ("gru_l2_bi_regress", "gru", 2, True, "last", "concat"), ("lstm_l1_bi_regress_steps", "lstm", 1, True, "all", "concat")]

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""))


def write_data(work, rng):
    """train/valid/test files of per-sequence and per-step classes."""
    for split, n in (("train", N), ("valid", 16), ("test", 16)):
        lengths = rng.integers(1, T + 1, size=n)
        lengths[0] = T
        x = rng.standard_normal((n, T, D)).astype(np.float32)
        x_clean = x.copy()
        y_step = (x[:, :, 0] > 0).astype(np.int64) + (x[:, :, 1] > 0.5)
        for i in range(n):
            x[i, lengths[i]:] = np.nan  # never read
            y_step[i, lengths[i]:] = 7  # nor these
        y_seq = (x_clean[np.arange(n), lengths - 1, 0] > 0).astype(np.int64) + (x_clean[:, 0, 1] > 0)
        # float targets: mean squared error; O = 2 per sequence, 1 per step ([N, T])
        y_reg = np.stack([x_clean[np.arange(n), lengths - 1, 0], x_clean[:, 0, 1]], 1).astype(np.float32)
        y_regstep = np.cumsum(np.nan_to_num(x)[:, :, 0], 1).astype(np.float32) / 3
        for kind, y in (("seq", y_seq.astype(np.int64)), ("step", y_step.astype(np.int64)), ("regseq", y_reg),
                        ("regstep", y_regstep)):
            sft.write(os.path.join(work, f"{kind}_{split}.safetensors"),
                      {"x": x, "y": y, "lengths": lengths.astype(np.int64)})


def cfg_text(work, kind, layers, bi, readout, steps, lr, device, join="concat"):
    return f"""[task]
name  = file
train = {work}/{kind}_train.safetensors
valid = {work}/{kind}_valid.safetensors
test  = {work}/{kind}_test.safetensors
[model]
layers = {layers}
width  = {WIDTH}
hidden = {H}
encoder = linear
readout = {readout}
bidirectional = {'true' if bi else 'false'}
join = {join}
[train]
steps = {steps}
batch = {B}
optimizer = sgd
lr = {lr}
momentum = 0.9
seed = 3
device = {device}
[eval]
every = {steps}
[log]
every = 1
"""


def run_cellc(a, cell, cfg_path, out):
    p = subprocess.run([a.cellc, "train", cell, cfg_path, "--out", out, "--progress", "none", "--force"], capture_output=True,
                       text=True, timeout=300)
    return p


def torch_losses(params, batches, cellname, layers, bi, readout, join, regress):
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    torch.set_default_dtype(torch.float64)
    ndir = 2 if bi else 1
    rnn_cls = nn.GRU if cellname == "gru" else nn.LSTM
    enc = nn.Linear(D, WIDTH)
    rnn = rnn_cls(WIDTH, H, num_layers=layers, bidirectional=bi, batch_first=True)
    head = nn.Linear((ndir if join == "concat" else 1) * H, (2 if readout == "last" else 1) if regress else K)

    def t(name):
        return torch.tensor(params[name].astype(np.float64))

    with torch.no_grad():
        enc.weight.copy_(t("encoder.weight"))
        enc.bias.copy_(t("encoder.bias"))
        head.weight.copy_(t("head.weight"))
        head.bias.copy_(t("head.bias"))
        for k in range(layers):
            for rev in (False, True)[:ndir]:
                pre, suf = f"layer.{k}.reverse." if rev else f"layer.{k}.", f"_l{k}" + ("_reverse" if rev else "")
                if cellname == "gru":
                    ih = [t(pre + n) for n in ("Wir", "Wiz", "Win")]
                    hh = [t(pre + n) for n in ("Whr", "Whz", "Whn")]
                    bih = [t(pre + n) for n in ("bir", "biz", "bxn")]
                    bhh = [t(pre + n) for n in ("bhr", "bhz", "bhn")]
                else:
                    ih = [t(pre + n) for n in ("Wxi", "Wxf", "Wxc", "Wxo")]
                    hh = [t(pre + n) for n in ("Whi", "Whf", "Whc", "Who")]
                    bih = [t(pre + n) for n in ("bi", "bf", "bc", "bo")]
                    bhh = [torch.zeros(H) for _ in range(4)]
                getattr(rnn, "weight_ih" + suf).copy_(torch.cat(ih))
                getattr(rnn, "weight_hh" + suf).copy_(torch.cat(hh))
                getattr(rnn, "bias_ih" + suf).copy_(torch.cat(bih))
                getattr(rnn, "bias_hh" + suf).copy_(torch.cat(bhh))
    # stdlib lstm has one bias per gate: PyTorch's second one stays 0
    ps = list(enc.parameters()) + [p for n, p in rnn.named_parameters() if cellname == "gru" or "bias_hh" not in n]
    ps += list(head.parameters())
    opt = torch.optim.SGD(ps, lr=LR, momentum=0.9)
    losses = []
    for x, y, lengths in batches:
        x = torch.tensor(np.nan_to_num(x).astype(np.float64))
        y = torch.tensor(y.astype(np.float64 if regress else np.int64))
        loss_of = nn.functional.mse_loss if regress else nn.functional.cross_entropy
        lengths = torch.tensor(lengths.astype(np.int64))
        a = enc(x)
        packed = pack_padded_sequence(a, lengths, batch_first=True, enforce_sorted=False)
        out, hn = rnn(packed)
        if cellname == "lstm":
            hn = hn[0]
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
        if join == "sum":
            out, hn = out[:, :, :H] + out[:, :, H:], torch.stack([hn[-2] + hn[-1]])
        if readout == "last":
            feat = torch.cat([hn[-2], hn[-1]], 1) if bi and join == "concat" else hn[-1]
            loss = loss_of(head(feat), y)
        elif readout == "mean":
            mask = (torch.arange(T)[None, :] < lengths[:, None]).to(out.dtype)
            feat = (out * mask[:, :, None]).sum(1) / lengths[:, None].to(out.dtype)
            loss = loss_of(head(feat), y)
        else:
            mask = torch.arange(T)[None, :] < lengths[:, None]
            pred = head(out)[mask]
            loss = loss_of(pred, y[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


LR = 0.3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cellc", default="bin/cellc")
    ap.add_argument("--dump", default="build/task_dump")
    ap.add_argument("--devices", default="cpu,cuda-emu")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="varlen_train.")
    os.makedirs(work, exist_ok=True)
    try:
        write_data(work, np.random.default_rng(7))
        with open(os.path.join(work, "gru_torch.cell"), "w") as f:
            f.write(TORCH_GRU)
        cells = {"gru": os.path.join(work, "gru_torch.cell"), "lstm": "stdlib/lstm.cell"}
        dumps = {}
        for kind in ("seq", "step", "regseq", "regstep"):
            cfg = os.path.join(work, f"dump_{kind}.cfg")
            with open(cfg, "w") as f:
                f.write(cfg_text(work, kind, 1, False, "all" if kind.endswith("step") else "last", STEPS, LR, "cpu"))
            path = os.path.join(work, f"dump_{kind}.safetensors")
            p = subprocess.run([a.dump, cfg, path], capture_output=True, text=True)
            check(f"task_dump {kind}", p.returncode == 0, p.stderr.strip())
            if p.returncode:
                return
            d = sft.load(path)
            check(f"task_dump {kind}: lengths and NaN-free padding", "lengths_train" in d and
                  not np.isnan(d["x_train"]).any(), str(sorted(d)))
            dumps[kind] = [(d["x_train"][s * B:(s + 1) * B], d["y_train"][s * B:(s + 1) * B],
                            d["lengths_train"][s * B:(s + 1) * B]) for s in range(STEPS)]
        for name, cellname, layers, bi, readout, join in CONFIGS:
            if a.only and name not in a.only.split(","):
                continue
            kind = ("reg" if "regress" in name else "") + ("step" if readout == "all" else "seq")
            ref = None
            for dev in a.devices.split(","):
                tag = f"{name} {dev}"
                d0 = os.path.join(work, f"{name}.{dev}.init")
                cfg0 = os.path.join(work, f"{name}.{dev}.init.cfg")
                with open(cfg0, "w") as f:
                    f.write(cfg_text(work, kind, layers, bi, readout, 1, "1e-30", dev, join))
                p = run_cellc(a, cells[cellname], cfg0, d0)
                if p.returncode:
                    check(f"{tag}: initial checkpoint", False, p.stderr.strip()[-2000:])
                    continue
                params = sft.load(os.path.join(d0, "checkpoint.safetensors"))
                want = {f"layer.{k}{'.reverse' if r else ''}." for k in range(layers) for r in ((False, True) if bi else (False,))}
                have = {n.rsplit(".", 1)[0] + "." for n in params if n.startswith("layer.")}
                check(f"{tag}: checkpoint names", want == have, f"{sorted(have)} != {sorted(want)}")
                d1 = os.path.join(work, f"{name}.{dev}")
                cfg1 = os.path.join(work, f"{name}.{dev}.cfg")
                with open(cfg1, "w") as f:
                    f.write(cfg_text(work, kind, layers, bi, readout, STEPS, LR, dev, join))
                p = run_cellc(a, cells[cellname], cfg1, d1)
                if p.returncode:
                    check(f"{tag}: cellc train", False, p.stderr.strip()[-2000:])
                    continue
                got = [json.loads(line) for line in open(os.path.join(d1, "metrics.jsonl")) if '"split":"train"' in line]
                got = [g["loss"] for g in got]
                if ref is None:
                    ref = torch_losses(params, dumps[kind], cellname, layers, bi, readout, join, kind.startswith("reg"))
                rel = max(abs(g - r) / abs(r) for g, r in zip(got, ref)) if len(got) == STEPS else float("inf")
                # the params moved well beyond the tolerance: the later steps' losses test the gradients
                last = sft.load(os.path.join(d1, "checkpoint.safetensors"))
                moved = min(np.abs(last[n] - params[n]).max() for n in params if n.startswith("layer."))
                check(f"{tag}: {STEPS} losses within 1e-4 of PyTorch's (max rel {rel:.2e}; every cell param moved "
                      f">= {moved:.2g})", rel < 1e-4 and moved > 1e-4,
                      f"cellc {['%.6f' % v for v in got]}\n    torch {['%.6f' % v for v in ref]}")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
