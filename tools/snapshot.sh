#!/bin/sh
# snapshot.sh OUT_DIR: every case's generated C and CUDA source (compile -S), training sources, and
# explain's text and JSON, into OUT_DIR, for checking that a refactoring leaves the output of the
# compiler byte-identical: run it before and after, then `diff -r BEFORE AFTER`.
BUILD=${BUILD:-build}
out=$1
[ -n "$out" ] || { echo "usage: tools/snapshot.sh OUT_DIR" >&2; exit 2; }
mkdir -p "$out"
for case in tests/corpus/*/* tests/extra/* tests/extra_aten/*; do
  [ -f "$case/model.pt2" ] || continue
  name=$(echo "$case" | tr / _)
  train=
  grep -q '"kind": "train"' "$case/case.json" 2>/dev/null && train=--train
  "$BUILD/gcc-graph" compile "$case/model.pt2" $train -S -o "$out/$name.c" >"$out/$name.c.err" 2>&1
  echo "rc $?" >>"$out/$name.c.err"
  if [ -z "$train" ]; then
    "$BUILD/gcc-graph" compile "$case/model.pt2" --target cuda -S -o "$out/$name.cu" >"$out/$name.cu.err" 2>&1
    echo "rc $?" >>"$out/$name.cu.err"
  fi
  "$BUILD/gcc-graph" explain "$case/model.pt2" $train >"$out/$name.explain" 2>&1
  "$BUILD/gcc-graph" explain "$case/model.pt2" $train --json >"$out/$name.json" 2>&1
  rm -f "$out/$name.c"/gg_rt* "$out/$name.c/scalar.h" "$out/$name.c/gcc_graph.h" "$out/$name.c/weights.bin"
  rm -f "$out/$name.cu"/gg_rt* "$out/$name.cu/scalar.h" "$out/$name.cu/gcc_graph.h" "$out/$name.cu/weights.bin"
done
