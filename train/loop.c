/* loop.c: the training loop (batches, optimizer, schedule, evaluation, checkpoints, metrics,
 * progress, Ctrl-C and NaN handling) and the evaluation of a split. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "train_impl.h"

/* ---- metrics and progress ---- */

static void json_num(FILE *f, const char *key, double v, bool last) {
  if (isfinite(v)) fprintf(f, "\"%s\":%.9g%s", key, v, last ? "" : ",");
  else fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

static void metric(Run *r, const char *split, double loss, double acc, double lr, double gnorm, double tps) {
  if (!r->metrics) return;
  double v[RUN_METRIC_FIELDS] = {loss, acc, lr, gnorm, tps, r->elapsed0 + run_now() - r->t0};
  fprintf(r->metrics, "{\"step\":%lld,\"split\":\"%s\",", (long long)r->step, split);
  for (int i = 0; i < RUN_METRIC_FIELDS; i++) json_num(r->metrics, run_metric_fields[i], v[i], i == RUN_METRIC_FIELDS - 1);
  fprintf(r->metrics, "}\n");
  fflush(r->metrics);
  if (r->csv) run_csv_row(r->csv, r->step, split, v);
}

static void fmt_time(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s / 60 % 60);
}

/* A line above the progress bar (or a plain line off a terminal). */
static void say(Run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(Run *r, const char *fmt, ...) {
  if (r->bar) fputs("\r\033[K", stdout);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

static void progress(Run *r, double loss, double acc, double rate) {
  int width = 24, done = (int)((double)width * (double)r->step / (double)r->steps);
  char bar[64], eta[32];
  for (int i = 0; i < width; i++) bar[i] = i < done ? '#' : '.';
  bar[width] = 0;
  fmt_time(eta, sizeof eta, rate > 0 ? (double)(r->steps - r->step) / rate : NAN);
  printf("\r\033[K[%s] step %lld/%lld loss %.4f", bar, (long long)r->step, (long long)r->steps, loss);
  if (isfinite(acc)) printf(" acc %.3f", acc);
  printf(" | %.1f steps/s ETA %s", rate, eta);
  fflush(stdout);
}

/* ---- evaluation ---- */

/* The mean loss and accuracy over a split: `batches` batches of a generated task, or the whole
 * of a fixed split (its last batch counting only the sequences the split holds). Each rank of a
 * data-parallel run evaluates its share of every batch; the sums are added across the ranks. */
EvalResult run_evaluate(Run *r, TaskSplit split, int64_t batches) {
  int64_t size = r->shape.split_size[split], n = batches;
  if (size > 0) n = (size + r->B - 1) / r->B;
  double sum[3] = {0, 0, 0}; /* loss * counted, counted, correct */
  int first = r->rank * r->Bl, bad_rows = 0;
  int64_t bad = -1;
  for (int64_t i = 0; i < n; i++) {
    int rows = size > 0 && (i + 1) * r->B > size ? (int)(size - i * r->B) : r->B;
    int mine = rows - first < r->Bl ? rows - first : r->Bl; /* this rank's rows that count */
    if (mine <= 0) continue;
    TaskBatch b = {0};
    task_batch_part(r->task, split, i, r->B, first, r->Bl, &b);
    ModelLoss l = model_batch(r->model, &b, false, 0, mine);
    task_batch_free(&b);
    if (bad < 0 && !isfinite(l.loss)) bad = i, bad_rows = mine;
    if (l.counted) sum[0] += l.loss * (double)l.counted;
    sum[1] += (double)l.counted, sum[2] += (double)l.correct;
  }
  dist_allreduce_sum(sum, 3, DIST_F64);
  bool classify = r->shape.loss == TASK_LOSS_CE;
  EvalResult e = {sum[1] > 0 ? sum[0] / sum[1] : NAN, classify && sum[1] > 0 ? sum[2] / sum[1] : NAN, bad, bad_rows};
  return e;
}

/* After a step stopped on a value that is not finite: " The first value that is not finite: ...",
 * from batch b run as the step ran it (model_find_nonfinite), or "" where this rank's share of the
 * batch was finite throughout. */
static void nonfinite_where(Run *r, const TaskBatch *b, bool training, int64_t step, int rows, char *buf, size_t n) {
  char what[512];
  if (model_find_nonfinite(r->model, b, training, step, rows, what, sizeof what))
    snprintf(buf, n, " The first value that is not finite: %s.", what);
  else snprintf(buf, n, "%s", "");
}

void run_print_final(Run *r, EvalResult e) {
  if (r->bar) fputs("\r\033[K", stdout);
  printf("final: step=%lld loss=%.6g accuracy=%.6g\n", (long long)r->step, e.loss, e.accuracy);
  fflush(stdout);
}

/* ---- training ---- */

/* Ctrl-C (SIGINT, SIGTERM): the checkpoint of the step reached, then status 130 (3 when it
 * cannot be written). */
static int stop_interrupted(Run *r, const char *ckpt) {
  say(r, "interrupted at step %lld: writing %s\n", (long long)r->step, ckpt);
  return run_checkpoint(r, ckpt) < 0 ? 3 : 130;
}

/* Double buffering on a device: the next training batch is generated on a host thread while the
 * device runs the current step (the task is touched by one thread at a time: the thread is joined
 * before anything else reads it). On the CPU the step's own threads use every core: no prefetch. */
typedef struct Prefetch {
  Run *r;
  bool on, running, have;
  int64_t index;
  TaskBatch b;
  pthread_t th;
} Prefetch;

/* Training batch `index`: this rank's rows of the global batch (all of it in one process). */
static void train_batch(Run *r, int64_t index, TaskBatch *b) {
  task_batch_part(r->task, TASK_TRAIN, index, r->B, r->rank * r->Bl, r->Bl, b);
}

static void *prefetch_main(void *arg) {
  Prefetch *pf = arg;
  train_batch(pf->r, pf->index, &pf->b);
  return NULL;
}

static void prefetch_wait(Prefetch *pf) {
  if (!pf->running) return;
  pthread_join(pf->th, NULL);
  pf->running = false, pf->have = true;
}

/* Batch r->step into *b (the prefetched one when there is one), and the next one started. */
static void next_batch(Run *r, Prefetch *pf, TaskBatch *b) {
  prefetch_wait(pf);
  if (pf->have && pf->index == r->step) *b = pf->b;
  else {
    if (pf->have) task_batch_free(&pf->b);
    train_batch(r, r->step, b);
  }
  pf->have = false;
  if (!pf->on || r->step + 1 >= r->steps) return;
  pf->index = r->step + 1;
  pf->running = pthread_create(&pf->th, NULL, prefetch_main, pf) == 0;
  if (!pf->running) train_batch(r, pf->index, &pf->b), pf->have = true;
}

static void prefetch_end(Prefetch *pf) {
  prefetch_wait(pf);
  if (pf->have) task_batch_free(&pf->b);
  pf->have = false;
}

/* train.keep = best: whether a validation result beats the best so far (none yet: best_loss NaN).
 * The rule (docs/training.md): the highest accuracy where the task classifies, an equal accuracy
 * going to the lower loss; the lowest loss otherwise. On a full tie the earlier step stays. */
static bool better_valid(bool classify, EvalResult e, double best_loss, double best_acc) {
  if (isnan(best_loss)) return true;
  if (classify && e.accuracy != best_acc) return e.accuracy > best_acc;
  return e.loss < best_loss;
}

int train_loop(Run *r) {
  Prefetch pf = {.r = r, .on = !device_is_host(model_device(r->model))};
  char *ckpt = xasprintf("%s/checkpoint.safetensors", r->dir);
  char *best = xasprintf("%s/best.safetensors", r->dir);
  bool keep_best = !strcmp(cfg_word(r->cfg, "train.keep"), "best");
  double best_loss = NAN, best_acc = NAN;
  if (keep_best && r->a.resume) run_best_so_far(r, &best_loss, &best_acc);
  int64_t log_every = cfg_int(r->cfg, "log.every"), eval_every = cfg_int(r->cfg, "eval.every");
  int64_t eval_batches = cfg_int(r->cfg, "eval.batches");
  double tokens = (double)r->B * (double)r->shape.length;
  double int_loss = 0, int_gnorm = 0, int_time = 0, last_bar = 0;
  int64_t int_counted = 0, int_correct = 0, int_steps = 0;
  bool classify = r->shape.loss == TASK_LOSS_CE, have_ckpt = r->a.resume;
  int status = 0;
  size_t setup_bytes = memuse_in_use();
  while (r->step < r->steps) {
    if (r->world == 1 && run_interrupted) {
      status = stop_interrupted(r, ckpt);
      break;
    }
    double t = run_now();
    TaskBatch b = {0};
    next_batch(r, &pf, &b);
    ModelLoss l = model_batch(r->model, &b, true, r->step, r->Bl);
    if (r->probe.update && ((r->step + 1) % log_every == 0 || r->step + 1 == r->steps))
      r->probe.update(r->probe.ctx, r->model, r->Bl);
    /* several ranks: Ctrl-C on any of them stops all at the same step, before its update */
    if (r->world > 1 && run_average_gradients(r, &l)) {
      task_batch_free(&b);
      prefetch_wait(&pf);
      status = stop_interrupted(r, ckpt);
      break;
    }
    OptApply apply = device_opt_apply(r->ops);
    double gnorm = opt_clip_on(r->opt, cfg_real(r->cfg, "train.clip"), &apply);
    prefetch_wait(&pf); /* the task is ours again (evaluation reads it) */
    if (!isfinite(l.loss) || !isfinite(gnorm)) {
      char where[600] = "";
      if (r->rank == 0) nonfinite_where(r, &b, true, r->step, r->Bl, where, sizeof where);
      say(r, "step %lld: the %s is %s; stopping.%s %s%s\n", (long long)r->step + 1, isfinite(l.loss) ? "gradient norm" : "loss",
          isnan(isfinite(l.loss) ? gnorm : l.loss) ? "NaN" : "infinite", where,
          have_ckpt ? "The last good checkpoint is " : "No checkpoint was written yet", have_ckpt ? ckpt : "");
      task_batch_free(&b);
      status = 3;
      break;
    }
    task_batch_free(&b);
    double lr = opt_lr_at(&r->sched, r->step);
    opt_step_on(r->opt, lr, r->state, &apply);
    r->step++;
    double dt = run_now() - t;
    int_time += dt, int_steps++;
    int_loss += l.loss, int_gnorm += gnorm;
    int_counted += l.counted, int_correct += l.correct;
    double acc = classify && int_counted ? (double)int_correct / (double)int_counted : NAN;
    if (r->bar && (run_now() - last_bar > 0.1 || r->step == r->steps)) {
      progress(r, int_loss / (double)int_steps, acc, (double)int_steps / int_time);
      last_bar = run_now();
    }
    if (r->step % log_every == 0 || r->step == r->steps) {
      double tps = tokens * (double)int_steps / int_time;
      metric(r, "train", int_loss / (double)int_steps, acc, lr, int_gnorm / (double)int_steps, tps);
      if (r->lines) {
        printf("step %lld/%lld loss %.4f", (long long)r->step, (long long)r->steps, int_loss / (double)int_steps);
        if (classify) printf(" acc %.3f", acc);
        printf(" lr %.3g grad_norm %.3g | %.0f tokens/s\n", lr, int_gnorm / (double)int_steps, tps);
        fflush(stdout);
      }
      int_loss = int_gnorm = int_time = 0;
      int_counted = int_correct = int_steps = 0;
    }
    if (r->step % eval_every == 0 || r->step == r->steps) {
      EvalResult e = run_evaluate(r, TASK_VALID, eval_batches);
      metric(r, "valid", e.loss, e.accuracy, NAN, NAN, NAN);
      if (!isfinite(e.loss)) {
        /* an update can blow the params up while the training loss and gradient were finite:
         * keep the last good checkpoint rather than overwrite it with this model */
        char where[600] = "";
        if (r->rank == 0 && e.bad >= 0) {
          TaskBatch b = {0};
          task_batch_part(r->task, TASK_VALID, e.bad, r->B, r->rank * r->Bl, r->Bl, &b);
          nonfinite_where(r, &b, false, 0, e.bad_rows, where, sizeof where);
          task_batch_free(&b);
        }
        say(r, "step %lld: the valid loss is %s; stopping.%s %s%s\n", (long long)r->step, isnan(e.loss) ? "NaN" : "infinite",
            where, have_ckpt ? "The last good checkpoint is " : "No checkpoint was written yet", have_ckpt ? ckpt : "");
        status = 3;
        break;
      }
      bool shown = r->bar || r->lines; /* --progress none: metrics.jsonl alone has them */
      if (shown && classify) say(r, "step %lld valid loss %.4f accuracy %.4f\n", (long long)r->step, e.loss, e.accuracy);
      else if (shown) say(r, "step %lld valid loss %.6g\n", (long long)r->step, e.loss);
      /* the best before the last: a crash between the two leaves a last checkpoint no newer than
       * the best, and the resumed run evaluates the step again */
      if (keep_best && better_valid(classify, e, best_loss, best_acc)) {
        if (run_checkpoint(r, best) < 0) {
          status = 3;
          break;
        }
        best_loss = e.loss, best_acc = e.accuracy;
      }
      if (run_checkpoint(r, ckpt) < 0) {
        status = 3;
        break;
      }
      have_ckpt = true;
    }
  }
  prefetch_end(&pf);
  free(ckpt), free(best);
  /* the allocator's high-water mark against what the model holds throughout: the difference is
   * the cell layers' workspaces and chunk buffers (cellc check's figures) */
  size_t peak = memuse_peak(), work = model_work_bytes(r->model);
  char figure[96] = "";
  if (work) snprintf(figure, sizeof figure, " (cellc check's figure: %.1f MB)", (double)work / 1e6);
  say(r, "memory: %.1f MB of data buffers at peak: %.1f MB held throughout (params, optimizer state, activations), "
      "%.1f MB more in the cell layers' runs%s\n", (double)peak / 1e6, (double)setup_bytes / 1e6,
      (double)(peak - setup_bytes) / 1e6, figure);
  return status;
}

void run_finish(Run *r) {
  EvalResult e = run_evaluate(r, TASK_TEST, cfg_int(r->cfg, "eval.batches"));
  metric(r, "test", e.loss, e.accuracy, NAN, NAN, NAN);
  run_print_final(r, e);
  if (strcmp(cfg_word(r->cfg, "train.keep"), "best")) return;
  /* the test split on the best checkpoint too (split "test_best", at the best's step): what a study
   * that keeps the best validation checkpoint reports. The model holds the best's params after. */
  char *best = xasprintf("%s/best.safetensors", r->dir);
  int rc = run_rank0_status(r->rank == 0 ? checkpoint_read(r, best, false) : 0);
  free(best);
  if (rc) return;
  run_share_state(r);
  e = run_evaluate(r, TASK_TEST, cfg_int(r->cfg, "eval.batches"));
  metric(r, "test_best", e.loss, e.accuracy, NAN, NAN, NAN);
  printf("best: step=%lld loss=%.6g accuracy=%.6g\n", (long long)r->step, e.loss, e.accuracy);
  fflush(stdout);
}
