"""PyTorch peer of `cellc train stdlib/CELL.cell bench/train_gru.cfg` (bench/train_throughput.sh).

The same model and task as train/model/model.h builds for that configuration:
  embedding [vocab, width] (N(0,1), nn.Embedding's default too) -> `layers` stacked cells
  (sequence-first [T, B, width]) -> readout all (every step) -> linear head [vocab, hidden] ->
  cross-entropy averaged over the counted steps (the copying task's last M marker steps; the head
  runs on all T*B rows in both, as cellc's readout `all` does), AdamW, global-norm clip, batch B.
The cells (--peer):
  nn    nn.GRU / nn.LSTM (--cell gru | lstm): PyTorch's fused layers.
  loop  the cell as a step function and a Python loop over x.unbind(0), the step functions of
        bench/torch_cells.py (make(CELL, H, D)): gru, lstm, mgu, mgu_see_h, mingru, lru, hgru.
Our stdlib GRU applies the reset gate before the recurrent product (n = tanh(Wxh x + Whh (r*h) + bh));
nn.GRU applies it after (n = tanh(W_in x + b_in + r * (W_hn h + b_hn))). The FLOP count is the same;
nn.GRU has two extra bias vectors (b_hr, b_hz, b_hn), which do not change the cost.

Data: copying batches generated on the fly with the same shape as runtime/tasks/copying.c
(tokens 1..N-2 on steps [0, M), blanks, the marker N-1 on the last M steps, targets there). Their
generation is timed separately and not counted in tokens_per_s (cellc's tokens_per_s counts its
task_batch, which is a few microseconds per batch at this size).

usage: torch_train.py [--cell gru] [--peer nn|loop] [--layers 1] [--width 128] [--T 512] [--B 64]
                      [--tokens 10] [--memorize 10] [--threads 1] [--warmup 3] [--steps 30]
                      [--flush-denormal] [--device cpu|cuda]
(--device cuda: the model and each batch on the GPU, as `cellc train --set train.device=cuda`; the
batch is generated on the CPU and copied up, inside the timed step as cellc's is.)
(--width is also the hidden size, as in bench/train_throughput.sh.)
Prints one JSON line {"kind": "torch_train", "tokens_per_s": ..., ...}: tokens (B*T per step) over
the summed time of the timed steps (forward, backward, clip, optimizer step)."""
import argparse
import json
import statistics
import time

import torch

from blas_core import openblas_core  # noqa: E402


class Model(torch.nn.Module):
    def __init__(self, vocab, width, layers, cell="gru"):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        if cell not in NN:
            raise SystemExit(f"torch_train.py: no nn peer for {cell} (nn: {', '.join(NN)}; use --peer loop)")
        self.rnn = NN[cell](width, width, num_layers=layers)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):            # tokens [T, B]
        a, _ = self.rnn(self.embed(tokens))  # [T, B, width], zero initial state
        return self.head(a)               # [T, B, vocab]


NN = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}


class LoopModel(torch.nn.Module):
    """The same model with each layer a step function of bench/torch_cells.py run in a Python loop
    over x.unbind(0) (its `unbind` style), zero initial states."""

    def __init__(self, vocab, width, layers, cell):
        super().__init__()
        import torch_cells
        self.embed = torch.nn.Embedding(vocab, width)
        self.cells = []
        for k in range(layers):
            p, step, init = torch_cells.make(cell, width, width)
            for name, v in p.items():  # the step functions read their dict: register those tensors
                p[name] = torch.nn.Parameter(v.detach())
                self.register_parameter(f"l{k}_{name}", p[name])
            self.cells.append((step, init))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):            # tokens [T, B]
        a = self.embed(tokens)
        for step, init in self.cells:
            s, ys = init(tokens.shape[1]), []
            for x in a.unbind(0):
                y, s = step(x, s)
                ys.append(y)
            a = torch.stack(ys)           # [T, B, width]
        return self.head(a)


def copying_batch(T, B, N, M, gen):
    """tokens [T, B] and targets [T, B] (-100: not counted), as runtime/tasks/copying.c lays them out."""
    content = torch.randint(1, N - 1, (M, B), generator=gen, device="cpu")
    tokens = torch.zeros(T, B, dtype=torch.long, device="cpu")
    tokens[:M] = content
    tokens[T - M:] = N - 1
    targets = torch.full((T, B), -100, dtype=torch.long, device="cpu")
    targets[T - M:] = content
    return tokens, targets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cell", default="gru")
    ap.add_argument("--peer", default="nn", choices=("nn", "loop"))
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--memorize", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight_decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True): denormal floats read and written as zero (FTZ/DAZ)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.flush_denormal and not torch.set_flush_denormal(True):
        raise SystemExit("torch_train.py: this CPU does not support flushing denormals")
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)
    dev = torch.device(a.device)
    if a.device != "cpu":  # the loop peers' parameters and initial states are made where they run
        if hasattr(torch, "set_default_device"):
            torch.set_default_device(a.device)
        else:
            torch.set_default_tensor_type("torch.cuda.FloatTensor")
    model = Model(a.tokens, a.width, a.layers, a.cell) if a.peer == "nn" else LoopModel(a.tokens, a.width, a.layers, a.cell)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    lossf = torch.nn.CrossEntropyLoss(ignore_index=-100)  # mean over the counted steps

    step_s, data_s, losses = [], [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        tokens, targets = copying_batch(a.T, a.B, a.tokens, a.memorize, gen)
        t1 = time.perf_counter()
        tokens, targets = tokens.to(dev), targets.to(dev)
        logits = model(tokens)
        loss = lossf(logits.reshape(-1, a.tokens), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        lv = loss.item()
        t2 = time.perf_counter()
        if i >= a.warmup:
            data_s.append(t1 - t0)
            step_s.append(t2 - t1)
            losses.append(lv)
    tokens = a.T * a.B
    print(json.dumps(dict(
        kind="torch_train", cell=a.cell, peer=f"nn.{NN[a.cell].__name__}" if a.peer == "nn" else "loop (unbind)",
        layers=a.layers, width=a.width, T=a.T, B=a.B,
        threads=torch.get_num_threads(), torch=torch.__version__, blas_core=openblas_core(), device=a.device, flush_denormal=a.flush_denormal, warmup=a.warmup, steps=a.steps,
        tokens_per_s=tokens * len(step_s) / sum(step_s),
        step_s_median=statistics.median(step_s), step_s_min=min(step_s), step_s_max=max(step_s),
        data_s_per_step=sum(data_s) / len(data_s),
        loss_first=losses[0], loss_last=losses[-1],
        params=sum(p.numel() for p in model.parameters()))))


if __name__ == "__main__":
    main()
