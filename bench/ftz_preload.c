/* ftz_preload.c: a measurement aid for bench/train_throughput.sh, not part of cellc. Loaded with
 * LD_PRELOAD, it sets flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) on the process's
 * main thread before main() runs, so that denormal floats cost nothing: the cellc counterpart of
 * torch.set_flush_denormal(True). Threads started later do not inherit it (each thread has its own
 * MXCSR), so it covers the 1-thread runs only. */
#include <xmmintrin.h>

__attribute__((constructor)) static void ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }
