# bounds.py CHECKPOINT: the learned lower bounds lb = sigmoid(c) of each layer of a trained
# lbgate model (docs/tutorial.md, step 6). Standard library only.
import array, json, math, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
k = 0
while f"layer.{k}.c" in header:
    a, b = header[f"layer.{k}.c"]["data_offsets"]
    c = array.array("f"); c.frombytes(data[8 + n + a:8 + n + b])
    lb = sorted(1 / (1 + math.exp(-v)) for v in c)
    print(f"layer {k}: lb min {lb[0]:.3f}  median {lb[len(lb) // 2]:.3f}  max {lb[-1]:.3f}")
    k += 1
