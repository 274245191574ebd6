/* cmd_export.c: `cellc export RUN_DIR --to torch|c [--out DIR]`: a trained run's whole model
 * (encoder, cell layers, norms, mixers, readout, head) as code that needs no part of cellc:
 *   torch: model.py (plain torch ops; each layer's step written out by export_gen.c) and
 *          weights.safetensors;
 *   c:     model.h, model.c (the step written out in C, model_step and model_forward), weights.bin
 *          and a Makefile.
 * The run is loaded as `cellc eval` loads it (its config.cfg, its checkpoint, the cell source the
 * checkpoint holds), so the export computes what eval computes (docs/cli.md, "cellc export"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "export_gen.h"
#include "safetensors.h"
#include "support.h"
#include "train.h"

/* One tensor of the export, in the order both files hold them. */
typedef struct XTensor {
  char *name;
  int ndim;
  int64_t shape[4];
  const float *data;
  int64_t numel;
} XTensor;

typedef struct XLayer {
  Program *p;
  StepGen *g;
  int in, out;
  int p0;          /* its first param part among the tensors */
  int h0;          /* its initial states, one tensor [state_size] */
  int norm, mix;   /* norm.weight's and the mixer's first tensor, or -1 */
  float *h0v;
} XLayer;

typedef struct Export {
  Run r;
  XTensor *t;
  int nt, cap;
  XLayer *L;
  int nl;
  bool tokens;
  int vocab, in_dim, out_dim, width, top;
  int residual, norm, mixer, mix_hidden, readout; /* readout: 0 all, 1 last, 2 mean */
  bool classify;
  int enc_w, enc_b, head_w, head_b;
} Export;

static int add_t(Export *x, const char *name, int ndim, const int64_t *shape, const float *data) {
  XTensor t = {0};
  t.name = xstrdup(name);
  t.ndim = ndim;
  t.numel = 1;
  for (int i = 0; i < ndim; i++) t.shape[i] = shape[i], t.numel *= shape[i];
  t.data = data;
  VEC_PUSH(x->t, x->nt, x->cap, t);
  return x->nt - 1;
}

static ModelTensor *find(Model *m, const char *name) {
  for (int i = 0; i < model_ntensors(m); i++)
    if (!strcmp(model_tensor(m, i)->name, name)) return model_tensor(m, i);
  return NULL;
}

static int add_model_t(Export *x, const char *name) {
  ModelTensor *t = find(x->r.model, name);
  if (!t) return -1;
  return add_t(x, name, t->ndim, t->shape, t->val[0]);
}

static int choose(const char *w, const char *const *names, int n) {
  for (int i = 0; w && i < n; i++)
    if (!strcmp(w, names[i])) return i;
  return 0;
}

/* The model's shape, its layers lowered and analysed, its tensors listed. 0 or the exit status. */
static int collect(Export *x) {
  Run *r = &x->r;
  Model *m = r->model;
  static const char *const norms[] = {"none", "layer", "rms", "batch"}, *const mixers[] = {"none", "glu", "mlp"};
  x->tokens = r->shape.token_input;
  x->vocab = r->shape.vocab, x->in_dim = r->shape.in_dim, x->out_dim = r->shape.out_dim;
  x->classify = r->shape.loss == TASK_LOSS_CE;
  x->width = (int)cfg_int(r->cfg, "model.width");
  x->residual = !strcmp(cfg_word(r->cfg, "model.block"), "residual");
  x->norm = choose(cfg_word(r->cfg, "model.norm"), norms, 4);
  x->mixer = choose(cfg_word(r->cfg, "model.mixer"), mixers, 3);
  x->mix_hidden = x->mixer == 2 ? 4 * x->width : x->width;
  const char *ro = cfg_word(r->cfg, "model.readout");
  x->readout = r->shape.readout == TASK_READ_ALL ? 0 : r->shape.readout == TASK_READ_LAST ? 1 : 2;
  if (ro && !strcmp(ro, "last")) x->readout = 1;
  if (ro && !strcmp(ro, "mean")) x->readout = 2;
  x->enc_b = -1;
  x->enc_w = add_model_t(x, x->tokens ? "embed.weight" : "encoder.weight");
  if (!x->tokens) x->enc_b = add_model_t(x, "encoder.bias");
  x->nl = model_nlayers(m);
  x->L = xcalloc((size_t)x->nl, sizeof(XLayer));
  for (int k = 0; k < x->nl; k++) {
    XLayer *L = &x->L[k];
    ModelLayerView v;
    model_layer_view(m, k, &v);
    L->in = v.in, L->out = v.out;
    L->p = lower_cell(v.cell, false, false);
    char err[512];
    L->g = stepgen_new(L->p, err, sizeof err);
    if (!L->g) {
      diag_plain("cannot export layer %d of cell '%s': %s", k, model_cell_name(m), err);
      return 1;
    }
    Program *p = L->p;
    L->p0 = x->nt;
    for (int i = 0; i < p->npparts; i++) {
      const ParamPart *pp = &p->pparts[i];
      ModelTensor *t = model_tensor(m, v.first + pp->param);
      char name[256];
      snprintf(name, sizeof name, "%s%s", t->name, t->cplx ? (pp->part ? ".im" : ".re") : "");
      int64_t shape[4];
      for (int d = 0; d < pp->rank; d++) shape[d] = pp->n[d];
      add_t(x, name, pp->rank, shape, t->val[pp->part]);
    }
    /* the initial states: drawn (or zeros) as the model holds them, a learned one from its param */
    L->h0v = xcalloc((size_t)L->g->state_size + 1, sizeof(float));
    for (int q = 0; q < p->nsparts; q++) {
      const StatePart *sp = &p->sparts[q];
      const StateInfo *si = &v.cell->states[sp->state];
      const float *src = si->param >= 0 ? model_tensor(m, v.first + si->param)->val[sp->part] : v.h0[q];
      memcpy(L->h0v + L->g->spart_off[q], src, sizeof(float) * (size_t)sp->size);
    }
    char name[64];
    snprintf(name, sizeof name, "layer.%d.h0", k);
    int64_t hs[1] = {L->g->state_size};
    L->h0 = add_t(x, name, 1, hs, L->h0v);
    L->norm = L->mix = -1;
    if (x->residual && x->norm) {
      static const char *const parts[] = {"weight", "bias", "running_mean", "running_var"};
      for (int i = 0; i < (x->norm == 3 ? 4 : 2); i++) {
        snprintf(name, sizeof name, "layer.%d.norm.%s", k, parts[i]);
        int t = add_model_t(x, name);
        if (i == 0) L->norm = t;
      }
    }
    if (x->residual && x->mixer) {
      static const char *const glu[] = {"w1", "b1", "w2", "b2", "w3", "b3"};
      for (int i = 0; i < (x->mixer == 1 ? 6 : 4); i++) {
        snprintf(name, sizeof name, "layer.%d.mixer.%s", k, glu[i]);
        int t = add_model_t(x, name);
        if (i == 0) L->mix = t;
      }
    }
  }
  x->top = x->residual ? x->width : x->L[x->nl - 1].out;
  x->head_w = add_model_t(x, "head.weight");
  x->head_b = add_model_t(x, "head.bias");
  return 0;
}

/* ---- --to torch ---- */

static void list_ints(FILE *f, const int *v, int n) {
  for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", v[i]);
}

const char export_py_helpers[] =
    "def _softplus(a):\n"
    "    return torch.where(a > 0, a + torch.log1p(torch.exp(-a.abs())), torch.log1p(torch.exp(-a.abs())))\n\n\n"
    "def _rows(v, n):\n"
    "    return v if v.dim() == 2 else v.expand(n, v.shape[-1])\n\n\n"
    "def _cat(a, b):\n"
    "    if a.dim() != b.dim():\n"
    "        a, b = (a.expand(b.shape[0], -1), b) if a.dim() < b.dim() else (a, b.expand(a.shape[0], -1))\n"
    "    return torch.cat([a, b], -1)\n\n\n"
    "def _mv(m, v, o, i):\n"
    "    \"\"\"m [.., o * i] @ v [.., i] -> [.., o]\"\"\"\n"
    "    if m.dim() == 1:\n"
    "        return v @ m.view(o, i).t()\n"
    "    return (m.view(-1, o, i) @ v.reshape(-1, i, 1).expand(m.shape[0], i, 1) if v.dim() == 2 else m.view(-1, o, i) @ v.view(i, 1)).view(-1, o)\n\n\n"
    "def _mvt(m, v, o, i):\n"
    "    \"\"\"m [.., o * i]^T @ v [.., o] -> [.., i]\"\"\"\n"
    "    if m.dim() == 1:\n"
    "        return v @ m.view(o, i)\n"
    "    return (m.view(-1, o, i).transpose(1, 2) @ v.reshape(-1, o, 1)).view(-1, i)\n\n\n"
    "def _bmm(a, b, nb, m, k, n):\n"
    "    lead = a.shape[:-1] if a.dim() == 2 else b.shape[:-1]\n"
    "    y = a.reshape(*a.shape[:-1], nb, m, k) @ b.reshape(*b.shape[:-1], nb, k, n)\n"
    "    return y.reshape(*lead, nb * m * n)\n\n\n"
    "_VIDX = {}\n\n\n"
    "def _vidx(idx, n0, n1, n2, s0, s1, s2):\n"
    "    key = (idx, n0, n1, n2, s0, s1, s2)\n"
    "    if key not in _VIDX:\n"
    "        _VIDX[key] = torch.tensor([idx + c0 * s0 + c1 * s1 + c2 * s2 for c0 in range(n0) for c1 in range(n1)\n"
    "                                   for c2 in range(n2)], dtype=torch.long)\n"
    "    return _VIDX[key]\n\n\n"
    "def load_safetensors(path):\n"
    "    \"\"\"The F32 tensors of a safetensors file, by name.\"\"\"\n"
    "    with open(path, 'rb') as f:\n"
    "        data = f.read()\n"
    "    n = struct.unpack('<Q', data[:8])[0]\n"
    "    head = json.loads(data[8:8 + n])\n"
    "    out = {}\n"
    "    for name, t in head.items():\n"
    "        if name == '__metadata__':\n"
    "            continue\n"
    "        a, b = t['data_offsets']\n"
    "        buf = bytearray(data[8 + n + a:8 + n + b])\n"
    "        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(t['shape']) if b > a else torch.zeros(t['shape'])\n"
    "    return out\n\n\n";

static const char py_model[] =
    "def _norm(x, w, b, kind, rm=None, rv=None):\n"
    "    if kind == 'layer':\n"
    "        mu = x.mean(-1, keepdim=True)\n"
    "        n = (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5)\n"
    "    elif kind == 'rms':\n"
    "        n = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5)\n"
    "    else:\n"
    "        n = (x - rm) / torch.sqrt(rv + 1e-5)\n"
    "    return n * w + b\n\n\n"
    "class Model(nn.Module):\n"
    "    \"\"\"The trained model. forward(x): x [T, B] token ids (int64) or [T, B, IN_DIM] floats; returns the\n"
    "    head's outputs, [T, B, OUT_DIM] for readout 'all', else [B, OUT_DIM] (logits for a\n"
    "    classification task, predictions for a regression task). Evaluation only: no dropout.\"\"\"\n\n"
    "    def __init__(self, weights=None):\n"
    "        super().__init__()\n"
    "        w = load_safetensors(weights or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'weights.safetensors'))\n"
    "        self.index = {n: i for i, n in enumerate(NAMES)}\n"
    "        self.w = nn.ParameterList([nn.Parameter(w[n].clone(), requires_grad=False) for n in NAMES])\n\n"
    "    def t(self, name):\n"
    "        return self.w[self.index[name]]\n\n"
    "    def forward(self, x):\n"
    "        dt = self.w[0].dtype\n"
    "        if TOKENS:\n"
    "            T, B = x.shape\n"
    "            a = self.t('embed.weight')[x]\n"
    "        else:\n"
    "            T, B = x.shape[0], x.shape[1]\n"
    "            a = x.to(dt) @ self.t('encoder.weight').t() + self.t('encoder.bias')\n"
    "        for k, (fs, fi, fx, np_, out) in enumerate(LAYERS):\n"
    "            P = [self.t(n).reshape(-1) for n in LAYER_PARAMS[k]]\n"
    "            inp = a\n"
    "            if RESIDUAL and NORM != 'none':\n"
    "                pre = 'layer.%d.norm.' % k\n"
    "                inp = _norm(a, self.t(pre + 'weight'), self.t(pre + 'bias'), NORM,\n"
    "                            *( [self.t(pre + 'running_mean'), self.t(pre + 'running_var')] if NORM == 'batch' else []))\n"
    "            S = fs(P, dt)\n"
    "            Fr = fi(P, S, inp.reshape(T * B, -1))\n"
    "            h0 = self.t('layer.%d.h0' % k)\n"
    "            h = [h0[o:o + n].expand(B, n) for o, n in STATE_PARTS[k]]\n"
    "            ys = []\n"
    "            for s in range(T):\n"
    "                y, h = fx(P, S, {i: v[s * B:(s + 1) * B] for i, v in Fr.items()}, [_rows(v, B) for v in h])\n"
    "                ys.append(_rows(y, B))\n"
    "            y = torch.stack(ys)\n"
    "            if RESIDUAL:\n"
    "                pre = 'layer.%d.mixer.' % k\n"
    "                if MIXER == 'glu':\n"
    "                    g = (y @ self.t(pre + 'w1').t() + self.t(pre + 'b1')) * torch.sigmoid(y @ self.t(pre + 'w2').t() + self.t(pre + 'b2'))\n"
    "                    y = g @ self.t(pre + 'w3').t() + self.t(pre + 'b3')\n"
    "                elif MIXER == 'mlp':\n"
    "                    y = F.gelu(y @ self.t(pre + 'w1').t() + self.t(pre + 'b1')) @ self.t(pre + 'w2').t() + self.t(pre + 'b2')\n"
    "                a = a + y\n"
    "            else:\n"
    "                a = y\n"
    "        if READOUT == 'last':\n"
    "            a = a[-1]\n"
    "        elif READOUT == 'mean':\n"
    "            a = a.mean(0)\n"
    "        return a @ self.t('head.weight').t() + self.t('head.bias')\n";

static int write_torch(Export *x, const char *dir) {
  static const char *const norms[] = {"none", "layer", "rms", "batch"}, *const mixers[] = {"none", "glu", "mlp"};
  static const char *const readouts[] = {"all", "last", "mean"};
  char path[4096], err[1024];
  /* the weights: every tensor, and an empty marker '@k' before layer k's param parts */
  SftWriter *w = sft_writer_new();
  sft_set_meta(w, "format", "cellc-export-torch-1");
  for (int i = 0; i < x->nt; i++) sft_add(w, x->t[i].name, SFT_F32, x->t[i].ndim, x->t[i].shape, x->t[i].data);
  snprintf(path, sizeof path, "%s/weights.safetensors", dir);
  int rc = sft_write(w, path, err, sizeof err);
  sft_writer_free(w);
  if (rc < 0) return diag_plain("%s", err), 3;
  snprintf(path, sizeof path, "%s/model.py", dir);
  FILE *f = fopen(path, "w");
  if (!f) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  fprintf(f, "\"\"\"model.py: the model of a cellc run (cell '%s'), written by `cellc export --to torch`.\n\n"
             "Plain torch: each layer's step is the cell's lowered step written out as torch ops; the weights are\n"
             "weights.safetensors beside this file. Reproduces `cellc eval` on the run's checkpoint.\n\n"
             "    import model\n    m = model.Model()           # the weights from weights.safetensors\n"
             "    out = m(x)                  # x [T, B] token ids, or [T, B, IN_DIM] floats\n\"\"\"\n",
          model_cell_name(x->r.model));
  fprintf(f, "import json\nimport os\nimport struct\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n");
  fprintf(f, "TOKENS = %s\nVOCAB = %d\nIN_DIM = %d\nOUT_DIM = %d\nRESIDUAL = %s\nNORM = '%s'\nMIXER = '%s'\nREADOUT = '%s'\n"
             "CLASSIFY = %s\n\n",
          x->tokens ? "True" : "False", x->vocab, x->in_dim, x->out_dim, x->residual ? "True" : "False", norms[x->norm],
          mixers[x->mixer], readouts[x->readout], x->classify ? "True" : "False");
  fputs(export_py_helpers, f);
  for (int k = 0; k < x->nl; k++) {
    char pfx[32];
    snprintf(pfx, sizeof pfx, "layer%d", k);
    stepgen_py(x->L[k].g, f, pfx);
  }
  fprintf(f, "NAMES = [");
  for (int i = 0; i < x->nt; i++) fprintf(f, "'%s'%s", x->t[i].name, i + 1 < x->nt ? ", " : "");
  fprintf(f, "]\nLAYER_PARAMS = [");
  for (int k = 0; k < x->nl; k++) {
    fputc('[', f);
    for (int i = 0; i < x->L[k].p->npparts; i++) fprintf(f, "%s'%s'", i ? ", " : "", x->t[x->L[k].p0 + i].name);
    fprintf(f, "]%s", k + 1 < x->nl ? ", " : "");
  }
  fprintf(f, "]\nLAYERS = [");
  for (int k = 0; k < x->nl; k++)
    fprintf(f, "(layer%d_static, layer%d_input, layer%d_state, %d, %d)%s", k, k, k, x->L[k].p->npparts, x->L[k].out,
            k + 1 < x->nl ? ", " : "");
  fprintf(f, "]\nSTATE_PARTS = [");
  for (int k = 0; k < x->nl; k++) {
    const Program *p = x->L[k].p;
    fputc('[', f);
    for (int q = 0; q < p->nsparts; q++) fprintf(f, "(%d, %d)%s", x->L[k].g->spart_off[q], p->sparts[q].size, q + 1 < p->nsparts ? ", " : "");
    fprintf(f, "]%s", k + 1 < x->nl ? ", " : "");
  }
  fprintf(f, "]\n\n\n");
  fputs(py_model, f);
  if (fclose(f)) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  return 0;
}

/* ---- --to c ---- */

#include "export_c_runtime.h" /* c_runtime[]: model.c's fixed part, over the tables written before it */

static int write_c(Export *x, const char *dir) {
  char path[4096];
  /* weights.bin: "CELLCXW1", the float count (int64), the floats of every tensor in order */
  snprintf(path, sizeof path, "%s/weights.bin", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  int64_t total = 0;
  for (int i = 0; i < x->nt; i++) total += x->t[i].numel;
  fwrite("CELLCXW1", 1, 8, f);
  fwrite(&total, sizeof total, 1, f);
  for (int i = 0; i < x->nt; i++) fwrite(x->t[i].data, sizeof(float), (size_t)x->t[i].numel, f);
  if (fclose(f)) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;

  snprintf(path, sizeof path, "%s/model.h", dir);
  f = fopen(path, "w");
  if (!f) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  int state = 0;
  for (int k = 0; k < x->nl; k++) state += x->L[k].g->state_size;
  if (x->readout == 2) state += x->top + 1;
  fprintf(f, "/* model.h: the model of a cellc run (cell '%s'), written by `cellc export --to c`.\n"
             " *\n * Build: cc -O3 -march=native -c model.c (or make); link with -lm.\n"
             " *\n *   Model *m = model_load(\"weights.bin\");\n"
             " *   float *state = malloc(sizeof(float) * MODEL_STATE);   one per stream\n"
             " *   model_state_init(m, state);\n"
             " *   model_step(m, state, &token, out);                   out [MODEL_OUT_DIM]\n"
             " *\n * MODEL_TOKENS: the input of a step is one int32_t token id in [0, MODEL_VOCAB); else\n"
             " * MODEL_IN_DIM floats. model_step's output is the head applied to this step's readout (readout all\n"
             " * or last: the top layer's output at this step; mean: the mean of its outputs so far): the logits\n"
             " * of a classification task, the prediction of a regression one. One Model serves one thread at a\n"
             " * time (its scratch buffers are its own); states are the caller's. */\n"
             "#ifndef MODEL_H\n#define MODEL_H\n\n#include <stdint.h>\n\n"
             "enum { MODEL_TOKENS = %d, MODEL_VOCAB = %d, MODEL_IN_DIM = %d, MODEL_OUT_DIM = %d, MODEL_STATE = %d,\n"
             "       MODEL_READOUT = %d /* 0 all, 1 last, 2 mean */, MODEL_CLASSIFY = %d };\n\n"
             "typedef struct Model Model;\n\n"
             "/* The weights of weights.bin: NULL (a message on stderr) when the file is missing or not this model's. */\n"
             "Model *model_load(const char *path);\nvoid model_free(Model *m);\n"
             "/* The initial state of a sequence: MODEL_STATE floats. */\n"
             "void model_state_init(const Model *m, float *state);\n"
             "/* One step: reads input (one token, or MODEL_IN_DIM floats), updates state, writes the head's\n"
             " * MODEL_OUT_DIM outputs. 0, or 1 for a token out of range (nothing changed). */\n"
             "int model_step(Model *m, float *state, const void *input, float *out);\n"
             "/* B whole sequences of T steps: inputs [T, B] tokens or [T, B, MODEL_IN_DIM] floats (time-major, as\n"
             " * cellc trains); outputs [T, B, MODEL_OUT_DIM] for readout all, else [B, MODEL_OUT_DIM] (the last\n"
             " * step's). Each sequence starts from model_state_init's state. 0, 1 for a token out of range. */\n"
             "int model_forward(Model *m, int T, int B, const void *inputs, float *outputs);\n\n#endif\n",
          model_cell_name(x->r.model), x->tokens, x->vocab, x->in_dim, x->out_dim, state, x->readout, x->classify);
  if (fclose(f)) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;

  snprintf(path, sizeof path, "%s/model.c", dir);
  f = fopen(path, "w");
  if (!f) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  fprintf(f, "/* model.c: the model of a cellc run (cell '%s'), written by `cellc export --to c`: each layer's\n"
             " * step is the cell's lowered step written out (static part once at load, input part per token, or\n"
             " * a table over the vocabulary for layer 0 of a token model, state part per step). */\n"
             "#include \"model.h\"\n\n#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n",
          model_cell_name(x->r.model));
  int maxc = x->width, maxp = 1, maxw = 1, maxf = 1;
  for (int k = 0; k < x->nl; k++) {
    if (x->L[k].out > maxc) maxc = x->L[k].out;
    if (x->L[k].p->npparts > maxp) maxp = x->L[k].p->npparts;
    if (x->L[k].g->scratch_size > maxw) maxw = x->L[k].g->scratch_size;
    if (x->L[k].g->front_size > maxf) maxf = x->L[k].g->front_size;
  }
  if (x->mix_hidden > maxc) maxc = x->mix_hidden;
  fprintf(f, "#define NL %d\n#define TOKENS %d\n#define VOCAB %d\n#define IN_DIM %d\n#define WIDTH %d\n#define OUT_DIM %d\n"
             "#define RESIDUAL %d\n#define NORM %d\n#define MIXER %d\n#define MIXH %d\n#define READOUT %d\n#define TOP %d\n"
             "#define MAXC %d\n#define MAXP %d\n#define MAXW %d\n#define MAXF %d\n#define NT %d\n#define BLOB_FLOATS %lldLL\n\n",
          x->nl, x->tokens, x->vocab, x->in_dim, x->width, x->out_dim, x->residual, x->norm, x->mixer, x->mix_hidden,
          x->readout, x->top, maxc, maxp, maxw, maxf, x->nt, (long long)total);
  fprintf(f, "static const long long t_off[NT] = {");
  int64_t off = 0;
  for (int i = 0; i < x->nt; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)off), off += x->t[i].numel;
  fprintf(f, "};\nenum { T_ENC_W = %d, T_ENC_B = %d, T_HEAD_W = %d, T_HEAD_B = %d };\n", x->enc_w, x->enc_b, x->head_w, x->head_b);
  int v[7][1024];
  for (int k = 0; k < x->nl && k < 1024; k++) {
    const XLayer *L = &x->L[k];
    v[0][k] = L->in, v[1][k] = L->out, v[2][k] = L->g->state_size, v[3][k] = L->g->static_size;
    v[4][k] = L->g->front_size, v[5][k] = L->p->npparts, v[6][k] = L->p0;
  }
  static const char *const vn[7] = {"l_in", "l_out", "l_state", "l_static", "l_front", "l_np", "l_p0"};
  for (int i = 1; i < 7; i++) fprintf(f, "static const int %s[NL] = {", vn[i]), list_ints(f, v[i], x->nl), fprintf(f, "};\n");
  for (int k = 0; k < x->nl; k++) v[0][k] = x->L[k].h0, v[1][k] = x->L[k].norm, v[2][k] = x->L[k].mix;
  static const char *const vn2[3] = {"l_h0", "l_norm", "l_mix"};
  for (int i = 0; i < 3; i++) fprintf(f, "static const int %s[NL] = {", vn2[i]), list_ints(f, v[i], x->nl), fprintf(f, "};\n");
  fputc('\n', f);
  stepgen_c_helpers(f);
  for (int k = 0; k < x->nl; k++) {
    char pfx[32];
    snprintf(pfx, sizeof pfx, "layer%d", k);
    stepgen_c(x->L[k].g, f, pfx);
  }
  fprintf(f, "typedef void (*StaticFn)(const float *const *, float *);\n"
             "typedef void (*InputFn)(const float *const *, const float *, const float *, float *, float *);\n"
             "typedef void (*StateFn)(const float *const *, const float *, const float *, float *, float *, float *);\n");
  fprintf(f, "static const StaticFn l_static_fn[NL] = {");
  for (int k = 0; k < x->nl; k++) fprintf(f, "%slayer%d_static", k ? ", " : "", k);
  fprintf(f, "};\nstatic const InputFn l_input_fn[NL] = {");
  for (int k = 0; k < x->nl; k++) fprintf(f, "%slayer%d_input", k ? ", " : "", k);
  fprintf(f, "};\nstatic const StateFn l_state_fn[NL] = {");
  for (int k = 0; k < x->nl; k++) fprintf(f, "%slayer%d_state", k ? ", " : "", k);
  fprintf(f, "};\n\n");
  fputs(c_runtime, f);
  if (fclose(f)) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;

  snprintf(path, sizeof path, "%s/Makefile", dir);
  f = fopen(path, "w");
  if (!f) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  fprintf(f, "# The exported model as a static library: make (CFLAGS=-O3 -march=x86-64-v3 for a portable build).\n"
             "CC ?= cc\nCFLAGS ?= -O3 -march=native\n\nlibmodel.a: model.o\n\tar rcs $@ model.o\n\n"
             "model.o: model.c model.h\n\t$(CC) $(CFLAGS) -c model.c -o $@\n\nclean:\n\trm -f model.o libmodel.a\n");
  if (fclose(f)) return diag_plain("%s: cannot write: %s", path, strerror(errno)), 3;
  return 0;
}

/* ---- the command ---- */

static const char *const synopses[] = {"export", NULL};

int cmd_export(int argc, char **argv) {
  const char *dir = NULL, *to = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--to") || !strcmp(s, "--out")) {
      if (i + 1 >= argc || !argv[i + 1][0]) return cli_command_usage("export", synopses, "%s needs a value", s);
      if (!strcmp(s, "--to")) to = argv[++i];
      else out = argv[++i];
    } else if (s[0] == '-' && s[1]) {
      return cli_command_usage("export", synopses, "unknown flag '%s'", s);
    } else if (!dir) {
      dir = s;
    } else {
      return cli_command_usage("export", synopses, "unexpected argument '%s'", s);
    }
  }
  if (!dir) return cli_command_usage("export", synopses, "%s", "needs RUN_DIR");
  if (!to) return cli_command_usage("export", synopses, "%s", "needs --to torch or --to c");
  if (strcmp(to, "torch") && strcmp(to, "c")) return cli_command_usage("export", synopses, "--to is torch or c, not '%s'", to);

  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    diag_plain("%s: %s", dir, stat(dir, &st) < 0 ? "no such directory" : "not a directory (give the run directory cellc train wrote)");
    return 1;
  }
  char cfgp[4096], ckpt[4096], err[1024];
  snprintf(cfgp, sizeof cfgp, "%s/config.cfg", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
  if (access(cfgp, R_OK) < 0 || access(ckpt, R_OK) < 0) {
    diag_plain("%s: not a run directory: no readable %s (cellc train writes config.cfg and checkpoint.safetensors)", dir,
               access(cfgp, R_OK) < 0 ? "config.cfg" : "checkpoint.safetensors");
    return 1;
  }
  /* the cell as the checkpoint holds it, in a private file: the run's cell whatever became of its .cell file */
  SftFile sf;
  if (sft_read(ckpt, &sf, err, sizeof err) < 0) return diag_plain("%s", err), 1;
  const char *src = sft_meta(&sf, "cell_source"), *cname = sft_meta(&sf, "cell");
  if (!src || !cname) {
    sft_free(&sf);
    diag_plain("%s: not a cellc checkpoint (its metadata holds no cell_source)", ckpt);
    return 1;
  }
  char tmpdir[] = "/tmp/cellc-export-XXXXXX", cellp[4200];
  if (!mkdtemp(tmpdir)) return sft_free(&sf), diag_plain("cannot create a temporary directory: %s", strerror(errno)), 3;
  snprintf(cellp, sizeof cellp, "%s/%s.cell", tmpdir, cname);
  FILE *cf = fopen(cellp, "w");
  int rc = 0;
  if (!cf || fputs(src, cf) < 0 || fclose(cf)) rc = (diag_plain("%s: cannot write", cellp), 3);
  sft_free(&sf);

  Export x = {0};
  x.r.a.cell = cellp, x.r.a.cfg = cfgp, x.r.a.checkpoint = ckpt;
  x.r.a.stdlib = cli_stdlib_dir();
  x.r.a.progress = PROGRESS_NONE;
  /* the model is read on the host whatever device it trained on (a checkpoint is the same file on every one) */
  x.r.a.sets[x.r.a.nsets++] = "train.device=cpu";
  if (!rc) rc = run_load(&x.r);
  if (!rc) model_to_host(x.r.model);
  if (!rc) rc = collect(&x);
  char defout[4200];
  snprintf(defout, sizeof defout, "%s/export-%s", dir, to);
  if (!out) out = defout;
  char *tmp = NULL;
  if (!rc && !(tmp = fsout_dir_begin(out, err, sizeof err))) rc = (diag_plain("%s", err), 3);
  if (!rc) rc = !strcmp(to, "torch") ? write_torch(&x, tmp) : write_c(&x, tmp);
  if (!rc && fsout_dir_commit(tmp, out, true, err, sizeof err) < 0) rc = (diag_plain("%s", err), 3);
  if (tmp) fsout_remove_dir(tmp);
  free(tmp);
  if (!rc) printf("exported %s (cell %s, %d layer%s) to %s\n", dir, model_cell_name(x.r.model), x.nl, x.nl == 1 ? "" : "s", out);
  for (int k = 0; k < x.nl; k++) {
    stepgen_free(x.L[k].g);
    if (x.L[k].p) program_free(x.L[k].p);
    free(x.L[k].h0v);
  }
  for (int i = 0; i < x.nt; i++) free(x.t[i].name);
  free(x.t), free(x.L);
  run_teardown(&x.r);
  unlink(cellp);
  rmdir(tmpdir);
  return rc;
}
