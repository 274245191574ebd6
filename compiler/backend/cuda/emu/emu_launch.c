/* emu_launch.c: emulated kernel launches. The blocks of the grid run one after another;
 * within a block every thread is a fiber (a minimal context switch on x86-64, ucontext
 * elsewhere) and a scheduler runs them in turn:
 * __syncthreads and the warp operations are switches back to it, and it lets a barrier or
 * a warp go on once every thread concerned has arrived, or reports the deadlock. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "support.h"
#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_STACK (512 * 1024)
#else
#define EMU_ASAN 0
#define EMU_STACK (256 * 1024)
#endif

/* A fiber's saved context and the switch between two. */
#if defined(__x86_64__) && !defined(CELLC_EMU_UCONTEXT)
/* Callee-saved registers pushed on the stack being left, its stack pointer stored in *from,
 * then the same in reverse from the stack of to. MXCSR and the x87 control word too. */
__asm__(".text\n"
        ".globl cellc_emu_switch\n"
        ".hidden cellc_emu_switch\n"
        ".type cellc_emu_switch, @function\n"
        "cellc_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cellc_emu_switch, .-cellc_emu_switch\n");
void cellc_emu_switch(void **from_sp, void *to_sp);

typedef struct Ctx {
  void *sp;
} Ctx;

/* A fresh stack that the switch "returns" into entry with: the saved registers (zero), the
 * default MXCSR (IEEE denormals, as a GPU without -ftz) and x87 control word, entry's
 * address, then a null return address for backtraces; entry must never return. */
static void ctx_init(Ctx *c, char *stack, size_t size, void (*entry)(void)) {
  uint64_t *top = (uint64_t *)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
  uint64_t *sp = top - 9;
  memset(sp, 0, 9 * sizeof *sp);
  sp[0] = 0x1F80 | (uint64_t)0x037F << 32;
  sp[7] = (uint64_t)(uintptr_t)entry;
  c->sp = sp;
}

static void ctx_switch(Ctx *from, Ctx *to) {
  cellc_emu_switch(&from->sp, to->sp);
}
#else
typedef struct Ctx {
  ucontext_t uc;
} Ctx;

static void ctx_init(Ctx *c, char *stack, size_t size, void (*entry)(void)) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = NULL;
  makecontext(&c->uc, entry, 0);
}

static void ctx_switch(Ctx *from, Ctx *to) {
  swapcontext(&from->uc, &to->uc);
}
#endif

typedef enum { F_READY, F_BARRIER, F_WARP, F_DONE } FiberState;

typedef struct Fiber {
  Ctx ctx;
  char *stack;
  void *fake_stack; /* ASan's, while switched out */
  FiberState state;
  CellcEmuDim tid;
  int lane;
  /* A pending warp operation and its result. */
  int op, arg, width;
  uint32_t mask, value, result;
} Fiber;

/* The block being run (one at a time). */
static struct {
  const EmuKernel *kernel;
  CellcEmuCtx *kctx;
  void **params;
  Fiber *fibers;
  int n;
  Fiber *cur;
  Ctx sched;
  void *sched_fake_stack;
  const void *sched_bottom;
  size_t sched_size;
  char *failure; /* why the launch fails (a trap), malloc'd */
} B;

/* Fiber stacks, kept between launches, with a guard page below each. */
static char *stacks;
static int n_stacks;

static size_t stack_stride(void) {
  return EMU_STACK + 4096;
}

static bool reserve_stacks(int n) {
  if (n <= n_stacks) return true;
  if (stacks) munmap(stacks, stack_stride() * (size_t)n_stacks);
  n_stacks = 0;
  stacks = mmap(NULL, stack_stride() * (size_t)n, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) {
    stacks = NULL;
    return false;
  }
  for (int i = 0; i < n; i++) mprotect(stacks + stack_stride() * (size_t)i, 4096, PROT_NONE);
  n_stacks = n;
  return true;
}

void emu_launch_release(void) {
  if (stacks) munmap(stacks, stack_stride() * (size_t)n_stacks);
  stacks = NULL;
  n_stacks = 0;
}

/* Switches, told to ASan so it follows the stacks. */
static void to_fiber(Fiber *f) {
  B.cur = f;
  B.kctx->thread_idx = f->tid;
#if EMU_ASAN
  __sanitizer_start_switch_fiber(&B.sched_fake_stack, f->stack, EMU_STACK);
#endif
  ctx_switch(&B.sched, &f->ctx);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(B.sched_fake_stack, NULL, NULL);
#endif
}

static void to_scheduler(Fiber *f, bool dying) {
#if EMU_ASAN
  __sanitizer_start_switch_fiber(dying ? NULL : &f->fake_stack, B.sched_bottom, B.sched_size);
#else
  (void)dying;
#endif
  ctx_switch(&f->ctx, &B.sched);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &B.sched_bottom, &B.sched_size);
#endif
}

static void fiber_main(void) {
  Fiber *f = B.cur;
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(NULL, &B.sched_bottom, &B.sched_size);
#endif
  B.kernel->entry(B.params);
  f->state = F_DONE;
  to_scheduler(f, true);
}

/* The kernel's calls into the emulator (through its CellcEmuCtx). */
static void cb_syncthreads(void) {
  Fiber *f = B.cur;
  f->state = F_BARRIER;
  to_scheduler(f, false);
}

static uint32_t lanes_alive(const Fiber *f);

static uint32_t cb_warp_op(int op, uint32_t mask, uint32_t value, int arg, int width) {
  Fiber *f = B.cur;
  if (op == CELLC_WARP_ACTIVE) return lanes_alive(f);
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->arg = arg;
  f->width = width >= 1 && width <= 32 && (width & (width - 1)) == 0 ? width : 32;
  f->state = F_WARP;
  to_scheduler(f, false);
  return f->result;
}

static void cb_trap(const char *what) {
  Fiber *f = B.cur;
  if (!B.failure)
    B.failure = xasprintf("%s in thread (%u,%u,%u) of block (%u,%u,%u)", what, f->tid.x, f->tid.y,
                          f->tid.z, B.kctx->block_idx.x, B.kctx->block_idx.y, B.kctx->block_idx.z);
  f->state = F_DONE;
  to_scheduler(f, true);
}

/* Warps: lanes [32w, 32w + 32) of the block's linear thread order. */
static Fiber *warp_base(const Fiber *f) {
  return B.fibers + (f - B.fibers) / EMU_WARP * EMU_WARP;
}

static int warp_size(const Fiber *base) {
  int left = B.n - (int)(base - B.fibers);
  return left < EMU_WARP ? left : EMU_WARP;
}

static uint32_t lanes_alive(const Fiber *f) {
  Fiber *w = warp_base(f);
  uint32_t m = 0;
  for (int i = 0; i < warp_size(w); i++)
    if (w[i].state != F_DONE) m |= 1u << i;
  return m;
}

/* The lane whose value lane l reads, or l itself when out of its segment. */
static int source_lane(const Fiber *f) {
  int l = f->lane, w = f->width, base = l & ~(w - 1);
  switch (f->op) {
  case CELLC_WARP_IDX: return base + (f->arg & (w - 1));
  case CELLC_WARP_UP: return l - f->arg >= base ? l - f->arg : l;
  case CELLC_WARP_DOWN: return l + f->arg < base + w ? l + f->arg : l;
  case CELLC_WARP_XOR: return (l ^ f->arg) < base + w ? l ^ f->arg : l;
  default: return l;
  }
}

/* Every waiting lane of the warp gets its result; the warp goes on. */
static void finish_warp(Fiber *w, int size, uint32_t waiting) {
  uint32_t ballot = 0;
  for (int i = 0; i < size; i++)
    if ((waiting >> i & 1) && w[i].value) ballot |= 1u << i;
  for (int i = 0; i < size; i++) {
    if (!(waiting >> i & 1)) continue;
    Fiber *f = &w[i];
    int src = source_lane(f);
    if (f->op == CELLC_WARP_BALLOT) f->result = ballot & f->mask;
    else if (f->op == CELLC_WARP_SYNC) f->result = 0;
    else f->result = src >= 0 && src < size && (waiting >> src & 1) ? w[src].value : f->value;
    f->state = F_READY;
  }
}

/* Release each warp whose lanes named by the mask are all waiting in a warp operation. */
static bool release_warps(void) {
  bool any = false;
  for (int b = 0; b < B.n; b += EMU_WARP) {
    Fiber *w = &B.fibers[b];
    int size = warp_size(w);
    uint32_t waiting = 0, needed = 0, exists = size == 32 ? ~0u : (1u << size) - 1;
    for (int i = 0; i < size; i++)
      if (w[i].state == F_WARP) waiting |= 1u << i, needed |= w[i].mask;
    needed &= exists;
    if (waiting && (needed & ~waiting) == 0) {
      finish_warp(w, size, waiting);
      any = true;
    }
  }
  return any;
}

static const char *state_name(FiberState s) {
  return s == F_BARRIER ? "__syncthreads" : s == F_WARP ? "a warp operation" : s == F_DONE ? "exit" : "running";
}

/* Nothing can go on: say who waits where. */
static void report_deadlock(void) {
  int at[4] = {0};
  const Fiber *done = NULL, *wait = NULL;
  for (int i = 0; i < B.n; i++) {
    const Fiber *f = &B.fibers[i];
    at[f->state]++;
    if (f->state == F_DONE && !done) done = f;
    if (f->state != F_DONE && !wait) wait = f;
  }
  char exited[96] = "";
  if (done)
    snprintf(exited, sizeof exited, " while thread (%u,%u,%u) has exited", done->tid.x, done->tid.y,
             done->tid.z);
  const CellcEmuDim *b = &B.kctx->block_idx;
  emu_set_detail("kernel '%s': deadlock in block (%u,%u,%u): %d threads wait at __syncthreads, "
                 "%d in a warp operation, %d have exited; thread (%u,%u,%u) waits at %s%s "
                 "(a barrier or warp operation that not every thread reaches hangs on a GPU)",
                 B.kernel->name, b->x, b->y, b->z, at[F_BARRIER], at[F_WARP], at[F_DONE],
                 wait->tid.x, wait->tid.y, wait->tid.z, state_name(wait->state), exited);
}

/* Every thread of the block at the barrier: all go on. */
static bool release_barrier(void) {
  for (int i = 0; i < B.n; i++)
    if (B.fibers[i].state != F_BARRIER) return false;
  for (int i = 0; i < B.n; i++) B.fibers[i].state = F_READY;
  return true;
}

static void start_fiber(Fiber *f, int i) {
  const CellcEmuDim *d = &B.kctx->block_dim;
  f->tid = (CellcEmuDim){(unsigned)i % d->x, (unsigned)i / d->x % d->y, (unsigned)i / (d->x * d->y)};
  f->lane = i % EMU_WARP;
  f->state = F_READY;
  f->stack = stacks + stack_stride() * (size_t)i + 4096;
  f->fake_stack = NULL;
  ctx_init(&f->ctx, f->stack, EMU_STACK, fiber_main);
}

/* Run one block to its end. 0, or -1 with the detail set. */
static int run_block(void) {
  for (int i = 0; i < B.n; i++) start_fiber(&B.fibers[i], i);
  for (;;) {
    bool ran = false;
    for (int i = 0; i < B.n; i++) {
      if (B.fibers[i].state != F_READY) continue;
      to_fiber(&B.fibers[i]);
      ran = true;
      if (B.failure) {
        emu_set_detail("kernel '%s': %s", B.kernel->name, B.failure);
        return -1;
      }
    }
    if (ran) continue;
    int done = 0;
    for (int i = 0; i < B.n; i++) done += B.fibers[i].state == F_DONE;
    if (done == B.n) return 0;
    if (release_warps() || release_barrier()) continue;
    report_deadlock();
    return -1;
  }
}

/* Shared memory holds garbage on a GPU: 0xff bytes (NaN floats, -1 ints) here, before
 * each block, so a kernel that reads before it writes shows it. */
static void poison_shared(const EmuModule *m, void *dynamic, size_t dynamic_size) {
  char *begin;
  unsigned long size;
  m->shared_range(&begin, &size);
  if (size) memset(begin, 0xff, size);
  if (dynamic_size) memset(dynamic, 0xff, dynamic_size);
}

static CUresult check_launch(const EmuKernel *k, unsigned g[3], unsigned b[3], unsigned shared,
                             void **params, void **extra) {
  CUresult r = emu_need_context("cuLaunchKernel");
  if (r != CUDA_SUCCESS) return r;
  if (!k) return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: NULL function");
  if (extra) return emu_fail(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernel: `extra` is not supported by cuda-emu");
  if (!params && k->n_params > 0)
    return emu_fail(CUDA_ERROR_INVALID_VALUE, "kernel '%s' takes %d parameters but kernelParams is NULL",
                    k->name, k->n_params);
  unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
  if (!g[0] || !g[1] || !g[2] || !threads || threads > EMU_MAX_THREADS || b[2] > 64 || g[1] > 65535 ||
      g[2] > 65535 || g[0] > 2147483647u)
    return emu_fail(CUDA_ERROR_INVALID_VALUE, "kernel '%s': grid (%u,%u,%u) x block (%u,%u,%u) out of "
                    "the device's limits", k->name, g[0], g[1], g[2], b[0], b[1], b[2]);
  char *begin;
  unsigned long stat;
  k->module->shared_range(&begin, &stat);
  unsigned long limit = EMU_SHARED_PER_BLOCK;
  if (k->max_dynamic_shared) limit = stat + (unsigned long)k->max_dynamic_shared;
  if (stat + shared > limit)
    return emu_fail(CUDA_ERROR_INVALID_VALUE, "kernel '%s': %lu bytes of static + %u of dynamic shared "
                    "memory exceed %lu (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES raises it)",
                    k->name, stat, shared, limit);
  return CUDA_SUCCESS;
}

CUresult emu_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shared, CUstream stream,
                            void **params, void **extra) {
  (void)stream;
  const EmuKernel *k = (const EmuKernel *)f;
  unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  CUresult r = check_launch(k, g, b, shared, params, extra);
  if (r != CUDA_SUCCESS) return r;
  int n = (int)(bx * by * bz);
  if (!reserve_stacks(n)) return emu_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuda-emu: no memory for %d fiber stacks", n);
  void *dynamic = xmalloc(shared ? shared : 1);
  CellcEmuCtx *c = k->module->kctx;
  B.kernel = k;
  B.kctx = c;
  B.params = params;
  B.n = n;
  B.fibers = xcalloc((size_t)n, sizeof *B.fibers);
  B.failure = NULL;
  c->block_dim = (CellcEmuDim){bx, by, bz};
  c->grid_dim = (CellcEmuDim){gx, gy, gz};
  c->dynamic_shared = dynamic;
  c->syncthreads = cb_syncthreads;
  c->warp_op = cb_warp_op;
  c->trap = cb_trap;
  int rc = 0;
  for (unsigned z = 0; z < gz && rc == 0; z++)
    for (unsigned y = 0; y < gy && rc == 0; y++)
      for (unsigned x = 0; x < gx && rc == 0; x++) {
        c->block_idx = (CellcEmuDim){x, y, z};
        poison_shared(k->module, dynamic, shared);
        rc = run_block();
      }
#if EMU_ASAN
  if (rc != 0) ASAN_UNPOISON_MEMORY_REGION(stacks, stack_stride() * (size_t)n_stacks);
#endif
  free(B.fibers);
  free(B.failure);
  free(dynamic);
  memset(&B, 0, sizeof B);
  return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}
