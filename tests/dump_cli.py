"""dump_cli.py: `cellc check --dump typed|lower|ad|plan` (docs/cli.md): each dump names what its
pass made (a GRU's plan its GEMM steps and phases, a scan cell's plan its scans, ad the backward
nodes), prints to stdout only, the same text twice, and misuse is exit 2 with a message."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run, stdlib_dims  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
DIMS = ["--dims", "H=4,D=3"]


def dump(cell, what, *extra):
    # H = 4, D = 3 in the form stdlib/cells.list gives the cell (mamba2: its heads)
    return run([CELLC, "check", f"stdlib/{cell}.cell", "--dims", stdlib_dims(f"stdlib/{cell}.cell", 4, 3), "--dump", what,
                *extra], 60)


def nodes(text):
    """The node lines: id -> (op, rest)."""
    out = {}
    for m in re.finditer(r"^  %(\d+) = (\S+)(.*)$", text, re.M):
        out[int(m.group(1))] = (m.group(2), m.group(3))
    return out


# typed: the checked cell's graph, leaves by their declared names, shapes symbolic
r = dump("gru", "typed")
check("typed gru: exit 0, nothing on stderr", r.rc == 0 and r.err == "", r.why())
check("typed gru: its header names the cell and its mode", r.out.startswith("typed gru: mode sequential"), r.why())
check("typed gru: params by name with symbolic shapes", re.search(r"= PARAM 'Whz' : \[H, H\]", r.out) is not None, r.why())
check("typed gru: the input by name", re.search(r"= INPUT 'x' : \[D\]", r.out) is not None, r.why())
check("typed gru: the state's update", re.search(r"^state h = %\d+ \(nonlinear\)$", r.out, re.M) is not None, r.why())
check("typed gru: its gates", re.search(r"^gate z = %\d+$", r.out, re.M) and re.search(r"^gate r = %\d+$", r.out, re.M), r.why())
r = dump("lru", "typed")
check("typed lru: complex values and a diagonal-linear state",
      " complex" in r.out and re.search(r"^state h = %\d+ \(diagonal-linear", r.out, re.M) is not None, r.why())

# lower: the real program, sizes bound, no backward yet
low = dump("gru", "lower")
check("lower gru: exit 0", low.rc == 0 and low.err == "", low.why())
check("lower gru: a sequential-form program", low.out.startswith("program gru: sequential form"), low.why())
check("lower gru: sizes bound", re.search(r"= PARAM #\d+ : \[4, 3\]", low.out) is not None, low.why())
check("lower gru: no backward", "backward" not in low.out and "DNEW" not in low.out and " grad " not in low.out, low.why())
check("lower gru: every param part listed", len(re.findall(r"^param ", low.out, re.M)) == 9, low.why())
r = dump("lru", "lower")
check("lower lru: scan form, complex state in parts with their coefficients",
      r.out.startswith("program lru: scan form") and re.search(r"^state h\.re prev %\d+ next %\d+ a %\d+ b %\d+$", r.out, re.M)
      and re.search(r"^state h\.im ", r.out, re.M), r.why())
r = run([CELLC, "check", "stdlib/lru.cell", *DIMS, "--mode", "sequential", "--dump", "lower"], 60)
check("lower lru --mode sequential: sequential form", r.rc == 0 and r.out.startswith("program lru: sequential form"), r.why())

# ad: the forward of lower, then the backward nodes
ad = dump("gru", "ad")
check("ad gru: exit 0", ad.rc == 0 and ad.err == "", ad.why())
fwd, bwd = ad.out.split("\nbackward:")[0], (ad.out.split("\nbackward:") + [""])[1]
check("ad gru: a backward section", bwd != "", ad.why())
bnodes = nodes(bwd)
ops = {op for op, _ in bnodes.values()}
check("ad gru: the backward's leaves (DY, DNEW) and transposed products", {"DY", "DNEW", "MATVEC_T"} <= ops, sorted(ops))
check("ad gru: the forward as lower printed it", nodes(fwd) == nodes(low.out), "forward differs from --dump lower")
grads = re.findall(r"^param \S+ %\d+ grad %(-?\d+)$", ad.out, re.M)
check("ad gru: every param part has its gradient node in the backward",
      len(grads) == 9 and all(int(g) in bnodes for g in grads), grads)
check("ad gru: the state's adjoints", re.search(r"^state h prev %\d+ next %\d+ dnew %\d+ dtotal %\d+ dprev %\d+$", ad.out, re.M)
      is not None, ad.why())

# plan: phases and steps
r = dump("gru", "plan")
check("plan gru: exit 0", r.rc == 0 and r.err == "", r.why())
check("plan gru: sequential mode", r.out.startswith("plan (sequential mode):"), r.why())
phases = re.findall(r"^(\w+):$", r.out, re.M)
check("plan gru: the forward and backward time-loop phases", "fwd_step" in phases and "bwd_step" in phases, phases)
check("plan gru: GEMM steps in the forward step", re.search(r"fwd_step:\n(  .*\n)*?  gemm %\d+", r.out) is not None, r.why())
check("plan gru: transposed GEMMs and weight-gradient products",
      re.search(r"^  gemm_t %\d+", r.out, re.M) and re.search(r"^  outer_acc %\d+", r.out, re.M), r.why())
check("plan gru: fused elementwise kernels", re.search(r"^  elem k\d+: %\d+", r.out, re.M) is not None, r.why())
check("plan gru: no scans", not re.search(r"^  r?scan ", r.out, re.M), r.why())
r2 = dump("gru", "plan")
check("plan gru: the same text twice", r2.out == r.out, r2.why())
r = dump("lru", "plan")
check("plan lru: scan mode with a forward scan and a reverse scan",
      r.out.startswith("plan (scan mode):") and re.search(r"^  scan %\d+ state 0$", r.out, re.M)
      and re.search(r"^  rscan %\d+ state 0$", r.out, re.M), r.why())
check("plan lru: no time-loop phase", "fwd_step:" not in r.out and "bwd_step:" not in r.out, r.why())

# every stdlib cell dumps every pass
names = sorted(f[:-5] for f in os.listdir("stdlib") if f.endswith(".cell"))
bad = [f"{n}/{w}" for n in names for w in ("typed", "lower", "ad", "plan") if dump(n, w).rc != 0]
check(f"every stdlib cell ({len(names)}) dumps every pass", not bad, bad)

# misuse
r = dump("gru", "lowered")
check("an unknown dump: exit 2 naming the dumps",
      r.rc == 2 and "--dump is one of typed, lower, ad, plan, not 'lowered'" in r.err and r.out == "", r.why())
r = run([CELLC, "check", "stdlib/gru.cell", "--dump"], 60)
check("--dump without a value: exit 2", r.rc == 2 and "--dump needs a value" in r.err, r.why())
r = dump("gru", "plan", "--json")
check("--dump with --json: exit 2", r.rc == 2 and "--json" in r.err and r.out == "", r.why())
r = run([CELLC, "check", "stdlib/gru.cell", "--dump", "plan"], 60)
check("--dump with a dim unbound: exit 1 naming it", r.rc == 1 and "unbound dim" in r.err and r.out == "", r.why())
r = run([CELLC, "check", "stdlib/gru.cell", *DIMS, "--cell", "grux", "--dump", "typed"], 60)
check("--dump of an unknown --cell: exit 1", r.rc == 1 and "no cell named 'grux'" in r.err, r.why())
finish()
