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

OPT      := -O2
ifeq ($(SAN),1)
  BUILD  := build/asan
  OPT    := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif

CFLAGS   := -std=c11 $(OPT) -g -fopenmp -Wall -Wextra -Werror -D_GNU_SOURCE -MMD -MP \
            -Ilang -Icompiler -Iruntime -I$(BUILD)/gen -isystem $(LLVM_INC)
LDLIBS   := -fopenmp -lcjson -lopenblas $(LLVM_LIBS) -lm -lpthread

SRCS     := $(filter-out compiler/main.c,$(wildcard lang/*.c compiler/*.c runtime/*.c runtime/tasks/*.c))
GEN_SRCS := $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.c
OBJS     := $(SRCS:%.c=$(BUILD)/%.o) $(GEN_SRCS:.c=.o)
TESTS    := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))

.PHONY: all deps test unit golden demo bench fuzz clean install
ifeq ($(SAN),1)
all: $(BUILD)/cellc
else
all: bin/cellc
endif

bin/cellc: $(BUILD)/compiler/main.o $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

$(BUILD)/cellc: $(BUILD)/compiler/main.o $(BUILD)/libcellc.a
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

$(BUILD)/libcellc.a: $(OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/gen/lexer.c: lang/lexer.re
	@mkdir -p $(dir $@)
	re2c -W -Werror --no-generation-date -o $@ $<

$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h: lang/parser.y
	@mkdir -p $(dir $@)
	bison -Wall -Werror --header=$(BUILD)/gen/parser.h -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.o: $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.h
	$(CC) $(CFLAGS) -Wno-unused-const-variable -c -o $@ $<
$(BUILD)/gen/parser.o: $(BUILD)/gen/parser.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c | $(BUILD)/gen/parser.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libcellc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcellc.a -lcriterion $(LDLIBS)

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

# The front-end fuzz target (tests/fuzz.sh runs it): every source it links.
$(BUILD)/fuzz_frontend: tests/fuzz_frontend.c lang/ast.c lang/diag.c compiler/check.c compiler/dims.c \
                        compiler/graph.c runtime/base.c runtime/init.c runtime/rng.c $(GEN_SRCS)
	clang -std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-const-variable -D_GNU_SOURCE \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	  -Ilang -Icompiler -Iruntime -I$(BUILD)/gen -o $@ $^ -lm

demo: deps all
	@sh examples/demo.sh

$(BUILD)/bench_cell: bench/bench_cell.c $(BUILD)/libcellc.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcellc.a $(LDLIBS)

bench: deps all $(BUILD)/bench_cell
	@sh bench/run.sh

install: all
	install -d $(PREFIX)/bin $(PREFIX)/share/cellc/stdlib
	install -m 755 bin/cellc $(PREFIX)/bin/cellc
	install -m 644 stdlib/*.cell $(PREFIX)/share/cellc/stdlib/

clean:
	rm -rf build bin

-include $(OBJS:.o=.d) $(BUILD)/compiler/main.d
