# cellc: build, test, demo, bench and deps.
#   make            build bin/cellc
#   make test       every test suite (builds an ASan/UBSan copy too); ends with "N passed, M failed"
#   make demo       the main job on a built-in default
#   make deps       install the Debian packages that are missing
.SUFFIXES:
.DELETE_ON_ERROR:

BUILD    ?= build
SAN      ?= 0
CC       := gcc
LLVM_CONFIG ?= $(shell command -v llvm-config-14 || command -v llvm-config || echo llvm-config)
LLVM_INC := $(shell $(LLVM_CONFIG) --includedir 2>/dev/null)
LLVM_LIBS := $(shell $(LLVM_CONFIG) --ldflags 2>/dev/null) $(shell $(LLVM_CONFIG) --libs 2>/dev/null)
CUDA     ?= /usr/local/cuda
# Open MPI (runtime/dist): its include directories and link flags, as its compiler wrapper gives them
MPI_INCS := $(foreach d,$(shell mpicc --showme:incdirs 2>/dev/null),-isystem $(d))
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)

OPT      := -O2
ifeq ($(SAN),1)
  BUILD  := build/asan
  OPT    := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif
# ThreadSanitizer: a bin of its own for `make stress` (tests/stress.py)
ifeq ($(SAN),tsan)
  BUILD  := build/tsan
  OPT    := -O1 -fsanitize=thread -fno-omit-frame-pointer
endif

CFLAGS   := -std=c11 $(OPT) -g -fopenmp -Wall -Wextra -Werror -D_GNU_SOURCE -MMD -MP \
            
LDLIBS   := -fopenmp -lcjson -lplplot -llapack -lopenblas $(LLVM_LIBS) $(MPI_LIBS) -lm -lpthread -ldl

# ---- folders and the layering the build enforces ----
# Each folder is one stage with one public header named after it (runtime/support/support.h,
# compiler/plan/plan.h, ...). USES_<folder> lists the folders whose public headers its files may
# include; they get those folders' -I paths and no others, and mk/layers.sh fails the build on an
# include of a folder not listed or of another folder's private header. docs/architecture.md
# draws the same graph.
FOLDERS := runtime/support runtime/gemm lang runtime/init runtime/tasks runtime/safetensors \
           runtime/nn runtime/optim runtime/device runtime/dist compiler/ir compiler/check compiler/lower compiler/plan \
           compiler/backend compiler/backend/interp compiler/backend/cpu compiler/backend/cuda \
           compiler/backend/cuda/emu compiler/pipeline \
           train/cfg train/model train probes cmd
USES_runtime/support     :=
USES_runtime/gemm        := runtime/support
USES_lang                := runtime/support
USES_runtime/init        := runtime/support
USES_runtime/tasks       := runtime/support runtime/safetensors
USES_runtime/safetensors := runtime/support
USES_runtime/nn          := runtime/support runtime/gemm
USES_runtime/optim       := runtime/support
USES_runtime/dist        := runtime/support
# the devices: where buffers live and training runs; the host device is runtime/nn's code
USES_runtime/device      := runtime/support runtime/nn runtime/optim
USES_compiler/ir         := runtime/support lang
USES_compiler/check      := runtime/support lang compiler/ir runtime/init
USES_compiler/lower      := runtime/support lang compiler/ir compiler/check
USES_compiler/plan       := runtime/support compiler/ir compiler/lower
USES_compiler/backend    := runtime/support runtime/device compiler/lower
USES_compiler/backend/interp := runtime/support compiler/ir compiler/lower compiler/backend
USES_compiler/backend/cpu    := runtime/support runtime/gemm runtime/nn compiler/ir compiler/lower compiler/plan compiler/backend
USES_compiler/backend/cuda   := runtime/support compiler/ir compiler/lower compiler/plan compiler/backend
USES_compiler/backend/cuda/emu := runtime/support compiler/backend/cuda
USES_compiler/pipeline   := runtime/support runtime/device lang compiler/ir compiler/check compiler/lower compiler/plan \
                            compiler/backend compiler/backend/interp compiler/backend/cpu \
                            compiler/backend/cuda
# train/: the training library, above the compiler: it reaches the compiler through
# compiler/pipeline's and compiler/backend's public headers only
USES_train/cfg           := runtime/support lang runtime/init runtime/tasks compiler/pipeline
USES_train/model         := runtime/support lang runtime/init runtime/tasks runtime/nn runtime/optim runtime/device \
                            compiler/pipeline compiler/backend train/cfg
USES_train               := runtime/support runtime/safetensors runtime/dist runtime/device compiler/pipeline train/model
# the diagnostics' probes: a run of the training library, its layers rerun on the host
USES_probes              := runtime/support runtime/safetensors runtime/tasks compiler/pipeline train/model train
USES_cmd                 := $(filter-out cmd,$(FOLDERS))
# the include flags of a folder: itself and what it uses, directly or through their headers
closure = $(sort $(1) $(foreach d,$(1),$(call closure,$(USES_$(d)))))
incs = $(foreach d,$(call closure,$(1)),-I$(d)) $(FLAGS_$(1))
# only the CPU back end sees LLVM's headers, only the CUDA back end the toolkit's
FLAGS_compiler/backend/cpu := -isystem $(LLVM_INC)
FLAGS_compiler/backend/cuda := -isystem $(CUDA)/include
# only runtime/dist sees MPI's
FLAGS_runtime/dist := $(MPI_INCS)
FLAGS_compiler/backend/cuda/emu := -isystem $(CUDA)/include
ALL_INCS := $(foreach d,$(FOLDERS),-I$(d)) -I$(BUILD)/gen -isystem $(LLVM_INC) -isystem $(CUDA)/include

SRCS     := $(filter-out cmd/main.c,$(foreach d,$(FOLDERS),$(wildcard $(d)/*.c)))
GEN_SRCS := $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.c
OBJS     := $(SRCS:%.c=$(BUILD)/%.o) $(GEN_SRCS:.c=.o)
TESTS    := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
LAYERS_OK := $(BUILD)/layers.ok

.PHONY: all deps test unit golden demo bench bench-chunked bench-train-chunked fuzz clean install layers test-gpu bench-gpu task_dump stress
ifeq ($(SAN),0)
all: bin/cellc $(BUILD)/task_dump $(BUILD)/eval_dump
else
all: $(BUILD)/cellc $(BUILD)/task_dump $(BUILD)/eval_dump
endif

bin/cellc: $(BUILD)/cmd/main.o $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

$(BUILD)/cellc: $(BUILD)/cmd/main.o $(BUILD)/libcellc.a
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

$(BUILD)/libcellc.a: $(OBJS) $(LAYERS_OK)
	@rm -f $@
	ar rcs $@ $(OBJS)

# The include check: every quoted include names a header of the file's own folder or the public
# header of a folder it uses.
export $(foreach d,$(FOLDERS),USES_$(subst /,_,$(d)))
$(foreach d,$(FOLDERS),$(eval USES_$(subst /,_,$(d)) := $(USES_$(d))))
$(LAYERS_OK): mk/layers.sh $(foreach d,$(FOLDERS),$(wildcard $(d)/*.[ch])) lang/lexer.re lang/parser.y Makefile
	@mkdir -p $(dir $@)
	@FOLDERS="$(FOLDERS)" sh mk/layers.sh
	@touch $@
layers:
	@FOLDERS="$(FOLDERS)" sh mk/layers.sh && echo "layers: every include follows the folder graph"

# cuda_headers.c embeds these headers with .incbin: its dependency file does not see them
$(BUILD)/compiler/backend/cuda/cuda_headers.o: compiler/backend/cuda/cellc_prelude.h \
                                               compiler/backend/cuda/emu/cellc_emu_kernel.h \
                                               compiler/backend/cuda/cellc_emit_kernels.h \
                                               compiler/backend/cuda/cellc_launch.h \
                                               compiler/plan/plan_table.h \
                                               compiler/backend/cuda/cellc_exec.h \
                                               compiler/backend/cuda/cellc_emit_host.h \
                                               compiler/backend/cuda/cellc_train.cu \
                                               compiler/backend/cuda/cellc_chunk.h \
                                               compiler/backend/cuda/cellc_chunk.cu

# The standalone executor of `cellc emit --target cpu`: LLVM bitcode (unoptimized: emit optimizes it
# for the chosen CPU with the kernels), embedded in cellc by emit_bitcode.c with .incbin: the driver
# (standalone/executor.c), the plan executor (exec.c) and the GEMM kernels (gemm_core.c), linked.
CLANG ?= clang-14
LLVM_LINK ?= llvm-link-14
EXEC_BC_SRCS := compiler/backend/cpu/standalone/executor.c compiler/backend/cpu/exec.c runtime/gemm/gemm_core.c
EXEC_BC_HDRS := compiler/plan/plan_table.h compiler/backend/cpu/scan.h compiler/backend/cpu/exec.h \
                runtime/gemm/gemm_core.h runtime/gemm/gemm.h
$(BUILD)/emit/%.bc: $(EXEC_BC_HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) -std=c11 -O2 -Xclang -disable-llvm-passes -fPIC -fopenmp-simd -Wall -Wextra -Werror \
	  -target x86_64-pc-linux-gnu -Icompiler/plan -Iruntime/gemm -emit-llvm -c -o $@ $(filter %.c,$^)
$(BUILD)/emit/executor_main.bc: compiler/backend/cpu/standalone/executor.c
$(BUILD)/emit/exec.bc: compiler/backend/cpu/exec.c
$(BUILD)/emit/gemm_core.bc: runtime/gemm/gemm_core.c
$(BUILD)/emit/executor.bc: $(BUILD)/emit/executor_main.bc $(BUILD)/emit/exec.bc $(BUILD)/emit/gemm_core.bc
	$(LLVM_LINK) -o $@ $^
$(BUILD)/compiler/backend/cpu/emit_bitcode.o: $(BUILD)/emit/executor.bc
$(BUILD)/compiler/backend/cpu/emit_bitcode.o: CFLAGS += -DEXECUTOR_BC='"$(BUILD)/emit/executor.bc"'

$(BUILD)/gen/lexer.c: lang/lexer.re
	@mkdir -p $(dir $@)
	re2c -W -Werror --no-generation-date -o $@ $<

# one bison run writes both (a grouped target: -j must not run it twice at once)
$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h &: lang/parser.y
	@mkdir -p $(dir $@)
	bison -Wall -Werror --header=$(BUILD)/gen/parser.h -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.o: $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.h
	$(CC) $(CFLAGS) $(call incs,lang) -I$(BUILD)/gen -Wno-unused-const-variable -c -o $@ $<
$(BUILD)/gen/parser.o: $(BUILD)/gen/parser.c
	$(CC) $(CFLAGS) $(call incs,lang) -I$(BUILD)/gen -c -o $@ $<

$(BUILD)/%.o: %.c | $(BUILD)/gen/parser.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call incs,$(patsubst %/,%,$(dir $<))) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(filter %.o,$^) $(BUILD)/libcellc.a -lcriterion $(LDLIBS)

# The stdlib cells the tests run, listed once (stdlib/cells.list), as the C tests' X-macro
$(BUILD)/gen/stdlib_cells.h: stdlib/cells.list mk/cells_h.awk
	@mkdir -p $(dir $@)
	awk -f mk/cells_h.awk stdlib/cells.list > $@
$(TESTS) $(BUILD)/tests/gpu_cuda_emit: $(BUILD)/gen/stdlib_cells.h

# The unit tests' edge (tests/unit/edge.c): the CELLC_* variables read into the library's options
# before any test runs, as cellc's main reads them.
$(TESTS) $(BUILD)/tests/gpu_cuda_emit: $(BUILD)/tests/edge.o
$(BUILD)/tests/edge.o: tests/unit/edge.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INCS) -c -o $@ $<

# Test helpers, compiled into the tests that use them and not into cellc: ptxas -v's resource
# report of generated kernels (tests/unit/ptxas.c).
PTXAS_TESTS := $(foreach t,test_cuda test_cuda_emu test_cuda_emit test_cuda_train test_cuda_chunk gpu_cuda_emit,$(BUILD)/tests/$(t))
$(PTXAS_TESTS): $(BUILD)/tests/ptxas.o
$(BUILD)/tests/ptxas.o: tests/unit/ptxas.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ALL_INCS) -c -o $@ $<

# A test tool: the splits of a fixed dataset as `cellc train` builds them, as safetensors
# (tests/task_dump.c; tests/suite_mnist1d.sh uses it).
$(BUILD)/task_dump: tests/task_dump.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)
task_dump: $(BUILD)/task_dump

# A test tool: the test batches `cellc eval` evaluates (tests/eval_dump.c; tests/suite_export.sh).
$(BUILD)/eval_dump: tests/eval_dump.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

deps:
	@sh tests/deps.sh

unit: $(TESTS)

# The whole suite: unit tests and golden tests under ASan/UBSan, the fuzz target,
# then the numerical suites on the optimized build. One summary line at the end.
test: deps
	$(MAKE) all
	$(MAKE) SAN=1 all unit
	@sh tests/run_all.sh

fuzz: $(BUILD)/fuzz_frontend

# Every command many times at once under load, on the optimized build, under ASan/UBSan, under
# TSan and under valgrind (tests/stress.sh; STRESS_RUNS scales it). `make test` runs a smaller
# one (tests/suite_stress.sh).
stress: deps all
	$(MAKE) SAN=1 all
	$(MAKE) SAN=tsan all
	@sh tests/stress.sh

# The front-end fuzz target (tests/fuzz.sh runs it): every source it links.
$(BUILD)/fuzz_frontend: tests/fuzz_frontend.c lang/ast.c lang/diag.c compiler/check/check.c compiler/check/chunkform.c compiler/check/dims.c \
                        compiler/ir/graph.c compiler/ir/ops.c runtime/support/base.c runtime/init/init.c runtime/support/rng.c \
                        runtime/support/hash.c $(GEN_SRCS)
	clang -std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-const-variable -D_GNU_SOURCE \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	  $(ALL_INCS) -o $@ $^ -lm

demo: deps all
	@sh examples/demo.sh

# the machine's limits: FMA peak at the widest vector width, copy bandwidth, sgemm at the GRU
# layer's shapes, the BLAS kernels that ran
$(BUILD)/peak: bench/peak.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

$(BUILD)/bench_cell: bench/bench_cell.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

# the chunked form's cpu chunk op alone (docs/performance.md, "The chunked form's chunk op")
$(BUILD)/chunkop_bench: bench/chunkop_bench.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

$(BUILD)/gpu_estimate: bench/gpu_estimate.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) $(ALL_INCS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

bench: deps all $(BUILD)/bench_cell $(BUILD)/peak
	@sh bench/run.sh
	@echo; echo "The emitted CPU kernel against cellc's own run (bench/emit_compare.sh):"; echo
	@sh bench/emit_compare.sh | tee bench/results/emit.md
	@echo; echo "Matrix states against the PyTorch chunkwise-parallel form (bench/chunked.sh):"; echo
	@sh bench/chunked.sh
	@echo; echo "The streaming step of an exported GRU, H = 256 (bench/export_step.sh):"; echo
	@sh bench/export_step.sh | tee bench/results/export_step.md

# Matrix-state cells (gla, hgrn2, mamba2; issue 31's shapes) against the chunkwise-parallel form
# in PyTorch (bench/torch_chunked.py), with the machine's limits: bench/results/chunked.md
bench-chunked: deps all $(BUILD)/bench_cell $(BUILD)/peak
	@sh bench/chunked.sh

# One cellc train step of a gla model, the chunked form against the scan (bench/train_chunked.sh).
bench-train-chunked: deps all
	@sh bench/train_chunked.sh

# The CUDA back end on a GPU (tests/gpu.sh, bench/gpu.sh): each skips with one line without one.
test-gpu: all $(BUILD)/tests/test_cuda $(BUILD)/tests/test_backends $(BUILD)/tests/gpu_cuda_emit $(BUILD)/tests/test_cuda_chunk
	@sh tests/gpu.sh

# What a lent GPU machine needs for the two, in .gpu/ (mk/gpu_bundle.sh; there: sh .gpu/run.sh).
.PHONY: gpu-bundle
gpu-bundle: all $(BUILD)/tests/test_cuda $(BUILD)/tests/test_backends $(BUILD)/tests/gpu_cuda_emit \
            $(BUILD)/tests/test_cuda_chunk $(BUILD)/bench_cell $(BUILD)/peak
	rm -rf $(BUILD)/python-cuda-cache # (entries of an older cellc only weigh)
	$(MAKE) python-cuda-prebuild
	sh mk/gpu_bundle.sh

# What tests/gpu.sh's Python check (tests/python_cuda_gpu.py) loads, built here: the GPU machine has no
# host compiler. The cache folder travels with the pack-for-gpu bundle.
.PHONY: python-cuda-prebuild
python-cuda-prebuild: all
	CELLC_CACHE=$(BUILD)/python-cuda-cache $(PYTHON) tests/python_cuda_gpu.py --prebuild

# test_cuda_emit's GPU half: the emitted P.cu built by nvcc and run on the GPU (tests/gpu.sh)
$(BUILD)/tests/gpu_cuda_emit: tests/unit/test_cuda_emit.c $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DCELLC_EMIT_GPU $(ALL_INCS) -o $@ $< $(filter %.o,$^) $(BUILD)/libcellc.a -lcriterion $(LDLIBS)

bench-gpu: all $(BUILD)/bench_cell $(BUILD)/peak
	@sh bench/gpu.sh

# `make install [PREFIX=/usr/local]`: cellc, its standard library, and the Python package `cellc`
# (python/cellc, docs/python.md) into the directory of /usr/bin/python3's search path under PREFIX
# (mk/python_site.py), told where this cellc lies (_install.py).
PREFIX      ?= /usr/local
PYTHON      ?= /usr/bin/python3
PYTHON_SITE ?= $(shell $(PYTHON) mk/python_site.py $(PREFIX))
install: all
	install -d $(PREFIX)/bin $(PREFIX)/share/cellc/stdlib
	install -m 755 bin/cellc $(PREFIX)/bin/cellc
	install -m 644 stdlib/*.cell $(PREFIX)/share/cellc/stdlib/
	install -d $(PYTHON_SITE)/cellc
	install -m 644 python/cellc/__init__.py python/cellc/_build.py python/cellc/_cuda.py python/cellc/_safetensors.py $(PYTHON_SITE)/cellc/
	printf '# written by make install: the cellc this package runs\nCELLC_BIN = "%s"\n' "$(abspath $(PREFIX))/bin/cellc" > $(PYTHON_SITE)/cellc/_install.py

clean:
	rm -rf build bin

-include $(OBJS:.o=.d) $(BUILD)/cmd/main.d $(BUILD)/tests/ptxas.d $(BUILD)/tests/edge.d
