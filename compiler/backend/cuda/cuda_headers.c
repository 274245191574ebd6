/* cuda_headers.c: the kernel-side headers (cellc_prelude.h, emu/cellc_emu_kernel.h) and the text of
 * every emitted P.cu (cellc_emit_kernels.h, cellc_launch.h, cellc_emit_host.h) embedded
 * in the binary with the assembler's .incbin, so cellc finds them wherever it is installed.
 * The paths are relative to the repository root, where make runs; cuda.mk makes this object
 * depend on the five headers. */

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
        ".global cellc_emit_kernels_h\n"
        ".type cellc_emit_kernels_h, @object\n"
        "cellc_emit_kernels_h:\n"
        ".incbin \"compiler/backend/cuda/cellc_emit_kernels.h\"\n"
        ".byte 0\n"
        ".global cellc_launch_h\n"
        ".type cellc_launch_h, @object\n"
        "cellc_launch_h:\n"
        ".incbin \"compiler/backend/cuda/cellc_launch.h\"\n"
        ".byte 0\n"
        ".global cellc_emit_host_h\n"
        ".type cellc_emit_host_h, @object\n"
        "cellc_emit_host_h:\n"
        ".incbin \"compiler/backend/cuda/cellc_emit_host.h\"\n"
        ".byte 0\n"
        ".global cellc_train_cu\n"
        ".type cellc_train_cu, @object\n"
        "cellc_train_cu:\n"
        ".incbin \"compiler/backend/cuda/cellc_train.cu\"\n"
        ".byte 0\n"
        ".previous\n");
