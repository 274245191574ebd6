/* test_cfg.c: the TASK.cfg reader: the spec's example, defaults, every error with its location,
 * --set overrides, the writer's round trip and random garbage. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "cfg.h"
#include "lang.h"
#include "pipeline.h"

/* The example of spec/cli.md, as written there. */
static const char *spec_example =
    "[task]\n"
    "name     = copying        # see \"Tasks\" below\n"
    "length   = 500            # task-specific keys\n"
    "tokens   = 10\n"
    "memorize = 10\n"
    "\n"
    "[model]\n"
    "cell      = mgu           # a cell of MODEL.cell (default: the last one)\n"
    "layers    = 3\n"
    "width     = 128           # size of each layer's input x (the embedding size for layer 0)\n"
    "hidden    = 128           # binds dim H; dims.N = 64 binds any other dim\n"
    "encoder   = embed         # embed (token inputs) | linear (real-valued inputs); default by task\n"
    "block     = stack         # stack: layer output feeds the next layer | residual: x + mixer(cell(norm(x)))\n"
    "norm      = none          # none | layer | rms | batch   (residual blocks)\n"
    "mixer     = none          # none | glu | mlp            (residual blocks)\n"
    "dropout   = 0.0\n"
    "readout   = all           # all (per-step outputs) | last | mean; default by task\n"
    "option.see_h = false      # cell options, all layers\n"
    "layer.0.option.lb = 0.0   # one layer only\n"
    "init.bz   = ugi           # override a param's initializer, all layers\n"
    "layer.0.init.bz = gumbel(0.0, 0.5)\n"
    "\n"
    "[train]\n"
    "steps        = 50000\n"
    "batch        = 64\n"
    "optimizer    = adamw      # sgd | adam | adamw\n"
    "lr           = 1e-4\n"
    "momentum     = 0.0        # sgd\n"
    "betas        = 0.9, 0.999\n"
    "eps          = 1e-8\n"
    "weight_decay = 0.0\n"
    "schedule     = constant   # constant | cosine | inverse_sqrt | linear\n"
    "warmup       = 0          # steps (or a fraction < 1 of steps)\n"
    "min_lr       = 0.0\n"
    "clip         = 0.0        # global gradient-norm clip; 0 = off\n"
    "seed         = 1\n"
    "device       = cpu        # cpu | cuda\n"
    "mode         = auto       # auto | scan | sequential\n"
    "\n"
    "[optim.recurrent]         # per-tag overrides\n"
    "lr_scale     = 0.5\n"
    "weight_decay = 0.0\n"
    "\n"
    "[eval]\n"
    "every  = 500              # steps between evaluations\n"
    "batches = 20              # batches per evaluation (generated tasks) or the whole split\n"
    "\n"
    "[log]\n"
    "every = 50\n";

static char *diag_buf;
static size_t diag_len;

/* Sends diagnostics to a memory buffer (each test runs in its own process). */
static void capture(void) {
  if (diag_out)
    fclose(diag_out);
  free(diag_buf);
  diag_buf = NULL;
  diag_out = open_memstream(&diag_buf, &diag_len);
}

static const char *captured(void) {
  fflush(diag_out);
  return diag_buf ? diag_buf : "";
}

static Cfg *parse_sets(const char *text, const char *const *sets, int nsets) {
  capture();
  Src src = {"t.cfg", text, strlen(text)};
  return cfg_parse(&src, sets, nsets);
}

static Cfg *parse(const char *text) { return parse_sets(text, NULL, 0); }

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* Expects the text (with sets) to fail with exactly one error whose first line is `want`. */
static void expect_error_sets(const char *text, const char *const *sets, int nsets, const char *want) {
  Cfg *c = parse_sets(text, sets, nsets);
  const char *got = captured();
  cr_assert_null(c, "accepted:\n%s", text);
  size_t n = strcspn(got, "\n");
  cr_assert(strlen(want) == n && strncmp(got, want, n) == 0, "want: %s\ngot:  %.*s", want, (int)n, got);
  cr_assert_eq(count_of(got, "error:"), 1, "more than one error:\n%s", got);
}

static void expect_error(const char *text, const char *want) { expect_error_sets(text, NULL, 0, want); }

#define TASK "[task]\nname = copying\n"

/* ---- Accepted configurations ---- */

Test(cfg, spec_example_parses) {
  Cfg *c = parse(spec_example);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_str_eq(cfg_word(c, "task.name"), "copying");
  cr_assert_str_eq(cfg_task(c)->name, "copying");
  cr_assert_eq(cfg_int(c, "task.length"), 500);
  cr_assert_eq(cfg_int(c, "task.tokens"), 10);
  cr_assert_str_eq(cfg_word(c, "model.cell"), "mgu");
  cr_assert_eq(cfg_int(c, "model.layers"), 3);
  cr_assert_str_eq(cfg_word(c, "model.encoder"), "embed");
  cr_assert_str_eq(cfg_word(c, "model.readout"), "all");
  cr_assert_eq(cfg_real(c, "model.dropout"), 0.0);
  cr_assert_eq(cfg_int(c, "train.steps"), 50000);
  cr_assert_str_eq(cfg_word(c, "train.optimizer"), "adamw");
  cr_assert_eq(cfg_real(c, "train.lr"), 1e-4);
  const double *betas;
  cr_assert_eq(cfg_reals(c, "train.betas", &betas), 2);
  cr_assert_eq(betas[0], 0.9);
  cr_assert_eq(betas[1], 0.999);
  cr_assert_eq(cfg_real(c, "optim.recurrent.lr_scale"), 0.5);
  cr_assert_eq(cfg_int(c, "eval.every"), 500);
  cr_assert_eq(cfg_int(c, "eval.batches"), 20);
  cr_assert_eq(cfg_int(c, "log.every"), 50);
  cfg_free(c);
}

Test(cfg, spec_example_model_entries) {
  Cfg *c = parse(spec_example);
  cr_assert_not_null(c, "%s", captured());
  const CfgEntry *e;
  int n = cfg_entries(c, &e);
  cr_assert_eq(n, 4);
  cr_assert_str_eq(e[0].key, "model.option.see_h");
  cr_assert_eq(e[0].kind, CFG_ENTRY_OPTION);
  cr_assert_eq(e[0].layer, -1);
  cr_assert_str_eq(e[0].name, "see_h");
  cr_assert(e[0].is_bool && e[0].num == 0);
  cr_assert_str_eq(e[1].key, "model.layer.0.option.lb");
  cr_assert_eq(e[1].layer, 0);
  cr_assert(!e[1].is_bool && e[1].num == 0.0);
  cr_assert_eq(e[2].kind, CFG_ENTRY_INIT);
  cr_assert_str_eq(e[2].name, "bz");
  cr_assert_str_eq(e[2].text, "ugi");
  cr_assert_eq(e[3].layer, 0);
  cr_assert_str_eq(cfg_word(c, "model.layer.0.init.bz"), "gumbel(0.0, 0.5)");
  cr_assert_eq(cfg_bool(c, "model.option.see_h"), false);
  cfg_free(c);
}

Test(cfg, defaults_fill_every_key) {
  Cfg *c = parse("[task]\nname = adding\n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_int(c, "task.length"), 80); /* the task's own default */
  cr_assert_eq(cfg_int(c, "task.noise_channels"), 3);
  cr_assert_null(cfg_word(c, "model.cell")); /* unset: the last cell */
  cr_assert_str_eq(cfg_word(c, "model.encoder"), "auto");
  cr_assert_str_eq(cfg_word(c, "model.block"), "stack");
  cr_assert_eq(cfg_int(c, "model.hidden"), 128);
  cr_assert_eq(cfg_int(c, "train.steps"), 50000);
  cr_assert_eq(cfg_int(c, "train.batch"), 64);
  cr_assert_eq(cfg_real(c, "train.lr"), 1e-4);
  cr_assert_eq(cfg_real(c, "train.eps"), 1e-8);
  cr_assert_str_eq(cfg_word(c, "train.schedule"), "constant");
  cr_assert_eq(cfg_real(c, "train.warmup"), 0);
  cr_assert_eq(cfg_int(c, "train.seed"), 1);
  cr_assert_str_eq(cfg_word(c, "train.device"), "cpu");
  cr_assert_str_eq(cfg_word(c, "train.mode"), "auto");
  cr_assert_eq(cfg_int(c, "eval.every"), 500);
  cr_assert_eq(cfg_int(c, "log.every"), 50);
  cr_assert_not(cfg_is_set(c, "train.lr"));
  cr_assert(cfg_is_set(c, "task.name"));
  const CfgEntry *e;
  cr_assert_eq(cfg_entries(c, &e), 0);
  cfg_free(c);
}

Test(cfg, optim_tag_inherits_train_values) {
  Cfg *c = parse(TASK "[train]\nweight_decay = 0.1\nbetas = 0.9, 0.98\n[optim.recurrent]\nlr_scale = 0.25\n");
  cr_assert_not_null(c, "%s", captured());
  const char *const *tags;
  cr_assert_eq(cfg_optim_tags(c, &tags), 1);
  cr_assert_str_eq(tags[0], "recurrent");
  cr_assert_eq(cfg_real(c, "optim.recurrent.lr_scale"), 0.25);
  cr_assert_eq(cfg_real(c, "optim.recurrent.weight_decay"), 0.1);
  const double *b;
  cr_assert_eq(cfg_reals(c, "optim.recurrent.betas", &b), 2);
  cr_assert_eq(b[1], 0.98);
  /* A tag without a section: lr_scale 1 and the [train] values. */
  cr_assert_eq(cfg_real(c, "optim.other.lr_scale"), 1);
  cr_assert_eq(cfg_real(c, "optim.other.weight_decay"), 0.1);
  cr_assert_not(cfg_is_set(c, "optim.recurrent.weight_decay"));
  cr_assert(cfg_is_set(c, "optim.recurrent.lr_scale"));
  cfg_free(c);
}

Test(cfg, task_values_feed_task_new) {
  Cfg *c = parse("[task]\nname = temporal_xor\nlength = 20\ntreated = 1\neasy_fraction = 0.4\n");
  cr_assert_not_null(c, "%s", captured());
  const TaskDef *def = cfg_task(c);
  double num[16];
  const char *str[16];
  cfg_task_values(c, num, str);
  int il = task_key_index(def, "length"), it = task_key_index(def, "treated"),
      ie = task_key_index(def, "easy_fraction");
  cr_assert_eq(num[il], 20);
  cr_assert_null(str[il]);
  cr_assert_str_eq(str[it], "1");
  cr_assert(isnan(num[it]));
  cr_assert_eq(num[ie], 0.4);
  cfg_free(c);
}

Test(cfg, comments_blank_lines_and_spacing) {
  Cfg *c = parse("# a comment\n\n  [ task ]   # trailing\n\tname=copying#no space\r\n  length   =   7   \n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_int(c, "task.length"), 7);
  cr_assert_str_eq(cfg_word(c, "task.name"), "copying");
  cfg_free(c);
}

Test(cfg, numbers_in_every_form) {
  Cfg *c = parse(TASK "[train]\nsteps = 5e4\nlr = .5\neps = 1E-6\nmin_lr = +0\nwarmup = 0.1\n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_int(c, "train.steps"), 50000);
  cr_assert_eq(cfg_real(c, "train.lr"), 0.5);
  cr_assert_eq(cfg_real(c, "train.eps"), 1e-6);
  cr_assert_eq(cfg_real(c, "train.warmup"), 0.1);
  cfg_free(c);
}

Test(cfg, warmup_takes_steps) {
  Cfg *c = parse(TASK "[train]\nsteps = 100\nwarmup = 10\n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_real(c, "train.warmup"), 10);
  cfg_free(c);
}

Test(cfg, paths_keep_spaces) {
  Cfg *c = parse("[task]\nname = text\npath = my data/corpus.txt   # the corpus\n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_str_eq(cfg_word(c, "task.path"), "my data/corpus.txt");
  cfg_free(c);
}

Test(cfg, init_calls_with_numbers_and_param_names) {
  Cfg *c = parse(TASK "[model]\ninit.wz = uniform(-0.125, 1.25e-1)\ninit.g = lru_gamma(nu)\ndims.N = 64\n");
  cr_assert_not_null(c, "%s", captured());
  cr_assert_str_eq(cfg_word(c, "model.init.wz"), "uniform(-0.125, 1.25e-1)");
  cr_assert_eq(cfg_int(c, "model.dims.N"), 64);
  cfg_free(c);
}

/* The model reads an override's arguments as numbers (one grammar, init_parse): an expression is
 * refused here, located, rather than accepted and failing when the model draws the values. */
Test(cfg, init_arguments_are_numbers) {
  expect_error(TASK "[model]\ninit.wz = uniform(-1/sqrt(H), 1)\n",
               "t.cfg:4:19: error: model.init.wz = uniform(-1/sqrt(H), 1): uniform: expected a number");
}

/* train.data_seed: unset (cfg_text NULL: the run takes train.seed) unless given; written back as a
 * comment, and read back to the same. train.keep and log.csv: their defaults and choices. */
Test(cfg, data_seed_keep_csv) {
  Cfg *c = parse(TASK);
  cr_assert_null(cfg_text(c, "train.data_seed"));
  cr_assert_str_eq(cfg_word(c, "train.keep"), "last");
  cr_assert_not(cfg_bool(c, "log.csv"));
  char *text = cfg_write_string(c);
  cr_assert(strstr(text, "# data_seed: unset") != NULL, "%s", text);
  Cfg *back = parse(text);
  cr_assert_null(cfg_text(back, "train.data_seed"));
  cfg_free(back), free(text), cfg_free(c);
  const char *sets[] = {"train.data_seed=7", "train.keep=best", "log.csv=true"};
  c = parse_sets(TASK, sets, 3);
  cr_assert_eq(cfg_int(c, "train.data_seed"), 7);
  cr_assert_str_eq(cfg_word(c, "train.keep"), "best");
  cr_assert(cfg_bool(c, "log.csv"));
  text = cfg_write_string(c);
  back = parse(text);
  cr_assert_eq(cfg_int(back, "train.data_seed"), 7);
  cfg_free(back), free(text), cfg_free(c);
  const char *bad[] = {"train.keep=worst"};
  cr_assert_null(parse_sets(TASK, bad, 1));
  cr_assert(strstr(captured(), "train.keep") != NULL, "%s", captured());
}

Test(cfg, schema_tables) {
  const CfgKey *keys;
  int n = cfg_schema("train", &keys);
  cr_assert_eq(n, 18); /* train.bucket the last */
  cr_assert_str_eq(keys[3].name, "lr");
  cr_assert(keys[3].min_open && keys[3].max_open && keys[3].min == 0 && isinf(keys[3].max));
  cr_assert_eq(cfg_schema("optim", &keys), 5);
  cr_assert_str_eq(keys[1].inherit, "weight_decay");
  cr_assert_eq(cfg_schema("task", &keys), 0); /* name, then the task's own keys */
}

Test(cfg, has_and_is_set) {
  Cfg *c = parse(spec_example);
  cr_assert_not_null(c);
  cr_assert(cfg_has(c, "train.lr"));
  cr_assert(cfg_has(c, "model.layer.0.init.bz"));
  cr_assert(cfg_has(c, "optim.anytag.lr_scale"));
  cr_assert_not(cfg_has(c, "model.option.nope"));
  cr_assert_not(cfg_has(c, "train.nope"));
  cr_assert_not(cfg_has(c, "task.noise_channels")); /* a key of another task */
  cr_assert(cfg_is_set(c, "model.option.see_h"));
  cr_assert_not(cfg_is_set(c, "optim.anytag.lr_scale"));
  cfg_free(c);
}

/* ---- Errors, one kind each, with their location ---- */

Test(cfg_error, unknown_section_suggests_nearest) {
  expect_error(TASK "[trian]\nlr = 1\n", "t.cfg:3:2: error: unknown section [trian]; did you mean [train]?");
}

Test(cfg_error, unknown_section_lists_sections) {
  expect_error(TASK "[zzz]\n",
               "t.cfg:3:2: error: unknown section [zzz]; the sections are [task], [model], [train], [optim.TAG], "
               "[eval], [log]");
}

Test(cfg_error, optim_section_needs_a_tag) {
  expect_error(TASK "[optim]\n", "t.cfg:3:2: error: [optim] needs a tag: [optim.TAG], TAG a tag of the cell's params, "
                                 "e.g. [optim.recurrent]");
}

Test(cfg_error, unknown_key_suggests_nearest) {
  expect_error(TASK "[train]\nlrr = 1\n", "t.cfg:4:1: error: unknown key 'lrr' in [train]; did you mean 'lr'?");
}

Test(cfg_error, unknown_key_lists_keys) {
  expect_error(TASK "[log]\nzzzzzz = 1\n", "t.cfg:4:1: error: unknown key 'zzzzzz' in [log]; the keys are every, grad_per_step, csv");
}

Test(cfg_error, unknown_task_key_uses_the_tasks_keys) {
  expect_error(TASK "lenght = 5\n", "t.cfg:3:1: error: unknown key 'lenght' in [task] (task copying); did you mean "
                                    "'length'?");
}

Test(cfg_error, key_of_another_task_is_unknown) {
  expect_error("[task]\nname = adding\ntokens = 5\n",
               "t.cfg:3:1: error: unknown key 'tokens' in [task] (task adding); the keys are name, length, "
               "noise_channels");
}

Test(cfg_error, unknown_model_entry_suggests_dotted_form) {
  expect_error(TASK "[model]\noptions.see_h = true\n",
               "t.cfg:4:1: error: unknown key 'options.see_h' in [model]; did you mean 'option.see_h'?");
}

Test(cfg_error, bad_value_type_int) {
  expect_error(TASK "[train]\nsteps = many\n", "t.cfg:4:9: error: train.steps = many: expected a whole number");
}

Test(cfg_error, bad_value_type_fractional_int) {
  expect_error(TASK "[train]\nbatch = 6.5\n", "t.cfg:4:9: error: train.batch = 6.5: expected a whole number");
}

Test(cfg_error, bad_value_type_bool) {
  expect_error("[task]\nname = images\npath = a\nlabels = b\npermute = yes\n",
               "t.cfg:5:11: error: task.permute = yes: expected true or false");
}

Test(cfg_error, bad_value_type_real) {
  expect_error(TASK "[train]\nlr = nan\n", "t.cfg:4:6: error: train.lr = nan: expected a number");
}

Test(cfg_error, out_of_range_open_bound) {
  expect_error(TASK "[train]\nlr = -1\n", "t.cfg:4:6: error: train.lr = -1: out of range (0, inf)");
}

Test(cfg_error, out_of_range_half_open) {
  expect_error(TASK "[train]\nmomentum = 1\n", "t.cfg:4:12: error: train.momentum = 1: out of range [0, 1)");
}

Test(cfg_error, out_of_range_task_key) {
  expect_error("[task]\nname = adding\nlength = 1\n", "t.cfg:3:10: error: task.length = 1: out of range [2, 1000000]");
}

Test(cfg_error, out_of_range_list_element) {
  expect_error(TASK "[train]\nbetas = 0.9, 1.5\n",
               "t.cfg:4:14: error: train.betas = 0.9, 1.5: 1.5 is out of range [0, 1)");
}

Test(cfg_error, list_length) {
  expect_error(TASK "[train]\nbetas = 0.9\n", "t.cfg:4:9: error: train.betas = 0.9: expected 2 numbers, not 1");
}

Test(cfg_error, list_bad_element) {
  expect_error(TASK "[train]\nbetas = 0.9,,0.9\n",
               "t.cfg:4:13: error: train.betas = 0.9,,0.9: expected a comma list of numbers");
}

Test(cfg_error, bad_word_lists_choices) {
  expect_error(TASK "[train]\noptimizer = adamww\n",
               "t.cfg:4:13: error: train.optimizer = adamww: expected one of sgd, adam, adamw; did you mean adamw?");
}

Test(cfg_error, bad_word_without_near_choice) {
  expect_error(TASK "[model]\nnorm = zzzzzz\n",
               "t.cfg:4:8: error: model.norm = zzzzzz: expected one of none, layer, rms, batch");
}

Test(cfg_error, unknown_task_name) {
  Cfg *c = parse("[task]\nname = copyng\n");
  cr_assert_null(c);
  const char *got = captured();
  cr_assert(strncmp(got, "t.cfg:2:8: error: task.name = copyng: unknown task; the tasks are copying,", 73) == 0, "%s",
            got);
  cr_assert_not_null(strstr(got, "did you mean copying?"), "%s", got);
}

Test(cfg_error, duplicate_key_with_note) {
  Cfg *c = parse(TASK "[train]\nlr = 1\nsteps = 3\nlr = 2\n");
  cr_assert_null(c);
  const char *got = captured();
  cr_assert(strncmp(got, "t.cfg:6:1: error: duplicate key 'lr' in [train]\n", 48) == 0, "%s", got);
  cr_assert_not_null(strstr(got, "t.cfg:4:1: note: first set here"), "%s", got);
}

Test(cfg_error, duplicate_section) {
  expect_error(TASK "[train]\n[eval]\n[train]\n", "t.cfg:5:2: error: duplicate section [train]");
}

Test(cfg_error, malformed_missing_equals) {
  expect_error(TASK "[train]\nlr 1\n", "t.cfg:4:4: error: expected '=' after the key 'lr'");
}

Test(cfg_error, malformed_missing_bracket) {
  expect_error(TASK "[train\n", "t.cfg:3:7: error: expected ']' after the section name");
}

Test(cfg_error, malformed_empty_header) {
  expect_error(TASK "[ ]\n", "t.cfg:3:3: error: expected a section name after '['");
}

Test(cfg_error, malformed_text_after_header) {
  expect_error(TASK "[train] x\n", "t.cfg:3:9: error: unexpected text after the section header");
}

Test(cfg_error, malformed_missing_value) {
  expect_error(TASK "[train]\nlr =   # nothing\n", "t.cfg:4:8: error: missing value for the key 'lr'");
}

Test(cfg_error, malformed_key) {
  expect_error(TASK "[model]\noption..x = 1\n", "t.cfg:4:1: error: malformed key 'option..x'");
}

Test(cfg_error, malformed_line) {
  expect_error(TASK "= 3\n", "t.cfg:3:1: error: expected a key, a [section] or a # comment");
}

Test(cfg_error, key_before_any_section) {
  expect_error("lr = 1\n" TASK, "t.cfg:1:1: error: the key 'lr' comes before any [section]");
}

Test(cfg_error, control_character_in_value) {
  expect_error(TASK "[train]\nlr = 1\x01\n", "t.cfg:4:7: error: unexpected control character 0x01 in the value");
}

Test(cfg_error, missing_task_name_at_header) {
  expect_error("[task]\nlength = 3\n", "t.cfg:1:2: error: [task] needs the key 'name': one of copying, "
                                       "selective_copying, adding, temporal_xor, ar2, delay_sum, moving_average, "
                                       "sinmix, mnist1d, images, text, tokens, file");
}

Test(cfg_error, missing_task_section) {
  Cfg *c = parse("[train]\nlr = 1\n");
  cr_assert_null(c);
  cr_assert(strncmp(captured(), "cellc: error: t.cfg: no task: add a [task] section with name = one of copying", 77) ==
                0,
            "%s", captured());
}

Test(cfg_error, required_task_key) {
  expect_error("[task]\nname = images\nlabels = l.idx\n",
               "t.cfg:1:2: error: [task] images needs the key 'path' (IDX images file (magic 0x00000803), e.g. "
               "train-images-idx3-ubyte)");
}

Test(cfg_error, option_value_type) {
  expect_error(TASK "[model]\noption.see_h = maybe\n",
               "t.cfg:4:16: error: model.option.see_h = maybe: expected a number or true/false");
}

Test(cfg_error, dims_value_range) {
  expect_error(TASK "[model]\ndims.N = 0\n", "t.cfg:4:10: error: model.dims.N = 0: out of range [1, 16777216]");
}

Test(cfg_error, unknown_initializer) {
  expect_error(TASK "[model]\ninit.bz = ugj\n",
               "t.cfg:4:11: error: model.init.bz = ugj: unknown initializer 'ugj'; did you mean 'ugi'?");
}

Test(cfg_error, initializer_argument_count) {
  expect_error(TASK "[model]\ninit.bz = gumbel(0)\n",
               "t.cfg:4:11: error: model.init.bz = gumbel(0): gumbel takes 2 arguments, not 1");
}

Test(cfg_error, initializer_unclosed_call) {
  expect_error(TASK "[model]\nlayer.0.init.bz = gumbel(0, (1)\n",
               "t.cfg:4:25: error: model.layer.0.init.bz = gumbel(0, (1): '(' without its ')'");
}

Test(cfg_error, initializer_text_after_call) {
  expect_error(TASK "[model]\ninit.bz = ugi x\n", "t.cfg:4:15: error: model.init.bz = ugi x: unexpected 'x' after "
                                                  "the initializer");
}

Test(cfg_error, layer_index_beyond_layers) {
  expect_error(TASK "[model]\nlayers = 2\nlayer.2.option.lb = 0.5\n",
               "t.cfg:5:7: error: no layer 2: model.layers = 2 (layers 0 to 1)");
}

Test(cfg_error, warmup_fraction_or_whole_steps) {
  expect_error(TASK "[train]\nwarmup = 2.5\n", "t.cfg:4:10: error: train.warmup = 2.5: expected a number of steps (a "
                                               "whole number) or a fraction < 1 of the steps");
}

Test(cfg_error, warmup_beyond_steps) {
  expect_error(TASK "[train]\nsteps = 100\nwarmup = 200\n",
               "t.cfg:5:10: error: train.warmup = 200: more warmup steps than train.steps = 100");
}

Test(cfg_error, bad_tag_name) {
  expect_error(TASK "[optim.9x]\n",
               "t.cfg:3:2: error: bad tag '9x' in [optim.9x]: a tag is a name (letters, digits, _)");
}

Test(cfg_error, first_error_stops) {
  expect_error(TASK "[train]\nlr = -1\nsteps = x\n[bogus]\n", "t.cfg:6:2: error: unknown section [bogus]; the "
                                                              "sections are [task], [model], [train], [optim.TAG], "
                                                              "[eval], [log]");
  expect_error(TASK "[train]\nlr = -1\nsteps = x\n", "t.cfg:4:6: error: train.lr = -1: out of range (0, inf)");
}

Test(cfg_error, error_shows_line_and_caret) {
  Cfg *c = parse(TASK "[train]\nlr = -1\n");
  cr_assert_null(c);
  cr_assert_str_eq(captured(), "t.cfg:4:6: error: train.lr = -1: out of range (0, inf)\n  lr = -1\n       ^~\n");
}

Test(cfg_error, unreadable_file) {
  capture();
  Cfg *c = cfg_load("/nonexistent/task.cfg", NULL, 0);
  cr_assert_null(c);
  cr_assert_str_eq(captured(), "cellc: error: cannot read '/nonexistent/task.cfg': No such file or directory\n");
}

/* ---- Overrides ---- */

Test(cfg_set, overrides_a_file_value) {
  const char *sets[] = {"train.lr=3e-4", "task.length=100"};
  Cfg *c = parse_sets(TASK "[train]\nlr = 1e-3\n", sets, 2);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_real(c, "train.lr"), 3e-4);
  cr_assert_eq(cfg_int(c, "task.length"), 100);
  cr_assert(cfg_is_set(c, "task.length"));
  cfg_free(c);
}

Test(cfg_set, adds_model_entries) {
  const char *sets[] = {"model.option.see_h=true", "model.layer.0.option.lb = 0.5", "model.init.bz=gumbel(0, 1)"};
  Cfg *c = parse_sets(TASK, sets, 3);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_bool(c, "model.option.see_h"), true);
  cr_assert_eq(cfg_real(c, "model.layer.0.option.lb"), 0.5);
  cr_assert_str_eq(cfg_word(c, "model.init.bz"), "gumbel(0, 1)");
  cfg_free(c);
}

Test(cfg_set, adds_an_optim_tag) {
  const char *sets[] = {"optim.recurrent.lr_scale=0.5", "optim.recurrent.weight_decay=0"};
  Cfg *c = parse_sets(TASK "[train]\nweight_decay = 0.1\n", sets, 2);
  cr_assert_not_null(c, "%s", captured());
  const char *const *tags;
  cr_assert_eq(cfg_optim_tags(c, &tags), 1);
  cr_assert_eq(cfg_real(c, "optim.recurrent.lr_scale"), 0.5);
  cr_assert_eq(cfg_real(c, "optim.recurrent.weight_decay"), 0);
  cfg_free(c);
}

Test(cfg_set, last_of_one_key_wins) {
  const char *sets[] = {"train.lr=1", "train.lr=2"};
  Cfg *c = parse_sets(TASK, sets, 2);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_real(c, "train.lr"), 2);
  cfg_free(c);
}

Test(cfg_set, task_name_brings_its_keys) {
  const char *sets[] = {"task.name=adding", "task.length=40"};
  Cfg *c = parse_sets(TASK, sets, 2);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_str_eq(cfg_task(c)->name, "adding");
  cr_assert_eq(cfg_int(c, "task.noise_channels"), 3);
  cfg_free(c);
}

Test(cfg_set, task_from_sets_alone) {
  const char *sets[] = {"task.name=adding", "task.length=40"};
  Cfg *c = parse_sets("[train]\nlr = 0.1\n", sets, 2);
  cr_assert_not_null(c, "%s", captured());
  cr_assert_eq(cfg_int(c, "task.length"), 40);
  cfg_free(c);
}

Test(cfg_set, task_name_rejects_file_keys_of_the_old_task) {
  const char *sets[] = {"task.name=adding"};
  expect_error_sets(TASK "tokens = 5\n", sets, 1,
                    "t.cfg:3:1: error: unknown key 'tokens' in [task] (task adding); the keys are name, length, "
                    "noise_channels");
}

Test(cfg_set, out_of_range_names_the_set) {
  const char *sets[] = {"train.lr=-1"};
  expect_error_sets(TASK, sets, 1, "cellc: error: --set train.lr=-1: out of range (0, inf)");
}

Test(cfg_set, unknown_key_names_the_set) {
  const char *sets[] = {"model.option.see_h=true", "train.lrr=1"};
  expect_error_sets(TASK, sets, 2, "cellc: error: --set train.lrr=1: unknown key 'lrr' in [train]; did you mean 'lr'?");
}

Test(cfg_set, unknown_section_names_the_set) {
  const char *sets[] = {"trian.lr=1"};
  expect_error_sets(TASK, sets, 1, "cellc: error: --set trian.lr=1: unknown section [trian]; did you mean [train]?");
}

Test(cfg_set, malformed_set) {
  const char *sets[] = {"train.lr"};
  expect_error_sets(TASK, sets, 1,
                    "cellc: error: --set train.lr: expected SECTION.KEY=VALUE, e.g. --set train.lr=3e-4");
  const char *nosec[] = {"lr=1"};
  expect_error_sets(TASK, nosec, 1,
                    "cellc: error: --set lr=1: 'lr' names no section: expected SECTION.KEY, e.g. "
                    "train.lr");
  const char *empty[] = {"train.lr="};
  expect_error_sets(TASK, empty, 1, "cellc: error: --set train.lr=: missing value");
  const char *hash[] = {"task.name=a#b"};
  expect_error_sets(TASK, hash, 1, "cellc: error: --set task.name=a#b: a value cannot hold '#' or a control character");
}

Test(cfg_set, layer_beyond_layers_names_the_set) {
  const char *sets[] = {"model.layers=1", "model.layer.1.option.lb=0.5"};
  expect_error_sets(TASK, sets, 2,
                    "cellc: error: --set model.layer.1.option.lb=0.5: no layer 1: model.layers = 1 "
                    "(layers 0 to 0)");
}

Test(cfg_set, on_a_parsed_cfg) {
  Cfg *c = parse(TASK);
  cr_assert_not_null(c);
  cr_assert_eq(cfg_set(c, "train.lr=0.01"), 0);
  cr_assert_eq(cfg_real(c, "train.lr"), 0.01);
  cr_assert_eq(cfg_set(c, "task.name=adding"), 0);
  cr_assert_eq(cfg_int(c, "task.length"), 80);
  cfg_free(c);
}

Test(cfg_set, failure_leaves_the_cfg_unchanged) {
  Cfg *c = parse(TASK "[train]\nlr = 0.5\n");
  cr_assert_not_null(c);
  cr_assert_eq(cfg_set(c, "train.lr=-2"), -1);
  cr_assert_eq(cfg_set(c, "model.option.x=y"), -1);
  cr_assert_eq(cfg_real(c, "train.lr"), 0.5);
  const CfgEntry *e;
  cr_assert_eq(cfg_entries(c, &e), 0);
  cr_assert_eq(cfg_set(c, "train.lr=0.25"), 0);
  cr_assert_eq(cfg_real(c, "train.lr"), 0.25);
  cfg_free(c);
}

/* ---- Errors the caller reports about keys ---- */

Test(cfg_caller_error, located_at_the_key) {
  Cfg *c = parse(spec_example);
  cr_assert_not_null(c);
  cfg_error(c, "model.layer.0.option.lb", false, "the cell mgu has no option 'lb'");
  cr_assert(strncmp(captured(), "t.cfg:19:1: error: the cell mgu has no option 'lb'\n", 51) == 0, "%s", captured());
  cfg_free(c);
}

Test(cfg_caller_error, located_at_a_section) {
  Cfg *c = parse(spec_example);
  cr_assert_not_null(c);
  cfg_error(c, "optim.recurrent", false, "no param carries the tag 'recurrent'");
  cr_assert(strncmp(captured(), "t.cfg:40:2: error: no param carries the tag 'recurrent'\n", 56) == 0, "%s",
            captured());
  cfg_free(c);
}

Test(cfg_caller_error, naming_a_set_or_a_default) {
  const char *sets[] = {"model.hidden=7"};
  Cfg *c = parse_sets(TASK, sets, 1);
  cr_assert_not_null(c);
  cfg_error(c, "model.hidden", true, "too small");
  cfg_error(c, "model.width", true, "too small");
  cr_assert_str_eq(captured(), "cellc: error: --set model.hidden=7: too small\n"
                               "cellc: error: model.width = 128 (default): too small\n");
  cfg_free(c);
}

/* ---- The writer ---- */

/* Every key of both configurations holds the same text. */
static void expect_same(const Cfg *a, const Cfg *b) {
  const char *secs[] = {"model", "train", "eval", "log", "optim"};
  for (int s = 0; s < 5; s++) {
    const CfgKey *keys;
    int n = cfg_schema(secs[s], &keys);
    for (int i = 0; i < n; i++) {
      char key[128];
      snprintf(key, sizeof key, "%s.%s", s == 4 ? "optim.recurrent" : secs[s], keys[i].name);
      const char *ta = cfg_text(a, key), *tb = cfg_text(b, key);
      cr_assert((!ta && !tb) || (ta && tb && strcmp(ta, tb) == 0), "%s: %s vs %s", key, ta, tb);
    }
  }
  const TaskDef *def = cfg_task(a);
  cr_assert_eq(def, cfg_task(b));
  double na[16], nb[16];
  const char *sa[16], *sb[16];
  cfg_task_values(a, na, sa);
  cfg_task_values(b, nb, sb);
  for (int i = 0; i < def->nkeys; i++) {
    cr_assert((isnan(na[i]) && isnan(nb[i])) || na[i] == nb[i], "%s", def->keys[i].name);
    cr_assert((!sa[i] && !sb[i]) || (sa[i] && sb[i] && strcmp(sa[i], sb[i]) == 0), "%s", def->keys[i].name);
  }
  const CfgEntry *ea, *eb;
  int n = cfg_entries(a, &ea);
  cr_assert_eq(n, cfg_entries(b, &eb));
  for (int i = 0; i < n; i++) {
    cr_assert_str_eq(ea[i].key, eb[i].key);
    cr_assert_str_eq(ea[i].text, eb[i].text);
    cr_assert_eq(ea[i].num, eb[i].num);
  }
}

Test(cfg_write, round_trip_of_the_spec_example) {
  Cfg *a = parse(spec_example);
  cr_assert_not_null(a);
  char *text = cfg_write_string(a);
  Cfg *b = parse(text);
  cr_assert_not_null(b, "%s\n%s", captured(), text);
  expect_same(a, b);
  char *again = cfg_write_string(b);
  cr_assert_str_eq(text, again);
  free(text);
  free(again);
  cfg_free(a);
  cfg_free(b);
}

Test(cfg_write, round_trip_writes_every_default) {
  const char *sets[] = {"train.betas=0.9,0.98", "optim.recurrent.lr_scale=0.1"};
  Cfg *a = parse_sets("[task]\nname = images\npath = x.idx\nlabels = y.idx\n", sets, 2);
  cr_assert_not_null(a, "%s", captured());
  char *text = cfg_write_string(a);
  /* Every default appears, the unset keys as comments. */
  cr_assert_not_null(strstr(text, "\nsteps        = 50000"), "%s", text);
  cr_assert_not_null(strstr(text, "\npermute     = false"), "%s", text);
  cr_assert_not_null(strstr(text, "\n# cell: unset"), "%s", text);
  cr_assert_not_null(strstr(text, "\n# test_path: unset"), "%s", text);
  cr_assert_not_null(strstr(text, "[optim.recurrent]\nlr_scale     = 0.1"), "%s", text);
  cr_assert_not_null(strstr(text, "\nbetas        = 0.9,0.98"), "%s", text);
  Cfg *b = parse(text);
  cr_assert_not_null(b, "%s\n%s", captured(), text);
  expect_same(a, b);
  cr_assert_not(cfg_is_set(b, "model.cell"));
  free(text);
  cfg_free(a);
  cfg_free(b);
}

/* ---- Garbage ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

Test(cfg_garbage, random_bytes_never_crash) {
  FILE *null = fopen("/dev/null", "w");
  diag_out = null;
  char buf[512];
  for (int it = 0; it < 4000; it++) {
    size_t n = next() % sizeof buf;
    for (size_t i = 0; i < n; i++)
      buf[i] = (char)(next() & 0xff);
    Src src = {"g.cfg", buf, n};
    Cfg *c = cfg_parse(&src, NULL, 0);
    cfg_free(c);
  }
  fclose(null);
  diag_out = NULL;
}

Test(cfg_garbage, random_token_soup_never_crashes) {
  static const char *const toks[] = {
      "[",
      "]",
      "=",
      "#",
      "\n",
      " ",
      ",",
      "(",
      ")",
      ".",
      "task",
      "model",
      "train",
      "optim.r",
      "eval",
      "log",
      "name",
      "copying",
      "adding",
      "lr",
      "steps",
      "1e-3",
      "-1",
      "0.5",
      "true",
      "layer.0",
      "option.x",
      "init.bz",
      "gumbel",
      "ugi",
      "betas",
      "9",
      "warmup",
      "layers",
      "dims.N",
      "\t",
      "\r",
      "\x01",
      "\xff",
      "images",
      "path",
      "1e400",
      "nan",
      "schedule",
      "cosine",
      "0,0",
      "layer.7.init.w",
      "=ugi(",
      "optim",
  };
  FILE *null = fopen("/dev/null", "w");
  diag_out = null;
  char buf[1024];
  int accepted = 0;
  for (int it = 0; it < 3000; it++) {
    size_t n = 0;
    if (next() % 2)
      n = (size_t)snprintf(buf, sizeof buf, "[task]\nname = copying\n");
    int ntok = (int)(next() % 60);
    for (int t = 0; t < ntok; t++) {
      const char *tok = toks[next() % (sizeof toks / sizeof toks[0])];
      size_t l = strlen(tok);
      if (n + l >= sizeof buf)
        break;
      memcpy(buf + n, tok, l);
      n += l;
    }
    Src src = {"g.cfg", buf, n};
    const char *sets[] = {"train.lr=1e-3"};
    Cfg *c = cfg_parse(&src, sets, (int)(next() % 2));
    if (c) {
      accepted++;
      char *out = cfg_write_string(c);
      Src wsrc = {"w.cfg", out, strlen(out)};
      Cfg *back = cfg_parse(&wsrc, NULL, 0);
      cr_assert_not_null(back, "written text does not parse back:\n%s", out);
      cfg_free(back);
      free(out);
    }
    cfg_free(c);
  }
  cr_assert_gt(accepted, 0);
  fclose(null);
  diag_out = NULL;
}

/* train.device's choices are the back ends that train, read from the one list of back ends
 * (pipeline.h): each of them loads, every other back end is refused naming the list, and the
 * written configuration documents the list. */
Test(cfg_device, choices_from_the_back_end_list) {
  char names[256];
  backend_join(names, sizeof names, ", ", true);
  int trainers = 0;
  for (int i = 0; i < backend_count(); i++) {
    const Backend *be = backend_at(i);
    char *set = xasprintf("train.device=%s", be->name);
    const char *sets[] = {set};
    Cfg *c = parse_sets(TASK, sets, 1);
    if (backend_trains(be)) {
      trainers++;
      cr_assert_not_null(c, "%s: %s", set, captured());
      cr_assert_str_eq(cfg_word(c, "train.device"), be->name);
      cfg_free(c);
    } else {
      cr_assert_null(c, "%s loads", set);
      char *want = xasprintf("expected one of %s", names);
      cr_assert(strstr(captured(), want) != NULL, "%s: %s", want, captured());
      free(want);
    }
    free(set);
  }
  cr_assert_geq(trainers, 1);
  Cfg *c = parse(TASK);
  cr_assert_not_null(c);
  char *text = cfg_write_string(c);
  char doc[256];
  backend_join(doc, sizeof doc, " | ", true);
  cr_assert(strstr(text, doc) != NULL, "'%s' not in\n%s", doc, text);
  cr_assert(strstr(text, "cpu | cuda | cuda-emu") != NULL, "%s", text); /* as written before the list */
  free(text);
  cfg_free(c);
}
