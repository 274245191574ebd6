/* emit_bitcode.c: the standalone executor's LLVM bitcode (built from standalone/executor.c by the
 * Makefile; EXECUTOR_BC is its path, relative to the repository root where make runs) embedded
 * with the assembler's .incbin, so cellc emit finds it wherever cellc is installed. */
#include "emit_cpu.h"

#ifndef EXECUTOR_BC
#error "EXECUTOR_BC: the Makefile names the executor's bitcode"
#endif

__asm__(".section .rodata\n"
        ".global cellc_executor_bc\n"
        ".type cellc_executor_bc, @object\n"
        ".balign 16\n"
        "cellc_executor_bc:\n"
        ".incbin \"" EXECUTOR_BC "\"\n"
        ".global cellc_executor_bc_end\n"
        "cellc_executor_bc_end:\n"
        ".previous\n");
