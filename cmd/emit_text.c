/* emit_text.c: P.h (the C API of spec/emit.md for one cell, with the facts a user needs in its
 * comment) and P_torch.py (a torch.autograd.Function and nn.Module over libP.so via ctypes). */
#include "emit_text.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

const char *emit_field(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s", name);
  for (char *c = buf; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) *c = '_';
  return buf;
}

static void shape_text(FILE *f, int rank, const int *n, bool cplx, bool lead_b) {
  fprintf(f, "[");
  if (lead_b) fprintf(f, rank || cplx ? "B, " : "B");
  for (int i = 0; i < rank; i++) fprintf(f, i ? ", %d" : "%d", n[i]);
  if (cplx) fprintf(f, rank || lead_b ? ", 2" : "2");
  fprintf(f, "]");
}

static void facts_comment(FILE *f, const EmitInfo *e) {
  const Cell *c = e->c;
  const char *P = e->name;
  bool cpu = !strcmp(e->target, "cpu");
  fprintf(f, "/* %s.h: cell '%s', emitted by cellc %s (cellc emit --target %s --%s %s).\n", P, c->name, CELLC_VERSION, e->target,
          cpu ? "cpu" : "arch", cpu ? e->cpu : e->arch);
  fprintf(f, " *\n * dims:");
  for (int i = 0; i < c->ndims; i++) fprintf(f, " %s=%ld", c->dims[i].name, c->dims[i].value);
  fprintf(f, "\n * options:");
  if (!c->noptions) fprintf(f, " none");
  for (int i = 0; i < c->noptions; i++) {
    const OptionInfo *o = &c->options[i];
    if (o->type == OPT_BOOL) fprintf(f, " %s=%s", o->name, o->value ? "true" : "false");
    else fprintf(f, " %s=%.17g", o->name, o->value);
  }
  fprintf(f, "\n * mode: %s\n *\n", c->mode == MODE_SCAN ? "scan" : "sequential");
  fprintf(f, " * Tensors: row-major float32, the layouts of `cellc run`; a complex tensor has a trailing 2 (re, im).\n");
  fprintf(f, " *   x [T, B, %d]   y [T, B, %d]\n", c->input_size, c->output_size);
  for (int i = 0; i < c->nparams; i++) {
    char buf[128];
    fprintf(f, " *   param %s ", c->params[i].name);
    shape_text(f, c->params[i].rank, c->params[i].n, c->params[i].cplx, false);
    if (strcmp(c->params[i].name, emit_field(c->params[i].name, buf, sizeof buf))) fprintf(f, " (field %s)", buf);
    if (c->params[i].buffer || c->params[i].frozen)
      fprintf(f, " (%s: passed like a param; its grad member is written zeros, nothing is computed for it)",
              c->params[i].buffer ? "buffer, a constant" : "frozen");
    fprintf(f, "\n");
  }
  for (int i = 0; i < c->nstates; i++) {
    fprintf(f, " *   state %s ", c->states[i].name);
    shape_text(f, c->states[i].rank, c->states[i].n, c->states[i].cplx, true);
    if (c->states[i].param >= 0)
      fprintf(f, " (learned initial value: param %s; pass it as h0 for every row, add the sum of dh0 over B to its gradient)",
              c->params[c->states[i].param].name);
    if (c->states[i].hist_lag)
      fprintf(f, " (history of prev/conv: the last %d step%s of %s, oldest first, [B, %d, %d]; zeros before a sequence)",
              c->states[i].hist_lag, c->states[i].hist_lag == 1 ? "" : "s", c->states[i].hist_name, c->states[i].hist_lag,
              c->states[i].n[0] / c->states[i].hist_lag);
    fprintf(f, "\n");
  }
  fprintf(f, " *\n");
  if (cpu) {
    fprintf(f, " * Link: cc prog.c %s.o -lopenblas -lm     (or: cc prog.c -L. -l%s -lopenblas -lm, with lib%s.so)\n", P, P, P);
    /* the threads' buffers grow in steps with T * B (one thread per 65536 floats of the arrays), so the
     * linear fit at T, B = 64 .. 128 is no formula below those sizes: its constant may come out negative */
    fprintf(f, " * Workspace: %s_workspace_bytes(T, B) = about %.0f * T * B + %.0f * B + %.0f bytes (e.g. %.0f bytes at\n"
               " *   T = 100, B = 32): the arrays, the packed weights and the buffers of as many threads as it serves,\n"
               " *   one per 65536 floats of the arrays, at most 64 (fitted at T, B = 64 .. 128; the thread count grows\n"
               " *   in steps). Call it for the exact size.\n"
               " * Threads: %s_forward and %s_backward run on the calling thread; %s_forward_ex and %s_backward_ex\n"
               " *   with opt->threads = n run on n threads (0: one per core this process may use), at most as many\n"
               " *   as the workspace serves; the results are the same for every count.\n"
               " * Lengths: opt->lengths [B] in 1..T: row b's final state is its state after step lengths[b], y past\n"
               " *   it is zeros, dy past it is ignored and dx past it zeros. The batch runs in segments between\n"
               " *   its distinct lengths (buffers allocated per call); %s_backward_ex runs the forward again and\n"
               " *   takes the same opt as the %s_forward_ex before it. Not with train_noise (a nonzero status).\n",
            P, e->ws->per_tb, e->ws->per_b, e->ws->fixed > 0 ? e->ws->fixed : 0.0, e->ws->example, P, P, P, P, P, P);
  } else {
    fprintf(f, " * Build: nvcc -c %s.cu && cc prog.o %s.o -lcublas -lcudart; pointers are device memory.\n"
               " * Lengths: %s_forward_ex and %s_backward_ex with opt->lengths ([B] in 1..T, host memory): row b's\n"
               " *   final state is its state after step lengths[b], y past it is zeros, dy past it is ignored and\n"
               " *   dx past it zeros. The batch runs in segments between its distinct lengths (device buffers\n"
               " *   allocated per call); %s_backward_ex runs the forward again. opt->threads is ignored.\n",
            P, P, P, P, P);
  }
  fprintf(f, " * Semantics (spec/emit.md): h0 NULL or a NULL member: zeros; final NULL or a NULL member: not\n"
             " * written; dfinal NULL or a NULL member: zeros; dx, dh0 NULL or a NULL member: not computed. grad is\n"
             " * overwritten, for L = sum(y * dy) + sum(final * dfinal). P_backward takes the work of the\n"
             " * P_forward before it, with the same w, T, B, x, h0. Status 0 is success; any other has a message\n"
             " * from %s_strerror. No global state; calls on different data may run at once.%s */\n", P,
          cpu ? "" : " The code is single-threaded.");
}

static void member_struct(FILE *f, const char *P, const char *what, int n, const char *(*name)(const Cell *, int), const Cell *c) {
  fprintf(f, "typedef struct {");
  if (!n) fprintf(f, " float *unused_;");
  char buf[128];
  for (int i = 0; i < n; i++) fprintf(f, "%s*%s", i ? ", " : " float ", emit_field(name(c, i), buf, sizeof buf));
  fprintf(f, "; } %s_%s;\n", P, what);
}

static const char *param_name(const Cell *c, int i) { return c->params[i].name; }
static const char *state_name(const Cell *c, int i) { return c->states[i].name; }

char *emit_header_text(const EmitInfo *e) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  const Cell *c = e->c;
  const char *P = e->name;
  bool cuda = !strcmp(e->target, "cuda");
  facts_comment(f, e);
  fprintf(f, "#ifndef %s_H_\n#define %s_H_\n\n#include <stddef.h>\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n", P, P);
  fprintf(f, "#define %s_ABI 2\nenum {", P);
  for (int i = 0; i < c->ndims; i++) /* a dim named O or INPUT is P_O (the output size) or P_INPUT already */
    if (strcmp(c->dims[i].name, "O") && strcmp(c->dims[i].name, "INPUT")) fprintf(f, " %s_%s = %ld,", P, c->dims[i].name, c->dims[i].value);
  fprintf(f, " %s_INPUT = %d, %s_O = %d };\n", P, c->input_size, P, c->output_size);
  member_struct(f, P, "params", c->nparams, param_name, c);
  member_struct(f, P, "states", c->nstates, state_name, c);
  const char *stream = cuda ? ", void *stream" : "";
  const char *seed = e->train_noise ? ", unsigned long long seed" : "";
  fprintf(f, "\nsize_t %s_workspace_bytes(int T, int B);\n", P);
  if (e->train_noise)
    fprintf(f, "/* train_noise: gumbel_sigmoid draws its noise from seed (the same seed, the same noise); the\n"
               " * backward uses the noise of the forward before it. */\n");
  fprintf(f, "int %s_forward(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
             "    float *y, %s_states *final, void *work%s%s);\n", P, P, P, P, stream, seed);
  fprintf(f, "int %s_backward(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
             "    const float *dy, const %s_states *dfinal, void *work,\n"
             "    %s_params *grad, float *dx, %s_states *dh0%s);\n", P, P, P, P, P, P, stream);
  if (cuda) {
    fprintf(f, "/* ABI 2: opt NULL is the call without _ex; lengths in host memory, threads ignored. */\n"
               "typedef struct {\n  const int *lengths; /* [B] in 1..T, or NULL: every row has T steps */\n"
               "  int threads;         /* ignored by cuda */\n} %s_options;\n", P);
    fprintf(f, "int %s_forward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
               "    float *y, %s_states *final, void *work, const %s_options *opt, void *stream);\n", P, P, P, P, P);
    fprintf(f, "int %s_backward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
               "    const float *dy, const %s_states *dfinal, void *work, const %s_options *opt,\n"
               "    %s_params *grad, float *dx, %s_states *dh0, void *stream);\n", P, P, P, P, P, P, P);
  } else {
    fprintf(f, "/* ABI 2: opt NULL is the call without _ex. */\n"
               "typedef struct {\n  const int *lengths; /* [B] in 1..T, or NULL: every row has T steps */\n"
               "  int threads;         /* 0: one per core */\n} %s_options;\n", P);
    fprintf(f, "int %s_forward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
               "    float *y, %s_states *final, void *work, const %s_options *opt%s);\n", P, P, P, P, P, seed);
    fprintf(f, "int %s_backward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
               "    const float *dy, const %s_states *dfinal, void *work, const %s_options *opt,\n"
               "    %s_params *grad, float *dx, %s_states *dh0);\n", P, P, P, P, P, P, P);
  }
  fprintf(f, "const char *%s_strerror(int status);\n", P);
  if (cuda) fprintf(f, "void %s_release(void);\n", P);
  fprintf(f, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n");
  fclose(f);
  return text;
}

/* ---- P_torch.py ---- */

static void py_list(FILE *f, const char *var, int n, const Cell *c, bool params) {
  fprintf(f, "%s = [\n", var);
  for (int i = 0; i < n; i++) {
    const char *name = params ? c->params[i].name : c->states[i].name;
    int rank = params ? c->params[i].rank : c->states[i].rank;
    const int *dims = params ? c->params[i].n : c->states[i].n;
    bool cplx = params ? c->params[i].cplx : c->states[i].cplx;
    char buf[128];
    fprintf(f, "    (\"%s\", (", emit_field(name, buf, sizeof buf));
    for (int k = 0; k < rank; k++) fprintf(f, "%d, ", dims[k]);
    fprintf(f, "), %s),\n", cplx ? "True" : "False");
  }
  fprintf(f, "]\n");
}

static const char TORCH_BODY[] =
    "\n"
    "_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), \"lib\" + NAME + \".so\"))\n"
    "_FP = ctypes.POINTER(ctypes.c_float)\n"
    "\n"
    "\n"
    "class _Params(ctypes.Structure):\n"
    "    _fields_ = [(n, _FP) for n, _, _ in PARAMS] or [(\"unused_\", _FP)]\n"
    "\n"
    "\n"
    "class _States(ctypes.Structure):\n"
    "    _fields_ = [(n, _FP) for n, _, _ in STATES] or [(\"unused_\", _FP)]\n"
    "\n"
    "\n"
    "_ws = getattr(_lib, NAME + \"_workspace_bytes\")\n"
    "_ws.restype, _ws.argtypes = ctypes.c_size_t, [ctypes.c_int, ctypes.c_int]\n"
    "_fwd = getattr(_lib, NAME + \"_forward\")\n"
    "_fwd.restype = ctypes.c_int\n"
    "_fwd.argtypes = [ctypes.POINTER(_Params), ctypes.c_int, ctypes.c_int, _FP, ctypes.POINTER(_States), _FP,\n"
    "                 ctypes.POINTER(_States), ctypes.c_void_p] + ([ctypes.c_ulonglong] if TRAIN_NOISE else [])\n"
    "_bwd = getattr(_lib, NAME + \"_backward\")\n"
    "_bwd.restype = ctypes.c_int\n"
    "_bwd.argtypes = [ctypes.POINTER(_Params), ctypes.c_int, ctypes.c_int, _FP, ctypes.POINTER(_States), _FP,\n"
    "                 ctypes.POINTER(_States), ctypes.c_void_p, ctypes.POINTER(_Params), _FP, ctypes.POINTER(_States)]\n"
    "class _Options(ctypes.Structure):\n"
    "    _fields_ = [(\"lengths\", ctypes.POINTER(ctypes.c_int)), (\"threads\", ctypes.c_int)]\n"
    "\n"
    "\n"
    "_fwdx = getattr(_lib, NAME + \"_forward_ex\")\n"
    "_fwdx.restype = ctypes.c_int\n"
    "_fwdx.argtypes = _fwd.argtypes[:8] + [ctypes.POINTER(_Options)] + ([ctypes.c_ulonglong] if TRAIN_NOISE else [])\n"
    "_bwdx = getattr(_lib, NAME + \"_backward_ex\")\n"
    "_bwdx.restype = ctypes.c_int\n"
    "_bwdx.argtypes = _bwd.argtypes[:8] + [ctypes.POINTER(_Options)] + _bwd.argtypes[8:]\n"
    "_err = getattr(_lib, NAME + \"_strerror\")\n"
    "_err.restype, _err.argtypes = ctypes.c_char_p, [ctypes.c_int]\n"
    "\n"
    "\n"
    "def _f32(t):\n"
    "    return t.detach().to(device=\"cpu\", dtype=torch.float32).contiguous()\n"
    "\n"
    "\n"
    "def _p(t):\n"
    "    return ctypes.cast(t.data_ptr(), _FP) if t is not None else None\n"
    "\n"
    "\n"
    "# Workspaces are reused (a first touch of fresh memory costs more than the cell itself): a\n"
    "# forward takes one from the pool and stamps it; its backward gives it back. A backward whose\n"
    "# workspace was taken over since (retain_graph and another forward) runs its forward again first.\n"
    "_pool, _owner, _gen = {}, {}, [0]\n"
    "\n"
    "\n"
    "def _take(n):\n"
    "    free = _pool.get(n)\n"
    "    buf = free.pop() if free else torch.empty(n, dtype=torch.uint8)\n"
    "    _gen[0] += 1\n"
    "    _owner[buf.data_ptr()] = _gen[0]\n"
    "    return buf, _gen[0]\n"
    "\n"
    "\n"
    "def _give(buf):\n"
    "    free = _pool.setdefault(buf.numel(), [])\n"
    "    if len(free) < 4 and all(b.data_ptr() != buf.data_ptr() for b in free):\n"
    "        free.append(buf)\n"
    "\n"
    "\n"
    "def _opts(lens):\n"
    "    \"\"\"ABI 2's options for lengths (a list of B ints), one thread as the calls without them; and the array.\"\"\"\n"
    "    arr = (ctypes.c_int * len(lens))(*lens)\n"
    "    return _Options(ctypes.cast(arr, ctypes.POINTER(ctypes.c_int)), 1), arr\n"
    "\n"
    "\n"
    "def _forward_into(work, xf, h0s, params, seed, lens=None):\n"
    "    T, B = xf.shape[0], xf.shape[1]\n"
    "    y = torch.empty(T, B, OUTPUT, dtype=torch.float32)\n"
    "    finals = [torch.empty_like(h) for h in h0s]\n"
    "    w = _Params(*[_p(t) for t in params])\n"
    "    args = [ctypes.byref(w), T, B, _p(xf), ctypes.byref(_States(*[_p(h) for h in h0s])), _p(y),\n"
    "            ctypes.byref(_States(*[_p(h) for h in finals])), ctypes.c_void_p(work.data_ptr())]\n"
    "    if lens is None:\n"
    "        _check(_fwd(*args, *([seed] if TRAIN_NOISE else [])))\n"
    "    else:\n"
    "        o, keep = _opts(lens)\n"
    "        _check(_fwdx(*args, ctypes.byref(o), *([seed] if TRAIN_NOISE else [])))\n"
    "    return y, finals\n"
    "\n"
    "\n"
    "def _check(status):\n"
    "    if status != 0:\n"
    "        raise RuntimeError(NAME + \": \" + _err(status).decode())\n"
    "\n"
    "\n"
    "def _fw(ctx, x, rest, lens):\n"
    "    ns = len(STATES)\n"
    "    h0s, params = [_f32(t) for t in rest[:ns]], [_f32(t) for t in rest[ns:]]\n"
    "    xf = _f32(x)\n"
    "    T, B = xf.shape[0], xf.shape[1]\n"
    "    if xf.dim() != 3 or xf.shape[2] != INPUT:\n"
    "        raise ValueError(\"%s: x must be [T, B, %d], got %s\" % (NAME, INPUT, tuple(x.shape)))\n"
    "    work, ctx.gen = _take(max(_ws(T, B), 1))\n"
    "    ctx.seed = int(torch.randint(0, 2 ** 62, ())) if TRAIN_NOISE else 0  # noise from torch's generator\n"
    "    ctx.lens = lens\n"
    "    try:\n"
    "        y, finals = _forward_into(work, xf, h0s, params, ctx.seed, lens)\n"
    "    except Exception:\n"
    "        _give(work)\n"
    "        raise\n"
    "    ctx.save_for_backward(xf, work, *h0s, *params)\n"
    "    if not any(ctx.needs_input_grad):\n"
    "        _give(work)\n"
    "    ctx.dtypes = [x.dtype] + [t.dtype for t in rest]\n"
    "    return (y.to(x.dtype), *[f.to(x.dtype) for f in finals])\n"
    "\n"
    "\n"
    "def _bw(ctx, dy, dfinals, first):\n"
    "    \"\"\"The gradients of x, every h0 and every param; first: the index of x among the inputs.\"\"\"\n"
    "    xf, work, *rest = ctx.saved_tensors\n"
    "    ns = len(STATES)\n"
    "    h0s, params = rest[:ns], rest[ns:]\n"
    "    T, B = xf.shape[0], xf.shape[1]\n"
    "    if _owner.get(work.data_ptr()) != ctx.gen:  # taken over since: the forward again\n"
    "        work, ctx.gen = _take(work.numel())\n"
    "        _forward_into(work, xf, h0s, params, ctx.seed, ctx.lens)\n"
    "    dyf = _f32(dy) if dy is not None else torch.zeros(T, B, OUTPUT)\n"
    "    dfs = [_f32(d) if d is not None else None for d in dfinals]\n"
    "    grads = [torch.empty_like(p) for p in params]\n"
    "    dx = torch.empty_like(xf) if ctx.needs_input_grad[first] else None\n"
    "    dh0 = [torch.empty_like(h) if ctx.needs_input_grad[first + 1 + i] else None for i, h in enumerate(h0s)]\n"
    "    w = _Params(*[_p(t) for t in params])\n"
    "    args = [ctypes.byref(w), T, B, _p(xf), ctypes.byref(_States(*[_p(h) for h in h0s])), _p(dyf),\n"
    "            ctypes.byref(_States(*[_p(d) for d in dfs])), ctypes.c_void_p(work.data_ptr())]\n"
    "    outs = [ctypes.byref(_Params(*[_p(g) for g in grads])), _p(dx), ctypes.byref(_States(*[_p(d) for d in dh0]))]\n"
    "    if ctx.lens is None:\n"
    "        _check(_bwd(*args, *outs))\n"
    "    else:\n"
    "        o, keep = _opts(ctx.lens)\n"
    "        _check(_bwdx(*args, ctypes.byref(o), *outs))\n"
    "    _give(work)\n"
    "    out = [dx] + dh0 + grads\n"
    "    return tuple(g.to(dt) if g is not None else None for g, dt in zip(out, ctx.dtypes))\n"
    "\n"
    "\n"
    "class Function(torch.autograd.Function):\n"
    "    \"\"\"forward(x, *h0s, *params) -> (y, *finals); gradients to x, every h0 and every param.\"\"\"\n"
    "\n"
    "    @staticmethod\n"
    "    def forward(ctx, x, *rest):\n"
    "        return _fw(ctx, x, rest, None)\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, dy, *dfinals):\n"
    "        return _bw(ctx, dy, dfinals, 0)\n"
    "\n"
    "\n"
    "class FunctionLengths(torch.autograd.Function):\n"
    "    \"\"\"forward(lengths, x, *h0s, *params) -> (y, *finals): lengths B ints in 1..T (ABI 2): a sequence's\n"
    "    final state is its state after its last step, y past it zeros; x and dy past it never read.\"\"\"\n"
    "\n"
    "    @staticmethod\n"
    "    def forward(ctx, lengths, x, *rest):\n"
    "        return _fw(ctx, x, rest, [int(v) for v in lengths])\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, dy, *dfinals):\n"
    "        return (None,) + _bw(ctx, dy, dfinals, 1)\n"
    "\n"
    "class Module(torch.nn.Module):\n"
    "    \"\"\"The cell over a whole sequence: forward(x [T, B, INPUT], h0=None, lengths=None) -> (y [T, B, OUTPUT],\n"
    "    finals); lengths: each sequence's length (B ints in 1..T), or None: every one has T steps.\n"
    "\n"
    "    h0 and finals are dicts {state name: [B, ...] tensor} (a complex state with a trailing 2); a state\n"
    "    missing from h0 starts at zero. Params are nn.Parameters named as in the cell, float32, drawn\n"
    "    uniform in +-1/sqrt(fan_in) (load the values you want with load_state_dict); the cell's buffers\n"
    "    are module buffers, its frozen params nn.Parameters with requires_grad False.\"\"\"\n"
    "\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        for name, shape, cplx in PARAMS:\n"
    "            full = tuple(shape) + ((2,) if cplx else ())\n"
    "            fan_in = shape[-1] if shape else 1\n"
    "            bound = 1.0 / math.sqrt(fan_in)\n"
    "            t = torch.empty(full).uniform_(-bound, bound)\n"
    "            if name in BUFFERS:\n"
    "                self.register_buffer(name, t)\n"
    "            else:\n"
    "                self.register_parameter(name, torch.nn.Parameter(t, requires_grad=name not in FROZEN))\n"
    "\n"
    "    def forward(self, x, h0=None, lengths=None):\n"
    "        B = x.shape[1]\n"
    "        h0 = h0 or {}\n"
    "        h0s = []\n"
    "        for name, shape, cplx in STATES:\n"
    "            full = (B,) + tuple(shape) + ((2,) if cplx else ())\n"
    "            h0s.append(h0[name] if name in h0 else torch.zeros(full, dtype=x.dtype))\n"
    "        params = [getattr(self, n) for n, _, _ in PARAMS]\n"
    "        if lengths is None:\n"
    "            out = Function.apply(x, *h0s, *params)\n"
    "        else:  # each sequence's length (B ints in 1..T)\n"
    "            out = FunctionLengths.apply([int(v) for v in lengths], x, *h0s, *params)\n"
    "        return out[0], {name: f for (name, _, _), f in zip(STATES, out[1:])}\n";

char *emit_torch_text(const EmitInfo *e) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  const Cell *c = e->c;
  fprintf(f, "# %s_torch.py: cell '%s' (emitted by cellc %s) as a PyTorch module over lib%s.so, which must lie\n"
             "# next to this file. CPU tensors; computed in float32 (inputs are converted). See docs/emit.md.\n",
          e->name, c->name, CELLC_VERSION, e->name);
  fprintf(f, "import ctypes\nimport math\nimport os\n\nimport torch\n\n");
  fprintf(f, "NAME = \"%s\"\nINPUT = %d\nOUTPUT = %d\nTRAIN_NOISE = %s\n", e->name, c->input_size, c->output_size,
          e->train_noise ? "True" : "False");
  py_list(f, "PARAMS", c->nparams, c, true);
  py_list(f, "STATES", c->nstates, c, false);
  for (int pass = 0; pass < 2; pass++) { /* BUFFERS, FROZEN: the params that are not trained */
    fprintf(f, "%s = [", pass ? "FROZEN" : "BUFFERS");
    for (int i = 0, n = 0; i < c->nparams; i++)
      if (pass ? c->params[i].frozen : c->params[i].buffer) {
        char buf[128];
        fprintf(f, "%s\"%s\"", n++ ? ", " : "", emit_field(c->params[i].name, buf, sizeof buf));
      }
    fprintf(f, "]\n");
  }
  fputs(TORCH_BODY, f);
  fclose(f);
  return text;
}
