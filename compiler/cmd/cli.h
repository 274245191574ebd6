/* cli.h: the commands of the cellc driver and their shared argument parsing. */
#ifndef CELLC_CLI_H
#define CELLC_CLI_H

#include <stdbool.h>

#include "check.h"

int cmd_check(int argc, char **argv);
int cmd_derive(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);

/* Prints the message and the usage; returns 2. fmt has one %s. */
int cli_usage_error(const char *fmt, const char *arg);

/* Arguments common to the commands that compile a cell. */
typedef struct CellArgs {
  const char *file;
  const char *cell;
  Binding sets[64];
  int nsets;
  Binding dims[64];
  int ndims;
  const char *mode;     /* auto | scan | sequential */
} CellArgs;

/* Takes --set, --dims, --cell, --mode at argv[*i] (advancing *i); returns 1
 * when taken, 0 when not one of them, -1 after a usage error (exit 2). */
int cli_cell_arg(CellArgs *a, int argc, char **argv, int *i);
/* The standard library directory, found relative to the executable. */
const char *cli_stdlib_dir(void);

#endif
