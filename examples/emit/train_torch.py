"""train_torch.py: an emitted cell (P_torch.py over libP.so) inside a small PyTorch model, trained
for a few steps with Adam on the toy task of train.c (predict the input two steps back).

  bin/cellc emit stdlib/gru.cell --dims D=4,H=16 --name gru --out build/example-emit-torch --torch
  python3 examples/emit/train_torch.py build/example-emit-torch

The model: Linear(1 -> 4) encoder, the emitted GRU over the whole sequence, Linear(16 -> 1) head.
Prints the loss every 20 steps; exits 0 when the loss fell below half of the first one."""
import importlib.util
import os
import sys

import torch

LAG, T, B, STEPS = 2, 24, 32, 150


def load(dirname, name="gru"):
    spec = importlib.util.spec_from_file_location(name + "_torch", os.path.join(dirname, name + "_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Model(torch.nn.Module):
    def __init__(self, cellmod):
        super().__init__()
        self.enc = torch.nn.Linear(1, cellmod.INPUT)
        self.cell = cellmod.Module()
        self.head = torch.nn.Linear(cellmod.OUTPUT, 1)

    def forward(self, x):
        y, _ = self.cell(self.enc(x))
        return self.head(y)


def main():
    torch.manual_seed(0)
    model = Model(load(sys.argv[1] if len(sys.argv) > 1 else "build/example-emit-torch"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for step in range(STEPS):
        x = torch.rand(T, B, 1) * 2 - 1
        pred = model(x)
        loss = ((pred[LAG:] - x[:-LAG]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
        if step % 20 == 0 or step == STEPS - 1:
            print("step %4d  loss %.5f" % (step, loss.item()))
    ok = loss.item() < first / 2
    print("final: first loss %.5f, last loss %.5f (%s)" % (first, loss.item(), "learned" if ok else "did not learn"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
