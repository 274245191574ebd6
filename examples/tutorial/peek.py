# peek.py FILE.safetensors: the metadata and tensors of a `cellc run` output, and the smallest
# value of the gate f (docs/tutorial.md, step 4). Standard library only.
import array, json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
print(header.pop("__metadata__"))
for name, t in sorted(header.items()):
    print(f"{name:16} {t['dtype']} {t['shape']}")
def tensor(name):
    a, b = header[name]["data_offsets"]
    x = array.array("f"); x.frombytes(data[8 + n + a:8 + n + b]); return x
print("smallest gate value:", min(tensor("gate.f")))
