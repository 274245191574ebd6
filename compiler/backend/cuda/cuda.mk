# compiler/backend/cuda/cuda.mk: the CUDA call layer and cuda-emu, for the top Makefile.
# Include it after `SRCS :=` and before `OBJS :=`, then:
#   SRCS   += $(CUDA_SRCS)
#   CFLAGS += $(CUDA_CFLAGS)
#   LDLIBS += $(CUDA_LDLIBS)
# Nothing links libcuda, libnvrtc or libcublas: they are opened with dlopen at run time.
CUDA        ?= /usr/local/cuda
CUDA_SRCS   := $(wildcard compiler/backend/cuda/*.c compiler/backend/cuda/emu/*.c)
CUDA_CFLAGS := -isystem $(CUDA)/include
CUDA_LDLIBS := -ldl

# cuda_headers.c embeds these two headers with .incbin (paths from the repository root,
# where make runs); the compiler's dependency files do not see them.
$(BUILD)/compiler/backend/cuda/cuda_headers.o: compiler/backend/cuda/cellc_prelude.h \
                                               compiler/backend/cuda/emu/cellc_emu_kernel.h
