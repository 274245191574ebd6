/* cli.h: the commands of the cellc driver (cmd_*.c), their help (help.c) and the argument
 * parsing they share (cli.c). */
#ifndef CELLC_CLI_H
#define CELLC_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"

int cmd_check(int argc, char **argv);
int cmd_derive(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_diag(int argc, char **argv);

int cmd_emit(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_plot(int argc, char **argv);

/* `cellc train` over seeds and lists of values (train_sweep.c, part of the train command;
 * docs/cli.md "Seeds and sweeps"). */
struct RunOptions;
/* Whether the command line asks for several runs: --seeds, or a --set with a list of values. */
bool sweep_wanted(const struct RunOptions *a, const char *seeds);
/* Trains each configuration in DIR/<name>/ (a `cellc train` each, one after another), then writes
 * DIR/summary.json and prints the table of medians and interquartile ranges. The exit status: 0,
 * 2 for a bad list, 1 for a bad configuration, else the first failed run's (130 stops the sweep). */
int sweep_train(const struct RunOptions *a, const char *seeds, const char *progress);

#ifndef CELLC_VERSION
#define CELLC_VERSION "0.1.0"
#endif

/* A command (help.c holds the table, the one list of commands): its help, for `cellc CMD --help`
 * and `cellc help CMD`, and the function main runs for it. */
typedef struct CmdHelp {
  const char *name;
  const char *usage;   /* the synopsis, every flag: "check FILE.cell [--cell NAME] ..." */
  const char *summary; /* what it does, one line */
  const char *flags;   /* one "  --flag VALUE   meaning" line each */
  const char *exits;   /* one "  N   meaning" line each */
  int (*run)(int argc, char **argv); /* the arguments after the command's name; NULL: `help` (main's own) */
} CmdHelp;

const CmdHelp *cli_help(const char *cmd); /* NULL for an unknown command */
void cli_print_help(const CmdHelp *h, FILE *f);
/* The global usage: every command's synopsis, and the exit statuses. */
void cli_print_usage(FILE *f);

/* ---- the argument parsing every command shares (cli.c) ---- */

/* Prints the message and the global usage; returns 2. fmt has one %s. */
int cli_usage_error(const char *fmt, const char *arg);
/* "cellc CMD: " and the message, then the synopsis of each command of `synopses` (NULL-ended)
 * and where the help is; returns 2. fmt has one %s. */
int cli_command_usage(const char *cmd, const char *const *synopses, const char *fmt, const char *arg);

/* Arguments common to the commands that compile a cell. */
typedef struct CellArgs {
  const char *file;
  const char *cell;
  Binding sets[64];
  int nsets;
  Binding dims[64];
  int ndims;
  const char *mode;     /* auto | scan | sequential */
  bool chunk_set;       /* --set chunk=L (language spec section 10): not a cell option */
  int chunk;            /* its steps per chunk; 0: the whole sequence */
  bool runs_chunked;    /* the command runs --mode chunked (cellc run); others refuse it */
} CellArgs;

/* The chunk length asked for (chunk_length's `asked`): --set chunk=L, else -1 (the compiler's). */
static inline int cli_chunk(const CellArgs *a) { return a->chunk_set ? a->chunk : -1; }

/* Takes --set, --dims, --cell, --mode at argv[*i] (advancing *i); returns 1
 * when taken, 0 when not one of them, -1 after a usage error (exit 2). */
int cli_cell_arg(CellArgs *a, int argc, char **argv, int *i);
/* Loads a.file and checks the chosen cell with every dim bound (training: gumbel_sigmoid draws
 * noise); NULL after a located diagnostic. */
Cell *cli_compile_cell(Arena *arena, const CellArgs *a, bool training);
/* The standard library directory: CELLC_STDLIB, else found relative to the executable. */
const char *cli_stdlib_dir(void);

/* ---- the environment (env.c; docs/tuning.md lists every variable) ---- */

/* The tuning options from the CELLC_* variables, each unset one at its default; -1 after a bad
 * value, err naming the variable, its value and what it takes. */
int cli_tuning_from_env(Tuning *t, char *err, size_t errlen);
/* Reads every CELLC_* variable once and passes them in: the tuning options (tuning_set) and
 * CELLC_STDLIB (cli_stdlib_dir). 0, or 2 after printing "PROG: " and the error of a bad value.
 * Programs that call the library directly (bench, tests) call it first too. */
int cli_read_env(const char *prog);
/* CELLC_STDLIB as cli_read_env read it; NULL when unset or empty. */
const char *cli_env_stdlib(void);

#endif
