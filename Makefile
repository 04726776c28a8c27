# gcc-graph: `make` builds build/gcc-graph; `make test` runs every test; `make sanitize` runs them
# under AddressSanitizer and UndefinedBehaviorSanitizer.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter
LDLIBS  += -lcjson -lminizip -lm -ldl -pthread
BUILD   ?= build

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:lib/%.c=$(BUILD)/lib/%.o) $(BUILD)/gen/embedded.o $(BUILD)/gen/report_page.o
# Files every compiled model is built with, embedded into gcc-graph.
EMBED   := lib/rt/gg_rt.c lib/rt/gg_rt_gemm.c lib/rt/gg_rt_gemm_t.h lib/rt/gg_rt_conv.c lib/rt/gg_rt_conv_t.h lib/rt/gg_rt_attn.c lib/rt/gg_rt_common.c lib/rt/gg_rt_cuda.cu lib/rt/gg_rt_cuda_attn.cu lib/rt/gg_rt_cuda_dw.cu lib/rt/gg_rt.h lib/scalar.h include/gcc_graph.h
HDRS    := lib/gg.h lib/emit.h lib/ops.def lib/scalar.h lib/rewrite.h

all: $(BUILD)/gcc-graph

# make test and make demo first install the Debian packages the build and the tests need (tools/setup.sh)
SETUP := $(if $(filter test demo,$(MAKECMDGOALS)),setup)
setup:
	@sh tools/setup.sh

$(BUILD)/lib/%.o: lib/%.c $(HDRS) | $(SETUP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/embedded.c: $(EMBED) tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh $(EMBED) > $@

$(BUILD)/gen/embedded.o: $(BUILD)/gen/embedded.c | $(SETUP)
	$(CC) $(CFLAGS) -c $< -o $@

# explain --html's page
$(BUILD)/gen/report_page.c: lib/report.html tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh -n gg_report_files lib/report.html > $@

$(BUILD)/gen/report_page.o: $(BUILD)/gen/report_page.c | $(SETUP)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libgg.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/gcc-graph: cli/main.c $(BUILD)/libgg.a $(HDRS)
	$(CC) $(CFLAGS) cli/main.c $(BUILD)/libgg.a $(LDLIBS) -o $@

$(BUILD)/test-unit: tests/unit.c $(BUILD)/libgg.a $(HDRS)
	$(CC) $(CFLAGS) tests/unit.c $(BUILD)/libgg.a $(LDLIBS) -o $@

$(BUILD)/test-golden: tests/golden.c $(BUILD)/libgg.a $(HDRS)
	$(CC) $(CFLAGS) tests/golden.c $(BUILD)/libgg.a $(LDLIBS) -o $@

# the runtime's product kernel against float64 products (it includes lib/rt/gg_rt_gemm.c whole)
$(BUILD)/test-kernel: tests/kernel.c lib/rt/gg_rt_gemm.c lib/rt/gg_rt_gemm_t.h lib/rt/gg_rt_conv.c lib/rt/gg_rt_conv_t.h lib/rt/gg_rt_attn.c lib/rt/gg_rt.h
	$(CC) $(CFLAGS) -fopenmp -Ilib/rt -Iinclude tests/kernel.c -lopenblas -lm -o $@

test: $(BUILD)/gcc-graph $(BUILD)/test-unit $(BUILD)/test-golden $(BUILD)/test-kernel
	@BUILD=$(BUILD) sh tests/run.sh

# On a machine with an NVIDIA GPU: every inference case compiled with --target cuda and run there.
test-cuda: $(BUILD)/gcc-graph $(BUILD)/test-golden
	@BUILD=$(BUILD) sh tests/cuda.sh

# The same tests, built with AddressSanitizer and UndefinedBehaviorSanitizer (float-cast-overflow
# too: -fsanitize=undefined leaves out NaN, infinite or huge doubles converted to integers); any
# report stops the program, so it fails its test.
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
sanitize:
	GENERATE_ONLY=1 $(MAKE) BUILD=build-san CFLAGS="-O1 -g $(SAN_FLAGS)" test

# libFuzzer harnesses (tests/fuzz/) for the model loader (JSON, with a structure-aware mutator), the
# .pt2 reader, the safetensors reader and a compiled model's entry points on hostile DLTensors (run),
# built with clang and the sanitizers into build-fuzz; `make fuzz FUZZ_SECONDS=N` runs each for N
# seconds (corpora and crashes under build-fuzz); FUZZ_JOBS=N runs N independent fuzzers each.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
FUZZ_NAMES   := model pt2 safetensors run
FUZZ_BINS    := $(FUZZ_NAMES:%=build-fuzz/fuzz_%)
fuzz-build: $(FUZZ_BINS)
fuzz-lib:
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(SAN_FLAGS)" build-fuzz/libgg.a
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h tests/fuzz/fuzz_mutate.h fuzz-lib
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -fsanitize=fuzzer $(SAN_FLAGS) $< build-fuzz/libgg.a $(LDLIBS) -o $@
# the run harness is built with a compiled model's sources (a symbolic batch) and the runtime
build-fuzz/run_src/model.c: $(BUILD)/gcc-graph tests/corpus/models/mlp_dynamic_batch/model.pt2
	rm -rf build-fuzz/run_src
	$(BUILD)/gcc-graph compile tests/corpus/models/mlp_dynamic_batch/model.pt2 -S -o build-fuzz/run_src
build-fuzz/fuzz_run: tests/fuzz/fuzz_run.c build-fuzz/run_src/model.c
	cd build-fuzz/run_src && $(FUZZ_CC) -std=gnu11 -O1 -g -fopenmp -DGG_NO_CLONES -fsanitize=fuzzer $(SAN_FLAGS) -I$(CURDIR)/include \
	  $(CURDIR)/tests/fuzz/fuzz_run.c model.c gg_rt.c -lopenblas -lm -ldl -o $(CURDIR)/$@
fuzz: $(FUZZ_BINS)
	FUZZ_JOBS=$(FUZZ_JOBS) BUILD=build-fuzz sh tests/fuzz/run.sh $(FUZZ_SECONDS)

# Compile a sample model, run it, and show its agreement with PyTorch's stored answer.
demo: $(BUILD)/gcc-graph $(BUILD)/test-golden
	@echo "== compile tests/corpus/models/bert_tiny/model.pt2 (BERT, 2 layers) into a shared object"
	$(BUILD)/gcc-graph compile tests/corpus/models/bert_tiny/model.pt2 -o $(BUILD)/bert_tiny.so
	@echo "== run it on the stored inputs"
	$(BUILD)/gcc-graph run $(BUILD)/bert_tiny.so --inputs tests/corpus/models/bert_tiny/io.safetensors -o $(BUILD)/bert_tiny.out.safetensors
	@echo "== compare with PyTorch's outputs (relative L2 error against float64 PyTorch)"
	$(BUILD)/test-golden --compare $(BUILD)/bert_tiny.out.safetensors tests/corpus/models/bert_tiny/io.safetensors --verbose
	@echo "== time it"
	$(BUILD)/gcc-graph bench $(BUILD)/bert_tiny.so --inputs tests/corpus/models/bert_tiny/io.safetensors --iters 20

# Side-by-side benchmarks against PyTorch eager on bench/models (bench/run.sh says how); fails when one cannot be measured.
bench: $(BUILD)/gcc-graph
	BUILD=$(BUILD) sh bench/run.sh

# With PyTorch 2.x, torchvision and transformers: the CPU suite at the sizes people serve, against
# eager and torch.compile (Inductor, freezing on) at 2 threads and at every CPU, pinned
# (bench/cpu_suite.py; MODELS=... for some, THREADS=2,16 ...).
bench-cpu: $(BUILD)/gcc-graph
	GG=$(BUILD)/gcc-graph python3 bench/cpu_suite.py $(MODELS)

# On a machine with an NVIDIA GPU, PyTorch 2.x, torchvision and transformers: the GPU suite at the
# sizes people run (bench/gpu_suite.py; MODELS="resnet50_b32 ..." for some of them).
bench-gpu: $(BUILD)/gcc-graph
	GG=$(BUILD)/gcc-graph python3 bench/gpu_suite.py $(MODELS)

# On a machine with an NVIDIA GPU: whole training steps (forward, backward, optimizer) at the sizes
# people train, against PyTorch eager and torch.compile (bench/gpu_train.py; MODELS=... for some).
bench-gpu-train: $(BUILD)/gcc-graph
	GG=$(BUILD)/gcc-graph python3 bench/gpu_train.py $(MODELS)

# On a machine with 2 or more NVIDIA GPUs: data-parallel training steps (NCCL) against PyTorch DDP,
# eager and compiled, and the scaling from 1 GPU (bench/gpu_ddp.py; MODELS=... for some).
bench-gpu-ddp: $(BUILD)/gcc-graph
	GG=$(BUILD)/gcc-graph python3 bench/gpu_ddp.py $(MODELS)

# Training steps (forward + backward) of bench/train/* against PyTorch's.
bench-train: $(BUILD)/gcc-graph
	BUILD=$(BUILD) TRAIN=1 sh bench/run.sh

# With PyTorch >= 2.9, torchvision, timm and transformers: the model zoo (docs/zoo.md), 120 models
# exported into $(ZOO)/export, compiled on the CPU and (with a GPU) for CUDA, compared with PyTorch;
# the table in $(ZOO)/work/zoo.md. MODELS="tv_resnet18 hf_*" for some of them.
ZOO ?= build/zoo
zoo: $(BUILD)/gcc-graph $(BUILD)/test-golden
	python3 zoo/export.py $(ZOO)/export $(MODELS)
	BUILD=$(BUILD) sh zoo/run.sh $(ZOO)/export $(ZOO)/work $(MODELS)
.PHONY: zoo

docs/ops.md: $(BUILD)/gcc-graph
	$(BUILD)/gcc-graph ops > $@

# make install [PREFIX=/usr/local] [DESTDIR=...]: the compiler, the header compiled models are used
# through, a pkg-config file for it, and the man page.
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define GG_VERSION "\(.*\)"/\1/p' lib/gg.h)
install: $(BUILD)/gcc-graph
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BUILD)/gcc-graph $(DESTDIR)$(PREFIX)/bin/gcc-graph
	install -m 644 include/gcc_graph.h $(DESTDIR)$(PREFIX)/include/gcc_graph.h
	install -m 644 man/gcc-graph.1 $(DESTDIR)$(PREFIX)/share/man/man1/gcc-graph.1
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' gcc-graph.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/gcc-graph.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/gcc-graph $(DESTDIR)$(PREFIX)/include/gcc_graph.h $(DESTDIR)$(PREFIX)/share/man/man1/gcc-graph.1 $(DESTDIR)$(PREFIX)/lib/pkgconfig/gcc-graph.pc

clean:
	rm -rf build build-san build-fuzz

.PHONY: all setup test test-cuda sanitize fuzz fuzz-build fuzz-lib clean demo bench bench-cpu bench-gpu bench-gpu-train bench-gpu-ddp bench-train install uninstall
