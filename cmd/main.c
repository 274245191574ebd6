/* main.c: the cellc driver. Each command reads as its list of passes:
 * load (lex, parse, imports) -> check -> analyze -> lower -> differentiate ->
 * run on a back end. */
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* SIGINT or SIGTERM outside `train` and `diag` (which install their own handlers once they
 * start): status 130 and a word on stderr, never death by the signal. A file being written
 * holds the signals back until it is complete (fsout.c). */
static void on_interrupt(int sig) {
  (void)sig;
  static const char msg[] = "cellc: interrupted\n";
  ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1); /* async-signal-safe */
  (void)n;
  _exit(130);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    cli_print_usage(stderr);
    return 2;
  }
  /* a closed pipe (cellc ... | head) ends the output, not the process by a signal */
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("cellc %s\n", CELLC_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    if (argc < 3) {
      cli_print_usage(stdout);
      return 0;
    }
    const CmdHelp *h = cli_help(argv[2]);
    if (!h) return cli_usage_error("help: unknown command '%s'", argv[2]);
    cli_print_help(h, stdout);
    return 0;
  }
  const CmdHelp *h = cli_help(cmd);
  if (!h) return cli_usage_error("unknown command '%s'", cmd);
  int rc = cli_read_env("cellc");
  if (rc) return rc;
  /* CMD --help anywhere among its arguments */
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      cli_print_help(h, stdout);
      return 0;
    }
  CHECK(h->run); /* every command but help, which is handled above */
  return h->run(argc - 2, argv + 2);
}
