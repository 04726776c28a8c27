#!/bin/sh
# run.sh [MODEL_DIR...]: the benchmark harness (`make bench`; `make bench-train` sets TRAIN=1).
# For each model (default: the four of bench/models, which a plain clone has): deterministic weights and input
# (make_weights.py), gcc-graph compile (timed), gcc-graph bench, and, where PyTorch is installed,
# PyTorch eager on the same weights, input and thread count, in the same run; their outputs are
# compared. Prints a table with milliseconds, the speed ratio, compile seconds, and the fraction of
# the machine's measured sgemm ceiling each model reaches (FLOPs of its matrix products and
# convolutions / time / ceiling) and of its copy bandwidth (the bytes explain's schedule reads and
# writes / time / ceiling). ROUNDS=N times gcc-graph, eager and torch.compile in N rounds that
# alternate between them (medians of ITERS runs each; the table shows the median round, and a line
# under each model every round), so that a noisy machine's slow stretches hit all sides alike. TARGET=cuda compiles with --target cuda and runs PyTorch on the GPU
# (the ceiling is then cuBLAS's float32 GEMM rate, bench/gpu_ceiling.py).
set -u
BUILD=${BUILD:-build}
GG=$BUILD/gcc-graph
THREADS=${THREADS:-$(nproc)}
ITERS=${ITERS:-30}
ROUNDS=${ROUNDS:-1}
# a Python with torch and NumPy if there is one, else one with NumPy (for the weights)
PY=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if [ -z "$PY" ] && command -v "$p" >/dev/null && "$p" -c "import torch, numpy" 2>/dev/null; then PY=$p; fi
done
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if [ -z "$PY" ] && command -v "$p" >/dev/null && "$p" -c "import numpy" 2>/dev/null; then PY=$p; fi
done
PY=${PY:-python3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# TRAIN=1: training steps (forward + backward, compile --train) of bench/train/*, against PyTorch's
# forward + backward of the same modules (bench/train_models.py)
TRAIN=${TRAIN:-0}
REF=bench/torch_ref.py
TRAINFLAG=
if [ "$TRAIN" = 1 ]; then
  REF=bench/torch_train_ref.py
  TRAINFLAG=--train
  [ $# -gt 0 ] || set -- bench/train/*/
else
  [ $# -gt 0 ] || set -- bench/models/mlp_big bench/models/resnet18_224 bench/models/mobilenet_v3_small_224 bench/models/encoder_d256_s128_b4
fi
export OMP_NUM_THREADS=$THREADS
TARGET=${TARGET:-cpu}
if [ "$TARGET" = cuda ]; then
  export TORCH_REF_DEVICE=cuda
  TRAINFLAG="$TRAINFLAG --target cuda"
  CEIL=$("$PY" bench/gpu_ceiling.py 2>/dev/null)
else
  # OpenBLAS's sgemm and an OpenMP copy; where PyTorch is installed, its own (MKL or oneDNN) too: the
  # ceiling is the better of the two (the OpenBLAS some machines carry is slower than our kernel)
  cc -O2 -fopenmp bench/ceiling.c -I/usr/include/x86_64-linux-gnu -lopenblas -o "$W/ceiling" 2>/dev/null
  CEIL=$(OPENBLAS_NUM_THREADS=$THREADS "$W/ceiling" 2>/dev/null)
  TCEIL=$("$PY" bench/cpu_ceiling.py "$THREADS" 2>/dev/null)
fi
best() { printf '%s\n%s\n' "$CEIL" "${TCEIL:-}" | sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" | sort -g | tail -n 1; }
GFLOPS=$(best sgemm_gflops)
GBS=$(best copy_gbs)
echo "machine: $(nproc) cores, $THREADS threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "ceilings: sgemm $GFLOPS GFLOP/s, copy $GBS GB/s (the better of: $CEIL ${TCEIL:-})"
have_torch=0
failed=0   # models that could not be measured: make bench fails at the end
"$PY" -c "import torch, numpy" 2>/dev/null && have_torch=1
TC=${TORCH_COMPILE:-0}
printf "%-26s %10s %10s %8s %9s %9s %8s %7s %6s" model gcc-graph torch speedup compile_s gemm_gf of_ceil gb_s of_bw
[ "$TC" = 1 ] && printf " %12s %8s %10s" torch.compile speedup tc_compile_s
echo
for m in "$@"; do
  m=${m%/}
  n=$(basename "$m")
  [ -f "$m/model.json" ] || { echo "$n: no $m/model.json" >&2; failed=$((failed + 1)); continue; }
  "$PY" bench/make_weights.py "$m" "$W/$n" >"$W/mw.log" 2>&1 || { echo "$n: make_weights.py failed (needs Python 3 with NumPy): $(tail -n 1 "$W/mw.log")" >&2; failed=$((failed + 1)); continue; }
  t0=$(date +%s.%N)
  "$GG" compile "$m/model.json" --weights "$W/$n/weights.safetensors" $TRAINFLAG -o "$W/$n.so" || { echo "$n: compile failed" >&2; failed=$((failed + 1)); continue; }
  t1=$(date +%s.%N)
  "$GG" run "$W/$n.so" --inputs "$W/$n/input.safetensors" -o "$W/$n.out.st" >/dev/null
  if [ "$TRAIN" = 1 ]; then   # forward + backward FLOPs
    flops=$("$GG" explain "$m/model.json" --weights "$W/$n/weights.safetensors" --train | sed -n 's/^matrix FLOPs: forward \([0-9.e+]*\), backward \([0-9.e+]*\)/\1 \2/p' | awk '{print $1 + $2}')
  else
    "$GG" explain "$m/model.json" --weights "$W/$n/weights.safetensors" >"$W/explain" 2>/dev/null
    flops=$(sed -n 's/^matrix FLOPs: \([0-9.e+]*\).*/\1/p' "$W/explain")
    # bytes the schedule's kernels read and write (explain: "memory traffic: R KiB read, W KiB written")
    kib=$(sed -n 's/^memory traffic: \([0-9.]*\) KiB read, \([0-9.]*\) KiB written.*/\1 \2/p' "$W/explain" | awk '{print $1 + $2}')
  fi
  ref="-"; ratio="-"; tc=; line=
  if [ $have_torch = 1 ]; then   # both sides timed by the PyTorch script, in alternating rounds
    line=$(TORCH_REF_COMPILE=$TC "$PY" $REF "$m" "$W/$n/weights.safetensors" "$W/$n/input.safetensors" "$THREADS" "$ITERS" "$W/$n.ref" "$ROUNDS" \
      "$GG" bench "$W/$n.so" --inputs "$W/$n/input.safetensors" --iters "$ITERS" 2>"$W/err" | tail -n 1)
    ref=$(echo "$line" | sed -n 's/.*"eager_ms": \([0-9.]*\).*/\1/p')
    ours=$(echo "$line" | sed -n 's/.*"gcc_graph_ms": \([0-9.]*\).*/\1/p')
    tc=$(echo "$line" | sed -n 's/.*"compile_ms": \([0-9.]*\).*/\1/p')
    tcs=$(echo "$line" | sed -n 's/.*"compile_s": \([0-9.]*\).*/\1/p')
    [ -n "$ref" ] || { echo "$n: PyTorch failed: $(tail -n 1 "$W/err")"; ref="-"; }
  fi
  [ -n "$ref" ] && [ "$ref" != "-" ] || ours=$("$GG" bench "$W/$n.so" --inputs "$W/$n/input.safetensors" --iters "$ITERS" | tail -n 1 | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p')
  [ "$ref" != "-" ] && ratio=$(echo "$ref $ours" | awk '{printf "%.2fx", $1 / $2}')
  gf=$(echo "$flops $ours" | awk '{ if ($1 > 0) printf "%.1f", $1 / ($2 * 1e6); else print "-" }')
  of=$(echo "$gf $GFLOPS" | awk '{ if ($1 != "-" && $2 > 0) printf "%.0f%%", 100 * $1 / $2; else print "-" }')
  gbs=$(echo "${kib:-0} $ours" | awk '{ if ($1 > 0) printf "%.1f", $1 * 1024 / ($2 * 1e6); else print "-" }')
  ofb=$(echo "$gbs ${GBS:-0}" | awk '{ if ($1 != "-" && $2 > 0) printf "%.0f%%", 100 * $1 / $2; else print "-" }')
  printf "%-26s %10s %10s %8s %9.2f %9s %8s %7s %6s" "$n" "$ours" "$ref" "$ratio" "$(echo "$t1 $t0" | awk '{print $1 - $2}')" "$gf" "$of" "$gbs" "$ofb"
  if [ "$TC" = 1 ] && [ "$ref" != "-" ]; then
    if [ -n "$tc" ]; then printf " %12.3f %8s %10.1f" "$tc" "$(echo "$tc $ours" | awk '{printf "%.2fx", $1 / $2}')" "$tcs"; else printf " failed: %s" "$(tail -n 1 "$W/err" | cut -c1-60)"; fi
  fi
  echo
  [ "$ROUNDS" -gt 1 ] && [ -n "$line" ] && echo "  rounds: $(echo "$line" | sed -n 's/.*"rounds": \({[^}]*}\).*/\1/p')"
  if [ "$ref" != "-" ]; then
    "$PY" - "$W/$n.out.st" "$W/$n.ref" <<'PYEOF' || { echo "$n: OUTPUTS DIFFER from PyTorch" >&2; failed=$((failed + 1)); }
import json, struct, sys, numpy as np
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])["out.0"]
ours = np.frombuffer(b[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]], dtype=np.float32)
ref = np.fromfile(sys.argv[2], dtype=np.float32)
err = np.linalg.norm(ours.astype(np.float64) - ref) / np.linalg.norm(ref)
sys.exit(0 if err < 1e-4 else 1)
PYEOF
  fi
done
if [ "$failed" -gt 0 ]; then echo "bench: $failed model(s) failed (above)" >&2; exit 1; fi
