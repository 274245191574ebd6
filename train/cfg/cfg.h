/* cfg.h: the TASK.cfg reader (spec "TASK.cfg"): the schema of every section and key, parsing with
 * located errors, --set overrides, typed getters and the writer of the resolved configuration. */
#ifndef CELLC_CFG_H
#define CELLC_CFG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lang.h"
#include "tasks.h"

typedef enum {
  CFG_INT,    /* a whole number (written 500 or 5e4) */
  CFG_REAL,   /* a finite number */
  CFG_STEPS,  /* a number of steps, or a fraction < 1 of train.steps (train.warmup) */
  CFG_BOOL,   /* true | false */
  CFG_CHOICE, /* one word of `choices` */
  CFG_DEVICE, /* a device of training: a back end that trains (pipeline.h's list); no doc: its names */
  CFG_TASK,   /* a task name (task_names) */
  CFG_WORD,   /* one bare word: letters, digits, _ . + - */
  CFG_REALS,  /* a comma list of numbers */
  CFG_INIT,   /* an initializer call, kept as text: ugi, gumbel(0, 0.5) */
  CFG_PATH,   /* the rest of the line, as written */
} CfgType;

/* One key of the schema. */
typedef struct CfgKey {
  const char *name;
  CfgType type;
  const char *def;            /* default as text; NULL: required; "": unset unless given (words, paths,
                               * whole numbers: cfg_text is NULL then) */
  double min, max;            /* range of a number (of each number of a list) */
  bool min_open, max_open;    /* exclusive bounds: (0, inf) */
  int count;                  /* CFG_REALS: exact length; 0: any */
  const char *const *choices; /* CFG_CHOICE: NULL-terminated */
  const char *inherit;        /* [optim.TAG]: the [train] key whose value is the default */
  const char *doc;
} CfgKey;

/* The schema of a fixed section ("model", "train", "eval", "log", or "optim" for the keys of every
 * [optim.TAG]); 0 for "task", whose keys are `name` and those of the chosen task (TaskDef.keys). */
int cfg_schema(const char *section, const CfgKey **keys);

/* A dotted [model] key whose validity depends on the cell, checked by the caller:
 *   option.NAME, layer.K.option.NAME, init.PARAM, layer.K.init.PARAM, dims.NAME. */
typedef enum { CFG_ENTRY_OPTION, CFG_ENTRY_INIT, CFG_ENTRY_DIM } CfgEntryKind;
typedef struct CfgEntry {
  const char *key; /* the full key: "model.layer.0.option.lb" */
  CfgEntryKind kind;
  int layer;        /* K, or -1 for every layer */
  const char *name; /* the option, param or dim */
  const char *text; /* the value as written: "false", "gumbel(0.0, 0.5)", "64" */
  double num;       /* options: the number (true/false: 1/0); dims: the size; inits: 0 */
  bool is_bool;     /* options: written true/false */
} CfgEntry;

typedef struct Cfg Cfg;

/* Parses a configuration (the text is copied: locations stay valid for the Cfg's life), applies the
 * `sets` ("train.lr=3e-4", "model.option.see_h=true", "optim.recurrent.lr_scale=0.5") in order, the
 * last of one key winning, then checks every key and fills the defaults. On the first error prints it
 * (located in the file, or naming the --set) and returns NULL. */
Cfg *cfg_parse(const Src *src, const char *const *sets, int nsets);
/* The same on a file; an unreadable file is an (unlocated) error. */
Cfg *cfg_load(const char *path, const char *const *sets, int nsets);
/* One more override on a parsed Cfg ("train.lr=1e-3"); everything is checked again (a new task name
 * brings that task's keys). Returns 0, or -1 after printing the error, with the Cfg unchanged. */
int cfg_set(Cfg *c, const char *assign);
void cfg_free(Cfg *c);

/* Getters by full key: "train.lr", "task.length", "model.option.see_h", "optim.recurrent.lr_scale".
 * Every schema key has a value (given or default). An [optim.TAG] key reads the section's value or,
 * for any tag without one, its default (lr_scale 1, the [train] value for the others). Asking for a
 * key the schema lacks, with the wrong type, is an internal error (exit 70). */
int64_t cfg_int(const Cfg *c, const char *key);                    /* CFG_INT; dims.NAME */
double cfg_real(const Cfg *c, const char *key);                    /* CFG_INT, CFG_REAL, CFG_STEPS, options */
bool cfg_bool(const Cfg *c, const char *key);                      /* CFG_BOOL; bool options */
const char *cfg_word(const Cfg *c, const char *key);               /* choices, words, task, init, path; NULL if unset */
int cfg_reals(const Cfg *c, const char *key, const double **vals); /* CFG_REALS: count, *vals */
const char *cfg_text(const Cfg *c, const char *key);               /* any key: the value as text; NULL if unset */
bool cfg_has(const Cfg *c, const char *key);                       /* a schema key, section or dotted entry exists */
bool cfg_is_set(const Cfg *c, const char *key);                    /* given in the file or by a --set (not a default) */

/* The task and its key values in the form task_new takes (def->nkeys each): numbers (bools 0/1) in
 * num, strings and paths in str (NULL for numbers and unset paths); they live as long as the Cfg. */
const TaskDef *cfg_task(const Cfg *c);
void cfg_task_values(const Cfg *c, double *num, const char **str);

/* The dotted [model] entries, in the order given. */
int cfg_entries(const Cfg *c, const CfgEntry **entries);
/* The tags of the [optim.TAG] sections, in the order given. */
int cfg_optim_tags(const Cfg *c, const char *const **tags);

/* Reports an error about a key the caller finds wrong (a cell without that option, a tag no param
 * carries): located at the key (or its value, at_value) in the file, naming the --set that gave it,
 * or naming the key when it holds its default. `key` may be a section, "optim.recurrent", for an
 * error at its header. */
void cfg_error(const Cfg *c, const char *key, bool at_value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Marks a key that holds its default as unused by this run (model.hidden for a cell without a dim
 * H): the writer comments it out with `why`, so that the written configuration neither claims it
 * binds anything nor, read back, sets it. Its getters still answer the default. A key given in the
 * file or by a --set is an internal error (the caller has refused it). */
void cfg_mark_unused(Cfg *c, const char *key, const char *why);

/* Writes the resolved configuration, every default written out (an unset optional key, or one
 * marked unused, as a comment), in a form cfg_parse reads back to the same values. */
void cfg_write(const Cfg *c, FILE *f);
/* The same text, malloc'ed (the run directory's config.cfg, checkpoints' metadata). */
char *cfg_write_string(const Cfg *c);

#endif
