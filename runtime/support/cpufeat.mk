# runtime/support/cpufeat.mk: CPU features and the BLAS kernel choice (issue 17), as a fragment
# for the Makefile (`include runtime/support/cpufeat.mk` after CC, CFLAGS, LDLIBS and BUILD are
# set), or on its own:
#   make -f runtime/support/cpufeat.mk peak        # build/peak: FMA peak, copy, sgemm at GRU shapes
#   make -f runtime/support/cpufeat.mk bench-peak  # and run it (1 BLAS thread)
#   make -f runtime/support/cpufeat.mk test-cpufeat
# When runtime/support/*.c joins SRCS (and so libcellc.a), CPUFEAT_OBJS below links twice
# harmlessly (the archive member is not pulled) and can be dropped from the two link lines;
# tests/unit/test_cpu_features.c is then built by the Makefile's tests/unit pattern rule too.

BUILD    ?= build
CC       ?= gcc
CFLAGS   ?= -std=c11 -O2 -g -fopenmp -Wall -Wextra -Werror -D_GNU_SOURCE -MMD -MP \
            -Ilang -Icompiler -Iruntime -I$(BUILD)/gen
LLVM_CONFIG ?= $(shell command -v llvm-config-14 || command -v llvm-config || echo llvm-config)
LDLIBS   ?= -fopenmp -lcjson -lopenblas $(shell $(LLVM_CONFIG) --ldflags --libs 2>/dev/null) -lm -lpthread

CPUFEAT_SRCS := runtime/support/cpu_features.c
CPUFEAT_OBJS := $(CPUFEAT_SRCS:%.c=$(BUILD)/%.o)

.PHONY: peak bench-peak test-cpufeat

$(BUILD)/runtime/support/%.o: runtime/support/%.c runtime/support/cpu_features.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# bench/peak.c needs no cellc code but cpu_features; it opens BLIS with dlopen when asked (--blis).
$(BUILD)/peak: bench/peak.c $(CPUFEAT_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CPUFEAT_OBJS) -fopenmp -lopenblas -lm -lpthread

peak: $(BUILD)/peak

# The machine's limits and which BLAS kernels ran, as make bench would print them. An
# OPENBLAS_CORETYPE in the environment is respected; the second run shows the CPUID choice.
bench-peak: $(BUILD)/peak
	OPENBLAS_NUM_THREADS=1 ./$(BUILD)/peak --proto
	@if [ -n "$$OPENBLAS_CORETYPE" ]; then echo "== without OPENBLAS_CORETYPE=$$OPENBLAS_CORETYPE (the CPUID choice):"; \
	  env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 ./$(BUILD)/peak --proto; fi

$(BUILD)/tests/test_cpu_features: tests/unit/test_cpu_features.c $(CPUFEAT_OBJS) $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CPUFEAT_OBJS) $(BUILD)/libcellc.a -lcriterion $(LDLIBS)

test-cpufeat: $(BUILD)/tests/test_cpu_features
	./$(BUILD)/tests/test_cpu_features --jobs 2
