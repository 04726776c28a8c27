#!/bin/sh
# make test-cuda (needs an NVIDIA GPU and nvcc): every inference case compiled with --target cuda,
# run on the GPU and compared with PyTorch by the corpus rule, and the CUDA ABI (tests/cuda_abi.cu).
# Ends with "N passed, N failed".
BUILD=${BUILD:-build}
GG=$BUILD/gcc-graph
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 8 ] && jobs=8
jobs=${JOBS:-$jobs}   # cases compiled and run at once
echo "== CUDA: every case compiled with --target cuda (training cases with --train), run on the GPU, compared with PyTorch"
ls -d tests/corpus/*/* tests/extra/* tests/extra_aten/* | TARGET=cuda xargs -P "$jobs" -n 1 -I CASE sh tests/compile_case.sh CASE "$TMP" >"$TMP/cases" 2>&1
pass=$(grep -c '^ok' "$TMP/cases")
fail=$(grep -c '^FAIL' "$TMP/cases")
grep '^FAIL' "$TMP/cases"
echo "== CUDA training: the optimizers against their formulas, gradient accumulation, learning rates (tests/train_abi.c)"
T=tests/corpus/train/mlp_train
for o in "sgd --lr 0.1 --momentum 0.9 --weight-decay 0.01|sgd 0.1 0.9 0.01" "adam --lr 0.01 --betas 0.8,0.99 --eps 1e-6 --weight-decay 0.001|adam 0.01 0.8 0.99 1e-6 0.001" \
         "adamw --lr 0.01 --betas 0.8,0.99 --eps 1e-6 --weight-decay 0.1|adamw 0.01 0.8 0.99 1e-6 0.1"; do
  flags=${o%%|*} args=${o#*|} n=${flags%% *}
  if "$GG" compile $T/model.pt2 --train --target cuda --optimizer $flags -o "$TMP/tr_$n.so" >"$TMP/err" 2>&1 &&
     ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/tr_$n.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/tr_$n" >>"$TMP/err" 2>&1; then
    "$TMP/tr_$n" $T/io.safetensors $args >"$TMP/abi" 2>&1
    grep '^FAIL' "$TMP/abi"
    line=$(tail -n 1 "$TMP/abi")
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
    case "$p$f" in *[!0-9]*|"") echo "FAIL: train_abi $n: $(tail -n 3 "$TMP/abi")"; fail=$((fail + 1));; *) pass=$((pass + p)); fail=$((fail + f));; esac
  else
    echo "FAIL: cannot build the CUDA training test ($n): $(head -c 300 "$TMP/err")"; fail=$((fail + 1))
  fi
done
echo "== CUDA: --precision tf32x3 (float32 products as three TF32 products: whole, K in chunks with GCC_GRAPH_TF32X3=2; =0: float32's)"
c=tests/extra/products_tf32x3
if "$GG" compile $c/model.pt2 --target cuda --precision tf32x3 -o "$TMP/x3.so" >"$TMP/err" 2>&1; then
  for v in "" 2 0; do
    if GCC_GRAPH_TF32X3=$v "$GG" run "$TMP/x3.so" --inputs $c/io.safetensors -o "$TMP/x3_$v.st" >"$TMP/err" 2>&1 &&
       "$BUILD/test-golden" --compare "$TMP/x3_$v.st" $c/io.safetensors >"$TMP/err" 2>&1; then pass=$((pass + 1))
    else echo "FAIL: $c with GCC_GRAPH_TF32X3=$v: $(head -c 300 "$TMP/err")"; fail=$((fail + 1)); fi
  done
  # the split products ran: their error from float64 (the tensor cores' truncating accumulation) is
  # above float32's products' (bits alone would not say: cuBLASLt's timed choice of algorithm can
  # differ between runs)
  e3=$("$BUILD/test-golden" --compare "$TMP/x3_.st" $c/io.safetensors --verbose 2>/dev/null | sed -n 's/.*relative error \([0-9.e+-]*\) .*/\1/p' | sort -g | tail -n 1)
  e0=$("$BUILD/test-golden" --compare "$TMP/x3_0.st" $c/io.safetensors --verbose 2>/dev/null | sed -n 's/.*relative error \([0-9.e+-]*\) .*/\1/p' | sort -g | tail -n 1)
  if [ -n "$e3" ] && [ -n "$e0" ] && awk "BEGIN { exit !($e3 > 2 * $e0) }"; then pass=$((pass + 1))
  else echo "FAIL: $c: the TF32 split products' error ($e3) is not above float32's ($e0): not taken?"; fail=$((fail + 1)); fi
else
  echo "FAIL: $c: compile: $(head -c 300 "$TMP/err")"; fail=$((fail + 1))
fi
echo "== CUDA: 16-bit fused attention with one group of warps a block and with two (GCC_GRAPH_ATTENTION_SPLIT=0, =1; unset, these small grids take two)"
for v in 0 1; do
  for c in tests/extra/attention_bf16 tests/extra/attention_f16 tests/extra/attention_mask_causal_bf16 tests/extra/train_attention_bf16; do
    r=$(GCC_GRAPH_ATTENTION_SPLIT=$v TARGET=cuda sh tests/compile_case.sh "$c" "$TMP")
    case "$r" in ok*) pass=$((pass + 1));; *) echo "FAIL (GCC_GRAPH_ATTENTION_SPLIT=$v): $r"; fail=$((fail + 1));; esac
  done
done
echo "== CUDA: convolutions without cuDNN (GCC_GRAPH_NO_CUDNN=1: im2col + cuBLAS, direct kernels)"
for c in tests/corpus/models/cnn_small tests/extra/conv_depthwise tests/extra/conv3d tests/extra/conv_strides tests/extra/conv_transpose2d tests/extra/train_tiny_resnet; do
  r=$(GCC_GRAPH_NO_CUDNN=1 TARGET=cuda sh tests/compile_case.sh "$c" "$TMP")
  case "$r" in ok*) pass=$((pass + 1));; *) echo "FAIL (no cuDNN): $r"; fail=$((fail + 1));; esac
done
echo "== CUDA: --no-channels-last (tensor-core convolutions left NCHW, as before the channels-last stage)"
for c in tests/extra/layout_cnn_bf16 tests/extra/precision_layout_cnn_tf32 tests/extra/precision_cnn_bf16; do
  r=$(GG_FLAGS=--no-channels-last TARGET=cuda sh tests/compile_case.sh "$c" "$TMP")
  case "$r" in ok*) pass=$((pass + 1));; *) echo "FAIL (--no-channels-last): $r"; fail=$((fail + 1));; esac
done
echo "== CUDA: convolutions with no cuDNN workspace (GCC_GRAPH_CUDNN_WORKSPACE_MB=0: algorithms that need none)"
for c in tests/corpus/models/cnn_small tests/extra/conv_bf16 tests/extra/conv_strides tests/extra/train_tiny_resnet; do
  r=$(GCC_GRAPH_CUDNN_WORKSPACE_MB=0 TARGET=cuda sh tests/compile_case.sh "$c" "$TMP")
  case "$r" in ok*) pass=$((pass + 1));; *) echo "FAIL (no workspace): $r"; fail=$((fail + 1));; esac
done
"$GG" compile tests/extra/conv_bf16/model.pt2 --target cuda -o "$TMP/cbf.so" >/dev/null 2>&1
if ! GCC_GRAPH_NO_CUDNN=1 "$GG" run "$TMP/cbf.so" --inputs tests/extra/conv_bf16/io.safetensors -o "$TMP/cbf.st" 2>"$TMP/err" && grep -q "need cuDNN" "$TMP/err"; then
  pass=$((pass + 1))
else
  echo "FAIL: a bfloat16 convolution without cuDNN: $(cat "$TMP/err")"; fail=$((fail + 1))
fi
echo "== CUDA data-parallel: NCCL ranks (2 when the host has 2 GPUs, else 1) against one process; the C sample"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
world=1; [ "$ngpu" -ge 2 ] && world=2
if "$GG" compile tests/extra/train_tiny_resnet/model.pt2 --train --target cuda --optimizer sgd --lr 0.05 --momentum 0.9 --bucket-mb 0.001 -o "$TMP/dp.so" >"$TMP/err" 2>&1; then
  for w in 1 $world; do   # (w=1: the NCCL calls captured into the step's graph, on one GPU)
    if NCCL_NVLS_ENABLE=0 python3 tests/data_parallel.py "$TMP/dp.so" tests/extra/train_tiny_resnet/io.safetensors 5 $w >"$TMP/dpo" 2>&1 && grep -q "data parallel ok" "$TMP/dpo"; then
      pass=$((pass + 1)); tail -n 1 "$TMP/dpo"
    else
      echo "FAIL: data parallel ($w ranks): $(tail -n 5 "$TMP/dpo")"; fail=$((fail + 1))
    fi
  done
  for v in GCC_GRAPH_DP_OVERLAP=0 GCC_GRAPH_DP_CTAS=0; do   # every bucket after the backward; one communicator for all buckets
    env $v NCCL_NVLS_ENABLE=0 python3 tests/data_parallel.py "$TMP/dp.so" tests/extra/train_tiny_resnet/io.safetensors 3 $world >"$TMP/dpo" 2>&1
    if grep -q "data parallel ok" "$TMP/dpo"; then pass=$((pass + 1)); else echo "FAIL: data parallel with $v: $(tail -n 5 "$TMP/dpo")"; fail=$((fail + 1)); fi
  done
  if ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu samples/train_ddp.c -ldl -o "$TMP/train_ddp" >"$TMP/err" 2>&1; then
    r=0
    while [ $r -lt $world ]; do
      CUDA_VISIBLE_DEVICES=$r NCCL_NVLS_ENABLE=0 "$TMP/train_ddp" "$TMP/dp.so" $r $world "$TMP/nccl.id" 10 >"$TMP/ddp$r" 2>&1 &
      r=$((r + 1))
    done
    wait
    sums=$(cat "$TMP"/ddp* | sed -n 's/.*checksum //p' | sort -u | wc -l)
    if [ "$(cat "$TMP"/ddp* | grep -c checksum)" = $world ] && [ "$sums" = 1 ]; then pass=$((pass + 1)); cat "$TMP"/ddp*
    else echo "FAIL: samples/train_ddp.c: $(cat "$TMP"/ddp*)"; fail=$((fail + 1)); fi
  else
    echo "FAIL: cannot build samples/train_ddp.c: $(head -c 300 "$TMP/err")"; fail=$((fail + 1))
  fi
else
  echo "FAIL: cannot compile the data-parallel model: $(head -c 300 "$TMP/err")"; fail=$((fail + 1))
fi
echo "== CUDA ABI: guards, graph replay, streams; the device's half and bfloat16 conversions"
if "$GG" compile tests/corpus/models/mlp/model.pt2 --target cuda -o "$TMP/mlp.so" &&
   ${NVCC:-nvcc} -Iinclude -Ilib/rt -I/usr/include/x86_64-linux-gnu tests/cuda_abi.cu -o "$TMP/cuda_abi" -ldl; then
  "$TMP/cuda_abi" "$TMP/mlp.so" >"$TMP/abi" 2>&1
  cat "$TMP/abi"
  line=$(tail -n 1 "$TMP/abi")
  p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  case "$p$f" in *[!0-9]*|"") fail=$((fail + 1));; *) pass=$((pass + p)); fail=$((fail + f));; esac
else
  echo "FAIL: cannot build the ABI test"; fail=$((fail + 1))
fi
echo "== CUDA: one model run from 8 host threads at once (tests/concurrency.c): every output equal to a lone run's"
for c in tests/corpus/models/bert_tiny tests/corpus/train/mlp_train; do
  n=$(basename $c) tflag=""
  case $n in *_train) tflag=--train;; esac
  if "$GG" compile $c/model.pt2 $tflag --target cuda -o "$TMP/conc_$n.so" >"$TMP/err" 2>&1 &&
     ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/concurrency.c "$TMP/conc_$n.so" -Wl,-rpath,"$TMP" -lpthread -o "$TMP/conc_$n" >>"$TMP/err" 2>&1; then
    "$TMP/conc_$n" $c/io.safetensors 8 4 >"$TMP/conc" 2>&1
    line=$(tail -n 1 "$TMP/conc")
    case "$line" in "1 passed, 0 failed") pass=$((pass + 1));; *) echo "FAIL: concurrent runs of $n: $(cat "$TMP/conc" | head -5)"; fail=$((fail + 1));; esac
  else
    echo "FAIL: cannot build the concurrency test ($n): $(head -c 300 "$TMP/err")"; fail=$((fail + 1))
  fi
done
echo "== CUDA: an index out of range stops the run with a message naming the node"
python3 - "$TMP/bad.st" <<'PYEOF'
import json, struct, sys
h = json.dumps({"in.0": {"dtype": "I64", "shape": [2, 16], "data_offsets": [0, 256]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<32q", *([5] * 31 + [10 ** 6])))
PYEOF
if "$GG" compile tests/corpus/models/bert_tiny/model.pt2 --target cuda -o "$TMP/bert.so" &&
   ! "$GG" run "$TMP/bert.so" --inputs "$TMP/bad.st" -o "$TMP/o.st" 2>"$TMP/err" && grep -q "index out of range" "$TMP/err"; then
  pass=$((pass + 1))
else
  echo "FAIL: out-of-range index: $(cat "$TMP/err")"; fail=$((fail + 1))
fi
echo "== CUDA: random ops (tests/random_ops.py): their statistics on the GPU, the interpreter's generator the GPU's"
R=tests/random/random_ops
if "$GG" compile $R/model.pt2 --target cuda -o "$TMP/rnd.so" && GCC_GRAPH_SEED=7 "$GG" run "$TMP/rnd.so" --inputs $R/io.safetensors -o "$TMP/rnd.st" &&
   GCC_GRAPH_SEED=7 "$GG" run $R/model.pt2 --interpret --inputs $R/io.safetensors -o "$TMP/rndi.st" &&
   python3 tests/random_ops.py - $R/io.safetensors "$TMP/rnd.st" "$TMP/rndi.st" >"$TMP/rnd" 2>&1 && grep -q "random ops ok" "$TMP/rnd"; then
  pass=$((pass + 1))
else
  echo "FAIL: random ops on the GPU: $(tail -n 3 "$TMP/rnd" 2>/dev/null)"; fail=$((fail + 1))
fi
echo "== CUDA: the Python package (tests/python_cuda.py): compile from an nn.Module, CUDA tensors, streams, training"
if python3 -c "import torch.export" 2>/dev/null; then
  if XDG_CACHE_HOME="$TMP/pycache" PYTHONPATH=python GCC_GRAPH="$GG" python3 tests/python_cuda.py >"$TMP/pyc" 2>&1 && grep -q "^python cuda ok" "$TMP/pyc"; then
    pass=$((pass + 1)); tail -n 1 "$TMP/pyc"
  else
    echo "FAIL: tests/python_cuda.py: $(grep -v Warning "$TMP/pyc" | tail -n 8)"; fail=$((fail + 1))
  fi
else
  echo "(torch with torch.export is needed for tests/python_cuda.py; not run)"
fi
echo "== CUDA: the README's quickstart as written (its Python block; samples/export.py, compile, run, compare)"
if python3 -c "import torch.export, torchvision" 2>/dev/null; then
  sed -n '/^```python$/,/^```$/p' README.md | sed '1d;$d' >"$TMP/quickstart.py"
  if (cd "$TMP" && XDG_CACHE_HOME="$TMP/pycache" PYTHONPATH="$OLDPWD/python" GCC_GRAPH="$OLDPWD/$GG" python3 quickstart.py) >"$TMP/qs" 2>&1 &&
     python3 -c "import sys; v = float(open(sys.argv[1]).read().split()[-1]); sys.exit(not v < 1e-3)" "$TMP/qs"; then
    pass=$((pass + 1))
  else
    echo "FAIL: the README's Python quickstart: $(tail -n 5 "$TMP/qs")"; fail=$((fail + 1))
  fi
  for spec in "resnet18 resnet18 cpu" "resnet18 resnet18 cuda" "hf:bert bert cuda --batch 2 --seq 32"; do
    set -- $spec
    src=$1 name=$2 t=$3
    shift 3
    if python3 samples/export.py $src "$@" -o "$TMP/exports" >"$TMP/qs" 2>&1 &&
       "$GG" compile "$TMP/exports/$name.pt2" --target $t -o "$TMP/${name}_$t.so" >>"$TMP/qs" 2>&1 &&
       "$GG" run "$TMP/${name}_$t.so" --inputs "$TMP/exports/${name}_inputs.safetensors" -o "$TMP/qs_out.st" >>"$TMP/qs" 2>&1 &&
       "$GG" compare "$TMP/qs_out.st" "$TMP/exports/${name}_expected.safetensors" >>"$TMP/qs" 2>&1; then
      pass=$((pass + 1)); tail -n 1 "$TMP/qs"
    else
      echo "FAIL: samples/export.py $src, compiled for $t and compared: $(tail -n 5 "$TMP/qs")"; fail=$((fail + 1))
    fi
  done
else
  echo "(torch with torch.export and torchvision are needed for the quickstart; not run)"
fi
echo "== CUDA: GCC_GRAPH_PROFILE (GPU time per node: the summary, a Chrome trace, explain --html --profile), same answers"
C=tests/corpus/models/bert_tiny
if "$GG" compile $C/model.pt2 --target cuda -o "$TMP/prof.so" >"$TMP/err" 2>&1 &&
   GCC_GRAPH_PROFILE="$TMP/prof.json" "$GG" run "$TMP/prof.so" --inputs $C/io.safetensors -o "$TMP/prof_out.st" 2>"$TMP/perr" &&
   "$BUILD/test-golden" --compare "$TMP/prof_out.st" $C/io.safetensors >>"$TMP/err" 2>&1 &&
   grep -q "gcc-graph profile: run, 1 runs" "$TMP/perr" && python3 -c "
import json, sys
j = json.load(open(sys.argv[1])); ev = [e for e in j['traceEvents'] if e['ph'] == 'X']
assert j['otherData']['device'].startswith('cuda'), j['otherData']
assert ev and all(e['dur'] >= 0 and e['cat'] == 'run' for e in ev) and sum(e['dur'] for e in ev) > 0, ev[:3]
assert any(e['name'].startswith('linear') for e in ev) and all(a['ts'] <= b['ts'] for a, b in zip(ev, ev[1:]))" "$TMP/prof.json" >>"$TMP/err" 2>&1 &&
   "$GG" explain $C/model.pt2 --target cuda --html "$TMP/prof.html" --profile "$TMP/prof.json" >>"$TMP/err" 2>&1 &&
   grep -q '"target":"cuda (sm_' "$TMP/prof.html" &&
   python3 tests/report_page.py "$TMP/prof.html" --profile >>"$TMP/err" 2>&1; then
  pass=$((pass + 1))
else
  echo "FAIL: GCC_GRAPH_PROFILE on a CUDA model: $(tail -n 5 "$TMP/err") $(tail -n 3 "$TMP/perr")"; fail=$((fail + 1))
fi
# a node's time is its kernels' own, back to back (each tick's gate holds the GPU until the node is
# all queued): bert_tiny's 22 nodes added up to 1.39x its CUDA graph's run on the H200 (1.8 us a
# node over it), 1.81x without the gates (3.7 us: the GPU waiting for each launch)
if "$GG" bench "$TMP/prof.so" --inputs $C/io.safetensors --iters 50 >"$TMP/pb" 2>>"$TMP/err" &&
   GCC_GRAPH_PROFILE="$TMP/prof2.json" "$GG" bench "$TMP/prof.so" --inputs $C/io.safetensors --iters 20 >>"$TMP/err" 2>&1 &&
   python3 -c "
import json, sys, statistics, collections
graph = json.loads(open(sys.argv[1]).read().splitlines()[-1])['median_ms']
per = collections.defaultdict(list)
for e in json.load(open(sys.argv[2]))['traceEvents']:
    if e['ph'] == 'X': per[e['name']].append(e['dur'])
nodes = sum(statistics.median(v) for v in per.values()) / 1e3
print('graph %.3f ms, nodes %.3f ms (%d)' % (graph, nodes, len(per)))
assert len(per) > 20 and 0.2 * graph < nodes < 1.6 * graph, (graph, nodes)" "$TMP/pb" "$TMP/prof2.json" >>"$TMP/err" 2>&1; then
  pass=$((pass + 1)); tail -n 1 "$TMP/err"
else
  echo "FAIL: GCC_GRAPH_PROFILE's node times against the CUDA graph's run: $(tail -n 3 "$TMP/err")"; fail=$((fail + 1))
fi
# bench/gpu_trace.py: each kernel's time in the replayed graph (CUPTI, through torch.profiler); one
# call's kernels add up to no more than the graph's run (nothing serialized), and it names the nodes
if "$GG" compile $C/model.pt2 --target cuda --debug-dir "$TMP/trdbg" -o "$TMP/tr.so" >"$TMP/err" 2>&1 &&
   "$GG" explain $C/model.pt2 --target cuda --json >"$TMP/tr.json" 2>>"$TMP/err" &&
   python3 bench/gpu_trace.py "$TMP/tr.so" $C/io.safetensors "$TMP/trdbg/model.cu" 5 --explain "$TMP/tr.json" --ceiling 700 >"$TMP/trace" 2>>"$TMP/err" &&
   python3 -c "
import re, sys
t = open(sys.argv[1]).read()
span = float(re.search(r'^graph run .*: ([0-9.]+) ms', t, re.M).group(1))
n, ms = re.search(r'^(\d+) kernels, ([0-9.]+) ms of kernel time', t, re.M).groups()
assert 0.3 * span <= float(ms) <= span + 0.002 and int(n) > 10, (span, n, ms)
assert re.search(r'^\| k\d+ .*node ', t, re.M) and re.search(r'^products: \d+ in the schedule', t, re.M), t" "$TMP/trace" >>"$TMP/err" 2>&1; then
  pass=$((pass + 1)); grep "^graph run\|kernels, " "$TMP/trace"
else
  echo "FAIL: bench/gpu_trace.py: $(tail -n 5 "$TMP/err") $(head -n 3 "$TMP/trace")"; fail=$((fail + 1))
fi
# GCC_GRAPH_PROFILER_REPLAYS=1 with ncu --profile-from-start off: only the graph's replays are
# profiled (every call the same kernels: bench's runs after the first, uncaptured one), not its timing of
# cuBLASLt's candidates, which ncu's serialization would make choose at random
if command -v ncu >/dev/null 2>&1; then
  if GCC_GRAPH_PROFILER_REPLAYS=1 ncu --profile-from-start off --csv --graph-profiling node --metrics gpu__time_duration.sum \
       "$GG" bench "$TMP/tr.so" --inputs $C/io.safetensors --iters 2 >"$TMP/ncu1" 2>>"$TMP/err" &&
     ncu --csv --graph-profiling node --metrics gpu__time_duration.sum "$GG" bench "$TMP/tr.so" --inputs $C/io.safetensors --iters 2 >"$TMP/ncu0" 2>>"$TMP/err" &&
     python3 -c "
import sys
sys.path.insert(0, 'bench')
from gpu_profile import kernels, last_call
r1, r0 = kernels(sys.argv[1]), kernels(sys.argv[2])
k = len(last_call(r1))
n1 = [n for n, _ in r1]
assert len(n1) % k == 0 and len(n1) >= 2 * k and n1 == n1[:k] * (len(n1) // k), (len(n1), k)
assert len(r0) > len(r1), (len(r0), len(r1))
print('ncu: %d kernels a call, %d profiled with the replays only, %d without' % (k, len(r1), len(r0)))" "$TMP/ncu1" "$TMP/ncu0" >>"$TMP/err" 2>&1; then
    pass=$((pass + 1)); tail -n 1 "$TMP/err"
  else
    echo "FAIL: GCC_GRAPH_PROFILER_REPLAYS under ncu: $(tail -n 3 "$TMP/err")"; fail=$((fail + 1))
  fi
else
  echo "(ncu not found: GCC_GRAPH_PROFILER_REPLAYS not tested)"
fi
T=tests/corpus/train/mlp_train
if "$GG" compile $T/model.pt2 --train --target cuda -o "$TMP/prof_t.so" >"$TMP/err" 2>&1 &&
   GCC_GRAPH_PROFILE=1 "$GG" bench "$TMP/prof_t.so" --inputs $T/io.safetensors --iters 2 >"$TMP/perr" 2>&1 &&
   grep -q "gcc-graph profile: backward, " "$TMP/perr" && grep -q "gcc-graph profile: forward, " "$TMP/perr"; then
  pass=$((pass + 1))
else
  echo "FAIL: GCC_GRAPH_PROFILE on a CUDA training model: $(tail -n 5 "$TMP/err") $(tail -n 5 "$TMP/perr")"; fail=$((fail + 1))
fi
echo "== CUDA: check --train --precision bf16 holds the compiled stage (the fused attention's bf16 P and dS) to bfloat16's tolerance, or to --tol"
T=tests/extra/train_attention_bf16
if "$GG" check $T/model.pt2 --train --target cuda --precision bf16 --inputs $T/io.safetensors >"$TMP/chk" 2>&1 && grep -q "within 0.03, the lower type's" "$TMP/chk" &&
   ! "$GG" check $T/model.pt2 --train --target cuda --precision bf16 --tol 1e-4 --inputs $T/io.safetensors >"$TMP/chk2" 2>&1 && grep -q "compiled .*DEPARTS: grad\." "$TMP/chk2"; then
  pass=$((pass + 1))
else
  echo "FAIL: check --precision bf16 on the GPU: $(tail -n 3 "$TMP/chk") / $(tail -n 3 "$TMP/chk2")"; fail=$((fail + 1))
fi
echo "== CUDA: check --precision bf16 of a post-norm encoder (bert_tiny: its norms store float32 and the bfloat16 copy the products read)"
T=tests/corpus/models/bert_tiny
if "$GG" check $T/model.pt2 --target cuda --precision bf16 --inputs $T/io.safetensors >"$TMP/chk" 2>&1 && grep -q "within 0.03, the lower type's" "$TMP/chk"; then
  pass=$((pass + 1))
else
  echo "FAIL: check --precision bf16 of bert_tiny on the GPU: $(tail -n 3 "$TMP/chk")"; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
