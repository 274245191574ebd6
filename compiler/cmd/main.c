/* main.c: the cellc driver. Each command reads as its list of passes:
 * load (lex, parse, imports) -> check -> analyze -> lower -> differentiate ->
 * run on a back end. */
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cellc COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  check FILE.cell [--set NAME=VALUE]... [--dims H=128,...] [--json]\n"
          "      check every cell; print dims, params, states (recurrence class), gates, mode\n"
          "  derive FILE.cell [--cell NAME] [--set NAME=VALUE]... [--dims H=8,...]\n"
          "      print the derived backward step as math\n"
          "  run FILE.cell --out OUT.safetensors [--cell NAME] [--dims H=8,D=4] [--set NAME=VALUE]...\n"
          "      [--T 16] [--B 3] [--seed 7] [--inputs IN.safetensors] [--backend interp|cpu|cuda|cuda-emu]\n"
          "      [--mode auto|scan|sequential] [--precision f32|f64] [--train]\n"
          "      run one cell on data, forward and backward, and write every tensor\n"
          "  train MODEL.cell TASK.cfg [--set KEY=VALUE]... [--out DIR] [--resume]\n"
          "      train the model TASK.cfg describes around the cell; metrics, checkpoints in DIR\n"
          "  eval MODEL.cell TASK.cfg --checkpoint FILE [--set KEY=VALUE]...\n"
          "      evaluate a checkpoint on the task's test split\n"
          "\n"
          "exit status: 0 success, 1 bad input, 2 bad usage, 3 the run failed, 70 internal error\n");
}

int cli_usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "cellc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n");
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  /* a closed pipe (cellc ... | head) ends the output, not the process by a signal */
  signal(SIGPIPE, SIG_IGN);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "check")) return cmd_check(argc - 2, argv + 2);
  if (!strcmp(cmd, "derive")) return cmd_derive(argc - 2, argv + 2);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  return cli_usage_error("unknown command '%s'", cmd);
}
