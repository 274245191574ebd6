/* help.c: the table of commands (usage, flags, exit statuses, the function that runs each), the one
 * place the commands are listed:
 * `cellc CMD --help` and `cellc help CMD` print an entry, the global usage is drawn from all.
 * The word BACKENDS in an entry stands for the back ends' names (pipeline.h's list), a|b|c. */
#include <string.h>

#include "cli.h"
#include "pipeline.h"

static const CmdHelp commands[] = {
    {"check",
     "check FILE.cell [--cell NAME] [--set NAME=VALUE]... [--dims H=128,...] [--mode auto|scan|sequential|chunked] "
     "[--json | --dump typed|lower|ad|plan]",
     "check every cell; print dims, options, params, states (recurrence class), gates, mode",
     "  --cell NAME             only this cell (it may be one the file imports)\n"
     "  --set NAME=VALUE        set an option (repeatable)\n"
     "  --dims H=128,...        bind dims (repeatable); a name no cell declares is an error\n"
     "  --mode auto|scan|sequential|chunked   force the mode (scan on a nonlinear cell is an error;\n"
     "                                chunked where the chunked form does not apply says why)\n"
     "  --json                  one JSON document on stdout\n"
     "  --dump typed|lower|ad|plan   print one cell (--cell, default the last) after a pass, every dim\n"
     "                          bound: typed step graph, lowered program, with its backward, plan\n"
     "  -h, --help              this help\n",
     "  0   the file checks (warnings, such as an unused param, go to stderr)\n"
     "  1   bad input: an error in the .cell file (located), a file with no cell, a bad --set, --dims or --cell\n"
     "  2   bad usage: unknown flag, a flag without its value, an unknown --dump\n"
     "  70  internal error (a bug)\n", cmd_check},
    {"derive", "derive FILE.cell [--cell NAME] [--set NAME=VALUE]... [--dims H=8,...] [--mode auto|scan|sequential]",
     "print the derived backward step as math",
     "  --cell NAME             which cell (default: the last one of the file)\n"
     "  --set NAME=VALUE        set an option (repeatable)\n"
     "  --dims H=8,...          bind dims (unbound ones get 3; the math does not depend on them)\n"
     "  --mode auto|scan|sequential   force the mode\n"
     "  -h, --help              this help\n",
     "  0   success\n"
     "  1   bad input: an error in the .cell file, a file with no cell, a bad --set, --dims or --cell\n"
     "  2   bad usage\n"
     "  70  internal error (a bug)\n", cmd_derive},
    {"run",
     "run FILE.cell --out OUT.safetensors [--cell NAME] [--dims H=8,D=4] [--set NAME=VALUE]... [--T 16] [--B 3] "
     "[--seed 7] [--inputs IN.safetensors] [--backend BACKENDS] [--mode auto|scan|sequential|chunked] "
     "[--precision f32|f64] [--lengths 5,3,7] [--train]",
     "run one cell on data, forward and backward, and write every tensor",
     "  --out FILE              where to write (required; a link is written through, a FIFO,\n"
     "                          device, directory or read-only file is refused)\n"
     "  --cell NAME             which cell (default: the last one of the file)\n"
     "  --dims H=8,D=4          bind dims; every dim, the input's included\n"
     "  --set NAME=VALUE        set an option (repeatable)\n"
     "  --T N, --B N            sequence length and batch for generated data (16, 3)\n"
     "  --seed N                seed of every generated tensor (0)\n"
     "  --inputs FILE           take params and data from this safetensors file\n"
     "  --backend BACKENDS   (cpu; cuda needs an NVIDIA driver and GPU, cuda-emu runs\n"
     "               the same CUDA code on the CPU: slow, for tests)\n"
     "  --mode auto|scan|sequential|chunked   (chunked: --set chunk=L its chunk length)\n"
     "  --precision f32|f64     (f32; f64 with --backend interp only)\n"
     "  --lengths 5,3,7         each row's length (B integers in 1..T; or a tensor 'lengths' in --inputs)\n"
     "  --train                 training mode: gumbel_sigmoid draws noise\n"
     "  -h, --help              this help\n",
     "  0   success\n"
     "  1   bad input: an error in the .cell file, a bad --inputs file, a bad --set, --dims or --cell\n"
     "  2   bad usage: unknown flag, a flag without its value, a value out of range, no --out\n"
     "  3   the run failed: the output cannot be written, a device or library the back end needs is missing, out of memory\n"
     "  70  internal error (a bug)\n", cmd_run},
    {"train",
     "train MODEL.cell TASK.cfg [--set KEY=VALUE]... [--seeds LIST] [--out DIR] [--resume [--allow-changed-cell] | --force] "
     "[--progress bar|lines|none] [--dry-run]",
     "train the model TASK.cfg describes around the cell; metrics, checkpoints in DIR",
     "  --set KEY=VALUE         override a configuration key (repeatable): --set train.lr=3e-4\n"
     "  --seeds LIST            one run per train.seed: 1..5 or 1,3,7; each in DIR/seed-<s>/, then\n"
     "                          DIR/summary.json and a table of median and IQR per final metric\n"
     "  --set KEY=V1,V2         a list (or A..B) sweeps the key: a run per value (per combination);\n"
     "                          ';' separates values of a key that is itself a list (train.betas)\n"
     "  --out DIR               the run directory (default runs/<cell>-<task>-<time>)\n"
     "  --resume                continue the run in DIR from its checkpoint\n"
     "  --allow-changed-cell    with --resume: continue even though the cell (its formulas, options,\n"
     "                          params or states) differs from the checkpoint's; a warning says how\n"
     "  --force                 start over in a DIR that holds a run (its files are removed first)\n"
     "  --progress bar|lines|none   bar: one line redrawn in place; lines: a line per log interval\n"
     "                          and evaluation; none: neither (default: bar on a terminal, lines\n"
     "                          otherwise and under mpirun)\n"
     "  --dry-run               print the model (each tensor, its shape and size, the parameter\n"
     "                          count, each layer's mode) and stop; nothing is written\n"
     "  -h, --help              this help\n"
     "SIGINT or SIGTERM (any number of them) finishes the step, writes the checkpoint, exits 130.\n"
     "mpirun -np N cellc train ... trains on N processes (data-parallel; train.batch must divide by N;\n"
     "rank 0 writes the run's files; docs/distributed.md).\n",
     "  0   success (or, with --resume, a run that is already complete: nothing written)\n"
     "  1   bad input: an error in the .cell or .cfg file, a DIR that holds a run (without --resume\n"
     "      or --force), a checkpoint that is missing, for another model or not finite, a cell that\n"
     "      differs from the checkpoint's (without --allow-changed-cell)\n"
     "  2   bad usage: unknown flag, a flag without its value, --resume without --out, a bad --seeds\n"
     "      or --set list (an empty value, a range going down), a sweep under mpirun\n"
     "  3   the run failed: the loss became NaN or infinite, a file cannot be written, out of memory,\n"
     "      train.device = cuda without a driver or GPU (named), not enough device memory (the bytes)\n"
     "  70  internal error (a bug)\n"
     "  130 interrupted (SIGINT/SIGTERM), after writing the checkpoint\n"
     "A sweep exits with the first failed run's status (0 when every run succeeded).\n", cmd_train},
    {"eval", "eval MODEL.cell TASK.cfg --checkpoint FILE [--set KEY=VALUE]... [--allow-changed-cell]",
     "evaluate a checkpoint on the task's test split",
     "  --checkpoint FILE       the checkpoint to evaluate (required)\n"
     "  --allow-changed-cell    evaluate it even though the cell (its formulas, options, params or\n"
     "                          states) differs from the one it was trained with; a warning says how\n"
     "  --set KEY=VALUE         override a configuration key (repeatable)\n"
     "  -h, --help              this help\n",
     "  0   success\n"
     "  1   bad input: an error in the .cell or .cfg file, a checkpoint that is unreadable, for another\n"
     "      model, or holds a value that is not finite, a cell that differs from the checkpoint's\n"
     "      (without --allow-changed-cell)\n"
     "  2   bad usage: unknown flag, no --checkpoint\n"
     "  3   out of memory; train.device = cuda without a driver or GPU, or its memory\n"
     "  70  internal error (a bug)\n", cmd_eval},
    {"diag", "diag MODEL.cell TASK.cfg [--checkpoint FILE [--allow-changed-cell]] [--out DIR] [--batches N] "
             "[--sequences N] [--starts N|all] [--compare DIR] [--by-token] [--set KEY=VALUE]...",
     "the diagnostics of seeds.md section 5 (gates, gradients per step, Jacobian products), with plots",
     "  --checkpoint FILE       the model's params (default: its initialization from train.seed)\n"
     "  --allow-changed-cell    load the checkpoint even though the cell differs from its own (a warning)\n"
     "  --out DIR               where to write (default runs/diag-<cell>-<task>-<time>); must not hold files\n"
     "  --batches N             validation batches to average over (default 1)\n"
     "  --sequences N           the Jacobian statistics over the first N sequences of the first batch (default 1)\n"
     "  --starts N|all          start times of the Jacobian products per sequence (default 16; all: every step)\n"
     "  --compare DIR           a directory an earlier cellc diag wrote: its gate histograms are drawn\n"
     "                          next to this run's (before and after training)\n"
     "  --by-token              require the statistics by input token (an error for a task without tokens)\n"
     "  --set KEY=VALUE         override a configuration key (repeatable)\n"
     "  -h, --help              this help\n",
     "  0   success\n"
     "  1   bad input: an error in the .cell or .cfg file, a checkpoint that is unreadable or for another\n"
     "      model (or cell, without --allow-changed-cell), --by-token on a task without tokens, --compare\n"
     "      without a diag.json\n"
     "  2   bad usage: unknown flag, a missing argument\n"
     "  3   a file could not be written (or --out holds files), out of memory\n"
     "  70  internal error (a bug)\n"
     "  130 interrupted (SIGINT or SIGTERM): nothing written\n", cmd_diag},
    {"plot", "plot RUN_DIR... [--out PATH] [--title TEXT] | plot --figure FIG.json [--out PATH]",
     "draw the loss, accuracy and learning rate against the step of one or several runs (SVG and PNG)",
     "  RUN_DIR                 a run directory of cellc train, or a sweep's directory (its runs)\n"
     "  --out PATH              write PATH.svg and PATH.png (default RUN_DIR/curves; required for\n"
     "                          several RUN_DIRs)\n"
     "  --title TEXT            the loss panel's title (default: loss)\n"
     "  --figure FIG.json       panels of numbers given in FIG.json instead of runs, drawn as cellc diag's\n"
     "                          plots (docs/cli.md \"Plots\"); PATH defaults to FIG without .json\n"
     "  -h, --help              this help\n"
     "Each run is one colour, labelled by the configuration keys that differ between the runs;\n"
     "train rows are solid lines, valid rows dashed.\n",
     "  0   success\n"
     "  1   bad input: a RUN_DIR without metrics.jsonl, a line of it that is not a metrics row\n"
     "  2   bad usage: unknown flag, no RUN_DIR, several RUN_DIRs without --out\n"
     "  3   a plot could not be written\n"
     "  70  internal error (a bug)\n", cmd_plot},
    {"emit",
     "emit FILE.cell --out DIR [--target cpu|cuda] [--cell NAME] [--dims H=128,...] [--set NAME=VALUE]... "
     "[--mode auto|scan|sequential] [--name PREFIX] [--cpu generic|x86-64-v3|x86-64-v4|native] [--arch sm_80] [--torch] [--torch-ops]",
     "write the cell's whole-sequence forward and backward as standalone code (docs/emit.md)",
     "  --out DIR               the directory of the files (required; written complete or not at all)\n"
     "  --target cpu|cuda       cpu: P.o and libP.so (cblas); cuda: P.cu and P.ptx (default cpu)\n"
     "  --cell NAME             which cell (default: the last one of the file)\n"
     "  --dims H=128,...        bind dims: every dim must be bound\n"
     "  --set NAME=VALUE        set an option (repeatable)\n"
     "  --mode auto|scan|sequential\n"
     "  --name PREFIX           the prefix P of every file and symbol (default: the cell's name)\n"
     "  --cpu NAME              target cpu: generic, x86-64-v3 (default: AVX2, no AVX-512), x86-64-v4, native\n"
     "  --arch sm_XY            target cuda: the PTX architecture (default sm_80)\n"
     "  --torch                 also P_torch.py, a PyTorch module over libP.so (target cpu)\n"
     "  --torch-ops             also P_ops.py, the step as torch ops in any dtype, with the gates\n"
     "  -h, --help              this help\n",
     "  0   success: P.h, P.json and the target's files are in DIR\n"
     "  1   bad input: an error in the .cell file, an unbound dim, a bad --set, --dims or --cell\n"
     "  2   bad usage: unknown flag or value (--target, --cpu, --name), no --out\n"
     "  3   emitting failed: DIR cannot be written, the C compiler or a back end's tool failed\n"
     "  70  internal error (a bug)\n", cmd_emit},
    {"export", "export RUN_DIR --to torch|c [--out DIR]",
     "write a trained run's whole model as a PyTorch module or a C library for streaming inference",
     "  --to torch              model.py (plain torch ops) and weights.safetensors\n"
     "  --to c                  model.h, model.c (model_step, model_forward), weights.bin, Makefile\n"
     "  --out DIR               where to write (default RUN_DIR/export-torch or RUN_DIR/export-c)\n"
     "  -h, --help              this help\n",
     "  0   success\n"
     "  1   bad input: RUN_DIR missing or not a run directory, a broken checkpoint or config.cfg, a cell\n"
     "      the export cannot write (named)\n"
     "  2   bad usage: unknown flag, no RUN_DIR, no --to or an unknown one, a flag without its value\n"
     "  3   writing failed: DIR cannot be created or written\n"
     "  70  internal error (a bug)\n", cmd_export},
    {"help", "help [COMMAND]", "print the usage, or a command's own help (as COMMAND --help)",
     "", "  0   success\n  2   unknown command\n", NULL},
};

const CmdHelp *cli_help(const char *cmd) {
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(commands[i].name, cmd)) return &commands[i];
  return NULL;
}

/* text with every BACKENDS replaced by the back ends' names, "interp|cpu|cuda|cuda-emu"
 * (malloc'd) */
static char *expand(const char *text) {
  char names[256];
  backend_join(names, sizeof names, "|", false);
  char *out = xmalloc(strlen(text) * (strlen(names) + 1) + 1), *o = out;
  for (const char *t = text; *t;) {
    if (!strncmp(t, "BACKENDS", 8)) o += sprintf(o, "%s", names), t += 8;
    else *o++ = *t++;
  }
  *o = 0;
  return out;
}

void cli_print_help(const CmdHelp *h, FILE *f) {
  char *usage = expand(h->usage), *flags = expand(h->flags);
  fprintf(f, "usage: cellc %s\n\n%s\n", usage, h->summary);
  if (*flags) fprintf(f, "\nflags:\n%s", flags);
  fprintf(f, "\nexit status:\n%s", h->exits);
  free(usage), free(flags);
}

void cli_print_usage(FILE *f) {
  fprintf(f, "usage: cellc COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
    /* the synopsis wrapped before a " [" past column 96, continued indented */
    char *usage = expand(commands[i].usage);
    const char *u = usage;
    int col = fprintf(f, "  ");
    while (*u) {
      const char *next = strstr(u + 1, " [");
      int n = next ? (int)(next - u) : (int)strlen(u);
      if (col + n > 96 && col > 8 && *u == ' ') {
        fprintf(f, "\n       ");
        col = 7;
      }
      col += fprintf(f, "%.*s", n, u);
      u += n;
    }
    free(usage);
    fprintf(f, "\n      %s\n", commands[i].summary);
  }
  fprintf(f, "\n`cellc COMMAND --help` (or `cellc help COMMAND`) describes a command's flags and exit statuses;\n"
             "`cellc --version` prints the version.\n"
             "\nexit status: 0 success, 1 bad input, 2 bad usage, 3 the run failed (a file cannot be written,\n"
             "NaN loss, out of memory), 70 internal error, 130 interrupted (SIGINT/SIGTERM)\n");
}
