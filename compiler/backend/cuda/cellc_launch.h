/* cellc_launch.h: the launch shapes of the CUDA back end's kernels, in one place for its two hosts:
 * cuda_backend.c includes it, and cuda_emit.c pastes its text into every emitted P.cu before the
 * executor (cellc_emit_host.h), so both launch the same kernels with the same grids, blocks,
 * shared memory and scan chunks. C and C++. */
#ifndef CELLC_LAUNCH_H
#define CELLC_LAUNCH_H

/* Threads of an elementwise kernel's block: a warp a row, CELLC_WARPS warps a block (fewer when the
 * rows' temporaries need more shared memory than a block may have without an opt-in). A row whose
 * temporaries alone pass CELLC_SHARED_BYTES runs one warp a block, and the launch opts in to that
 * much (cellc_needs_optin): up to CELLC_SHARED_OPTIN_BYTES, the most any GPU of compute capability
 * 9.0 allows a block; the host checks its device's own limit before it runs the kernels. */
#define CELLC_WARPS 8
#define CELLC_SHARED_BYTES 49152
#define CELLC_SHARED_OPTIN_BYTES 232448

/* Whether a launch with `shared` bytes of dynamic shared memory needs the function's
 * MAX_DYNAMIC_SHARED_SIZE_BYTES raised first. */
static inline int cellc_needs_optin(unsigned shared) { return shared > CELLC_SHARED_BYTES; }

/* Blocks of `block` threads for n elements of a grid-stride loop: at least 1, at most 4096. */
static inline unsigned cellc_blocks_for(long long n, unsigned block) {
  long long b = (n + block - 1) / block;
  return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* An elementwise kernel over `rows` rows (> 0) whose rows need tmp_floats floats of temporaries:
 * its grid, block and dynamic shared memory (bytes). */
static inline void cellc_elem_shape(long long rows, int tmp_floats, unsigned *grid, unsigned *block, unsigned *shared) {
  int warps = CELLC_WARPS;
  while (warps > 1 && (unsigned long long)warps * 4ull * (unsigned long long)tmp_floats > CELLC_SHARED_BYTES) warps--;
  if (rows < warps) warps = (int)rows;
  unsigned long long g = (unsigned long long)((rows + warps - 1) / warps);
  *grid = (unsigned)(g > 132 * 16 ? 132 * 16 : g);
  *block = (unsigned)(32 * warps);
  *shared = (unsigned)((unsigned long long)warps * 4ull * (unsigned long long)tmp_floats);
}

/* The scans' chunk length for T steps over `channels` channels: enough chunks that the scan fills a
 * large GPU (about 132 x 2048 threads), at least 16 steps a chunk, at most 65535 chunks (gridDim.y). */
static inline int cellc_scan_chunk(int T, long long channels) {
  long long want = 132LL * 2048 / (channels > 0 ? channels : 1);
  if (want < 1) want = 1;
  long long L = (T + want - 1) / want;
  if (L < 16) L = 16;
  if ((T + L - 1) / L > 65535) L = ((long long)T + 65534) / 65535;
  return (int)L;
}

/* The floats of the chunk carries of one scan: [nchunks][channels][6]. */
static inline unsigned long long cellc_scan_carry_floats(int T, int L, long long channels) {
  return (unsigned long long)(((long long)T + L - 1) / L) * (unsigned long long)channels * 6ull;
}

/* The scan kernels' block and grid.x over `channels` channels. */
static inline void cellc_scan_shape(long long channels, unsigned *gx, unsigned *block) {
  *block = channels >= 256 ? 256 : (unsigned)((channels + 31) / 32 * 32);
  *gx = (unsigned)((channels + *block - 1) / *block);
}

#endif
