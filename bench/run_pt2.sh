#!/bin/sh
# run_pt2.sh CASE_DIR...: benchmark exported programs that carry their inputs (a corpus case:
# model.pt2 and io.safetensors) against PyTorch running the same .pt2's module, eager and
# torch.compile (bench/torch_pt2_ref.py), in the same run. TARGET=cuda compiles with --target cuda
# and runs PyTorch on the GPU. Prints milliseconds, ratios and compile seconds.
set -u
BUILD=${BUILD:-build}
GG=$BUILD/gcc-graph
ITERS=${ITERS:-50}
TARGET=${TARGET:-cpu}
DEV=cpu; FLAG=
[ "$TARGET" = cuda ] && { DEV=cuda; FLAG="--target cuda"; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
printf "%-22s %10s %10s %8s %12s %8s %9s %11s\n" model gcc-graph eager speedup torch.compile speedup compile_s tc_compile_s
for m in "$@"; do
  m=${m%/}; n=$(basename "$m")
  t0=$(date +%s.%N)
  "$GG" compile "$m/model.pt2" $FLAG -o "$W/$n.so" || { echo "$n: compile failed"; continue; }
  t1=$(date +%s.%N)
  ours=$("$GG" bench "$W/$n.so" --inputs "$m/io.safetensors" --iters "$ITERS" | tail -n 1 | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p')
  line=$(python3 bench/torch_pt2_ref.py "$m/model.pt2" "$m/io.safetensors" "$DEV" "$ITERS" 2>"$W/err" | tail -n 1)
  e=$(echo "$line" | sed -n 's/.*"eager_ms": \([0-9.e-]*\).*/\1/p'); c=$(echo "$line" | sed -n 's/.*"compile_ms": \([0-9.e-]*\).*/\1/p')
  cs=$(echo "$line" | sed -n 's/.*"compile_s": \([0-9.e-]*\).*/\1/p')
  [ -n "$e" ] || { echo "$n: ours $ours ms; PyTorch failed: $(tail -n 1 "$W/err")"; continue; }
  printf "%-22s %10.4f %10.4f %8s %12.4f %8s %9.2f %11.1f\n" "$n" "$ours" "$e" "$(echo "$e $ours" | awk '{printf "%.2fx", $1/$2}')" "$c" \
    "$(echo "$c $ours" | awk '{printf "%.2fx", $1/$2}')" "$(echo "$t1 $t0" | awk '{print $1 - $2}')" "$cs"
done
