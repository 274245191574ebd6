/* cuda_headers.c: the kernel-side headers (cellc_prelude.h, emu/cellc_emu_kernel.h) embedded
 * in the binary with the assembler's .incbin, so cellc finds them wherever it is installed.
 * The paths are relative to the repository root, where make runs; cuda.mk makes this object
 * depend on the two headers. */

/* Each is NUL-terminated; a C declaration of the symbols is in cuda_internal.h. */
__asm__(".section .rodata\n"
        ".global cellc_cuda_prelude_h\n"
        ".type cellc_cuda_prelude_h, @object\n"
        "cellc_cuda_prelude_h:\n"
        ".incbin \"compiler/backend/cuda/cellc_prelude.h\"\n"
        ".byte 0\n"
        ".global cellc_emu_kernel_h\n"
        ".type cellc_emu_kernel_h, @object\n"
        "cellc_emu_kernel_h:\n"
        ".incbin \"compiler/backend/cuda/emu/cellc_emu_kernel.h\"\n"
        ".byte 0\n"
        ".global cellc_train_cu\n"
        ".type cellc_train_cu, @object\n"
        "cellc_train_cu:\n"
        ".incbin \"compiler/backend/cuda/cellc_train.cu\"\n"
        ".byte 0\n"
        ".previous\n");
