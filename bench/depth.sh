#!/bin/sh
# depth.sh DIR...: how compile time grows with a model's depth (issue 22). Each DIR holds a
# model.json (bench/export_depth.py writes BERT at 2-32 layers); this makes its weights
# (bench/make_weights.py), compiles it for the CPU three times with --time-report (the compiled
# runtime cached by a first compile), and prints a Markdown row per model: nodes, the median total
# and cc seconds, and gcc-graph's peak memory. GG: the compiler (default build/gcc-graph).
GG=${GG:-build/gcc-graph}
PY=${PYTHON:-python3}
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import numpy" 2>/dev/null && PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "| model | nodes | compile s (median of 3) | of which cc s | peak MiB |"
echo "|---|---|---|---|---|"
for d in "$@"; do
  n=$(basename "$d")
  "$PY" bench/make_weights.py "$d" "$TMP/$n" >/dev/null || exit 1
  "$GG" compile "$d/model.json" --weights "$TMP/$n/weights.safetensors" -o "$TMP/$n.so" >/dev/null 2>&1   # warm the runtime cache
  for i in 1 2 3; do
    "$GG" compile "$d/model.json" --weights "$TMP/$n/weights.safetensors" -o "$TMP/$n.so" --time-report 2>"$TMP/tr$i" || { cat "$TMP/tr$i"; exit 1; }
  done
  nodes=$("$GG" explain "$d/model.json" 2>/dev/null | sed -n "s/^ops: \([0-9]*\) nodes.*/\1/p" | head -n 1)
  tot=$(for i in 1 2 3; do sed -n 's/^gcc-graph: total *\([0-9.]*\) s.*/\1/p' "$TMP/tr$i"; done | sort -n | sed -n 2p)
  cc=$(for i in 1 2 3; do sed -n 's/^gcc-graph: cc (build the .so) *\([0-9.]*\) s.*/\1/p' "$TMP/tr$i"; done | sort -n | sed -n 2p)
  mem=$(sed -n 's/^gcc-graph: write .so + weights.*peak memory *\([0-9.]*\) MiB.*/\1/p' "$TMP/tr2")
  echo "| $n | ${nodes:-?} | $tot | $cc | $mem |"
done
