#!/bin/sh
# blocks.sh: BERT-base, Llama and BERT-tiny exported from Hugging Face on this machine
# (bench/export_blocks.py, needs transformers), compiled (TARGET=cuda: --target cuda) and timed
# against PyTorch eager and torch.compile, same inputs, in the same run.
set -u
BUILD=${BUILD:-build}
GG=$BUILD/gcc-graph
TARGET=${TARGET:-cuda}
DEV=cpu; FLAG=
[ "$TARGET" = cuda ] && { DEV=cuda; FLAG="--target cuda"; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 bench/export_blocks.py "$W" "$DEV" >"$W/log" 2>&1 || { echo "export failed: $(tail -n 3 "$W/log")"; exit 1; }
printf "%-22s %10s %10s %8s %12s %8s %9s %11s\n" model gcc-graph eager speedup torch.compile speedup compile_s tc_compile_s
for d in "$W"/*/; do
  n=$(basename "$d")
  t0=$(date +%s.%N)
  "$GG" compile "$d/model.pt2" $FLAG -o "$W/$n.so" 2>"$W/err" || { echo "$n: compile failed: $(head -c 300 "$W/err")"; continue; }
  t1=$(date +%s.%N)
  ours=$("$GG" bench "$W/$n.so" --inputs "$d/io.safetensors" --iters 100 | tail -n 1 | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p')
  j=$(cat "$d/torch.json")
  e=$(echo "$j" | sed -n 's/.*"eager_ms": \([0-9.e-]*\).*/\1/p'); c=$(echo "$j" | sed -n 's/.*"compile_ms": \([0-9.e-]*\).*/\1/p')
  cs=$(echo "$j" | sed -n 's/.*"compile_s": \([0-9.e-]*\).*/\1/p')
  printf "%-22s %10.4f %10.4f %8s %12.4f %8s %9.2f %11.1f\n" "$n" "$ours" "$e" "$(echo "$e $ours" | awk '{printf "%.2fx", $1/$2}')" "$c" \
    "$(echo "$c $ours" | awk '{printf "%.2fx", $1/$2}')" "$(echo "$t1 $t0" | awk '{print $1 - $2}')" "$cs"
done
