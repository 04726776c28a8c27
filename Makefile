# gcc-graph: `make` builds build/gcc-graph; `make test` runs every test; `make sanitize` runs them
# under AddressSanitizer and UndefinedBehaviorSanitizer.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter
LDLIBS  += -lcjson -lminizip -lm -ldl
BUILD   ?= build

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:lib/%.c=$(BUILD)/lib/%.o) $(BUILD)/gen/embedded.o
# Files every compiled model is built with, embedded into gcc-graph.
EMBED   := lib/rt/gg_rt.c lib/rt/gg_rt.h lib/scalar.h include/gcc_graph.h
HDRS    := lib/gg.h lib/ops.def lib/scalar.h

all: $(BUILD)/gcc-graph

$(BUILD)/lib/%.o: lib/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/embedded.c: $(EMBED) tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh $(EMBED) > $@

$(BUILD)/gen/embedded.o: $(BUILD)/gen/embedded.c
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

test: $(BUILD)/gcc-graph $(BUILD)/test-unit $(BUILD)/test-golden
	@BUILD=$(BUILD) sh tests/run.sh

# The same tests, built with AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize:
	$(MAKE) BUILD=build-san CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

docs/ops.md: $(BUILD)/gcc-graph
	$(BUILD)/gcc-graph ops > $@

clean:
	rm -rf build build-san

.PHONY: all test sanitize clean
