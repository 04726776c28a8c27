#!/bin/sh
# run.sh: every test of gcc-graph. Unit tests, golden tests over the corpus (each case's interpreter
# result against PyTorch's), the command-line contracts, and hostile inputs. Ends with
# "N passed, N failed"; exits non-zero if anything failed.
BUILD=${BUILD:-build}
GG=$BUILD/gcc-graph
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# the suite's compiled runtimes in its own cache (compile.c, runtime_cache_dir), not the user's
export XDG_CACHE_HOME="$TMP/xdg"
unset GCC_GRAPH_CACHE_DIR GCC_GRAPH_NO_CACHE
pass=0
fail=0

# add the counts of a sub-runner's closing "N passed, N failed" line
tally() {
  line=$(tail -n 1 "$1")
  p=${line%% passed*}
  f=${line#*passed, }
  f=${f%% failed*}
  case "$p$f" in *[!0-9]*|"") echo "FAIL: $2 did not finish: $line"; fail=$((fail + 1)); return;; esac
  pass=$((pass + p))
  fail=$((fail + f))
  grep '^FAIL' "$1"
}

ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect STATUS SUBSTRING -- command...: the exit status and a piece of stderr (or stdout)
expect() {
  want=$1 msg=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" != "$want" ]; then no "'$*' exited $rc, expected $want: $(head -c 300 "$TMP/err")"; return; fi
  if [ -n "$msg" ] && ! grep -qF -- "$msg" "$TMP/err" "$TMP/out"; then no "'$*': output lacks '$msg': $(head -c 300 "$TMP/err")"; return; fi
  ok
}

# a safetensors file with one tensor of zeros: mk_st FILE NAME DTYPE SHAPE NBYTES
mk_st() {
  hdr="{\"$2\":{\"dtype\":\"$3\",\"shape\":[$4],\"data_offsets\":[0,$5]}}"
  while [ $(( ${#hdr} % 8 )) != 0 ]; do hdr="$hdr "; done
  n=${#hdr}
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))\\000\\000\\000\\000" >"$1"
  printf '%s' "$hdr" >>"$1"
  head -c "$5" /dev/zero >>"$1"
}

echo "== unit"
"$BUILD/test-unit" >"$TMP/unit" 2>&1
tally "$TMP/unit" unit
# the runtime's own product kernel, every way models call it, against float64 (tests/kernel.c)
OMP_NUM_THREADS=2 "$BUILD/test-kernel" >"$TMP/kernel" 2>&1
tally "$TMP/kernel" kernel

echo "== golden: every corpus case under the interpreter against PyTorch"
"$BUILD/test-golden" tests/corpus/*/* tests/extra/* tests/extra_aten/* >"$TMP/golden" 2>&1
tally "$TMP/golden" golden

echo "== rewrites: functionalized, weight-folded and decomposed graphs against the originals, in the interpreter"
"$BUILD/test-golden" --rewrite tests/corpus/*/* tests/extra/* tests/extra_aten/* >"$TMP/rewrite" 2>&1
tally "$TMP/rewrite" rewrite

echo "== compiled: every case compiled to a .so, run, and compared with PyTorch"
mkdir -p "$TMP/cc"
ls -d tests/corpus/*/* tests/extra/* tests/extra_aten/* | xargs -P 2 -n 1 -I CASE sh tests/compile_case.sh CASE "$TMP/cc" >"$TMP/compiled" 2>&1
pass=$((pass + $(grep -c '^ok' "$TMP/compiled")))
fail=$((fail + $(grep -c '^FAIL' "$TMP/compiled")))
grep '^FAIL' "$TMP/compiled"

echo "== CUDA sources: every case's CUDA C generated (--target cuda -S, training cases with --train) and compiled by nvcc"
if command -v "${NVCC:-nvcc}" >/dev/null 2>&1; then
  mkdir -p "$TMP/cu"
  ls -d tests/corpus/*/* tests/extra/* tests/extra_aten/* | xargs -P 2 -n 1 -I CASE sh tests/cuda_source.sh CASE "$TMP/cu" >"$TMP/cuda" 2>&1
  pass=$((pass + $(grep -c '^ok' "$TMP/cuda")))
  fail=$((fail + $(grep -c '^FAIL' "$TMP/cuda")))
  grep '^FAIL' "$TMP/cuda"
  # a whole CUDA .so: the ABI's symbols; without a GPU it refuses to open with a message
  expect 0 "" -- "$GG" compile tests/corpus/models/cnn_small/model.pt2 --target cuda --cuda-arch sm_80 -o "$TMP/cnn_cuda.so"
  expect 0 "gg_set_stream" -- nm -D --defined-only "$TMP/cnn_cuda.so"
  expect 0 'device cuda' -- "$GG" explain "$TMP/cnn_cuda.so"
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    expect 1 "runs on a CUDA GPU and none is usable" -- "$GG" run "$TMP/cnn_cuda.so" --inputs tests/corpus/models/cnn_small/io.safetensors -o "$TMP/o.st"
  fi
  # the kernels' fatbinaries are cached: the same model again takes no nvcc for them, and the same .so
  # (a cache of its own, given the runtime's objects already compiled: they take nvcc 15 s here)
  mkdir -p "$TMP/kc/gcc-graph"
  cp "${XDG_CACHE_HOME:-$HOME/.cache}"/gcc-graph/runtime-*.o "$TMP/kc/gcc-graph/" 2>/dev/null
  expect 0 "[cache] kernels miss" -- env XDG_CACHE_HOME="$TMP/kc" GCC_GRAPH_LOGS=cache "$GG" compile tests/corpus/models/cnn_small/model.pt2 --target cuda --cuda-arch sm_80 -o "$TMP/kc1.so"
  expect 0 "[cache] kernels hit" -- env XDG_CACHE_HOME="$TMP/kc" GCC_GRAPH_LOGS=cache "$GG" compile tests/corpus/models/cnn_small/model.pt2 --target cuda --cuda-arch sm_80 -o "$TMP/kc2.so"
  expect 0 "" -- cmp "$TMP/kc1.so" "$TMP/kc2.so"
  # the kernels in parts as -j allows (cnn_train's 27 kernels: 3 parts with -j 4, one with -j 2), each part
  # its own fatbinary; the host code is C
  rm -rf "$TMP/parts4" "$TMP/parts2"
  "$GG" compile tests/corpus/train/cnn_train/model.pt2 --train --target cuda -j 4 -S -o "$TMP/parts4" >/dev/null 2>&1
  "$GG" compile tests/corpus/train/cnn_train/model.pt2 --train --target cuda -j 2 -S -o "$TMP/parts2" >/dev/null 2>&1
  got="$(ls "$TMP"/parts4/model*.cu | wc -l)|$(ls "$TMP"/parts2/model*.cu | wc -l)|$(cat "$TMP"/parts4/model*.cu | grep -c '__global__')|$(grep -c '__global__' "$TMP/parts2/model.cu")|$(grep -c 'incbin' "$TMP/parts4/kernels.c")"
  if [ "$got" = "3|1|27|27|3" ]; then ok; else no "CUDA kernel parts: $got (files -j4|-j2|kernels|kernels|fatbinaries), expected 3|1|27|27|3"; fi
  # a CUDA training .so: the training entry points, and the ABI test links against it (make test-cuda runs it)
  expect 0 "" -- "$GG" compile tests/corpus/train/mlp_train/model.pt2 --train --optimizer adamw --target cuda --cuda-arch sm_80 -o "$TMP/train_cuda.so"
  expect 0 "gg_set_grad_accumulation" -- nm -D --defined-only "$TMP/train_cuda.so"
  expect 0 "gg_set_data_parallel_nccl" -- nm -D --defined-only "$TMP/train_cuda.so"
  expect 0 "optimizer: adamw" -- "$GG" explain "$TMP/train_cuda.so"
  expect 0 "" -- ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/train_cuda.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/train_cuda"
else
  echo "(nvcc not found: CUDA sources not compiled)"
fi
expect 2 "unknown target 'tpu'" -- "$GG" compile tests/corpus/models/mlp/model.pt2 --target tpu -o "$TMP/t.so"
expect 2 "--cuda-arch takes sm_XY" -- "$GG" compile tests/corpus/models/mlp/model.pt2 --target cuda --cuda-arch 90 -o "$TMP/t.so"

M=tests/corpus/models
echo "== training: autograd and both partitions under the interpreter, every derivative rule against finite differences"
TR=$(ls -d tests/corpus/train*/* tests/extra/train_* tests/extra_aten/train_*)
"$BUILD/test-golden" --train $TR >"$TMP/train" 2>&1
tally "$TMP/train" train
"$BUILD/test-golden" --gradcheck tests/corpus/*/* tests/extra/* tests/extra_aten/* tests/gradcheck/*/ >"$TMP/gradcheck" 2>&1
tally "$TMP/gradcheck" gradcheck
grep "derivative rules checked" "$TMP/gradcheck"
T=tests/corpus/train/mlp_train
# the optimizers against their formulas, through the training entry points
expect 0 "" -- "$GG" compile $T/model.pt2 --train --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 0.01 -o "$TMP/sgd.so"
expect 0 "" -- ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/sgd.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/train_sgd"
expect 0 "0 failed" -- "$TMP/train_sgd" $T/io.safetensors sgd 0.1 0.9 0.01
expect 0 "" -- "$GG" compile $T/model.pt2 --train --optimizer adam --lr 0.01 --betas 0.8,0.99 --eps 1e-6 --weight-decay 0.001 -o "$TMP/adam.so"
expect 0 "" -- ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/adam.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/train_adam"
expect 0 "0 failed" -- "$TMP/train_adam" $T/io.safetensors adam 0.01 0.8 0.99 1e-6 0.001
expect 0 "" -- "$GG" compile $T/model.pt2 --train --optimizer adamw --lr 0.01 --betas 0.8,0.99 --eps 1e-6 --weight-decay 0.1 -o "$TMP/adamw.so"
expect 0 "" -- ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/adamw.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/train_adamw"
expect 0 "0 failed" -- "$TMP/train_adamw" $T/io.safetensors adamw 0.01 0.8 0.99 1e-6 0.1
# weight decay left out: 0 for SGD and Adam, 0.01 for AdamW (torch.optim's defaults), and the steps follow that
expect 0 "" -- "$GG" compile $T/model.pt2 --train --optimizer sgd --lr 0.1 --momentum 0.9 -o "$TMP/sgd0.so"
expect 0 "weight decay 0, momentum 0.9" -- "$GG" explain "$TMP/sgd0.so"
expect 0 "" -- ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/train_abi.c "$TMP/sgd0.so" -Wl,-rpath,"$TMP" -lm -o "$TMP/train_sgd0"
expect 0 "0 failed" -- "$TMP/train_sgd0" $T/io.safetensors sgd 0.1 0.9 0
expect 0 "" -- "$GG" compile $T/model.pt2 --train --optimizer adamw -o "$TMP/adamw0.so"
expect 0 "weight decay 0.01," -- "$GG" explain "$TMP/adamw0.so"
# the default partition compiles and agrees too; explain reports both
C=tests/corpus/train/cnn_train
expect 0 "" -- "$GG" compile $C/model.pt2 --train --partition default -o "$TMP/cnn_default.so"
expect 0 "" -- "$GG" run "$TMP/cnn_default.so" --inputs $C/io.safetensors -o "$TMP/cnn_default.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/cnn_default.st" $C/io.safetensors
expect 0 "saved for the backward: min-cut 7 tensors" -- "$GG" explain $C/model.pt2 --train
expect 0 "partition default: saves 8 tensors" -- "$GG" explain "$TMP/cnn_default.so"
# run --train under the interpreter writes the gradients
expect 0 "" -- "$GG" run $C/model.pt2 --train --inputs $C/io.safetensors -o "$TMP/cnn_interp.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/cnn_interp.st" $C/io.safetensors
# a training .so also runs as a plain model (gg_run: the forward alone)
expect 0 "" -- ${CC:-cc} -Iinclude samples/run_model.c -ldl -o "$TMP/run_model_t"
expect 0 "out.0: []" -- "$TMP/run_model_t" "$TMP/cnn_default.so"
expect 0 "training steps (forward + backward)" -- "$GG" bench "$TMP/cnn_default.so" --inputs $C/io.safetensors --iters 3
# usage and refusals
expect 2 "go with --train" -- "$GG" compile $T/model.pt2 --optimizer sgd -o "$TMP/x.so"
expect 2 "bad value 'fast'" -- "$GG" compile $T/model.pt2 --train --optimizer fast -o "$TMP/x.so"
expect 2 "bad value '-1'" -- "$GG" compile $T/model.pt2 --train --lr -1 -o "$TMP/x.so"
expect 1 "no output 3 to use as the loss" -- "$GG" compile $T/model.pt2 --train --loss 3 -o "$TMP/x.so"
expect 1 "is not a scalar: the loss must have one element" -- "$GG" compile $M/mlp/model.pt2 --train -o "$TMP/x.so"

echo "== command line"
M=tests/corpus/models
expect 0 "gcc-graph 0" -- "$GG" --version
expect 0 "usage: gcc-graph <command>" -- "$GG" --help
expect 0 "usage: gcc-graph run" -- "$GG" run --help
expect 0 "usage: gcc-graph explain" -- "$GG" explain --help
expect 2 "usage" -- "$GG"
expect 2 "unknown command 'frob'" -- "$GG" frob
expect 2 "unknown option '--frob'" -- "$GG" run $M/mlp/model.pt2 --frob
# a usage error is what is wrong, the usage line and where to read more; close misspellings are named
expect 2 "did you mean '--optimizer'?" -- "$GG" compile $M/mlp/model.pt2 --train --optimzer sgd -o "$TMP/x.so"
expect 2 "did you mean 'compile'?" -- "$GG" compil $M/mlp/model.pt2
expect 2 "Run 'gcc-graph run --help' for its options." -- "$GG" run $M/mlp/model.pt2 --frob
[ "$(wc -l <"$TMP/err")" -le 3 ] && ok || no "a usage error took $(wc -l <"$TMP/err") lines"
expect 2 "missing --inputs" -- "$GG" run $M/mlp/model.pt2 -o "$TMP/o.st"
expect 2 "needs a value" -- "$GG" run $M/mlp/model.pt2 --inputs
expect 1 "cannot open" -- "$GG" explain "$TMP/nonexistent.pt2"
# run writes out.N that match PyTorch (in.N by position)
expect 0 "" -- "$GG" run $M/mlp/model.pt2 --inputs $M/mlp/io.safetensors -o "$TMP/mlp.st" --interpret
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/mlp.st" $M/mlp/io.safetensors
expect 0 "" -- "$GG" run $M/bert_tiny/model.pt2 --inputs $M/bert_tiny/io.safetensors -o "$TMP/bert.st" --interpret
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/bert.st" $M/bert_tiny/io.safetensors
expect 0 "out.0" -- "$BUILD/test-golden" --compare "$TMP/bert.st" $M/bert_tiny/io.safetensors --verbose   # as make demo calls it
# training forward: the loss, and the buffers batch norm mutates
expect 0 "" -- "$GG" run tests/corpus/train/cnn_train/model.pt2 --inputs tests/corpus/train/cnn_train/io.safetensors -o "$TMP/cnn.st"
expect 0 "" -- grep -q buffer_after.bn.running_mean "$TMP/cnn.st"
expect 0 "" -- grep -q buffer_after.bn.num_batches_tracked "$TMP/cnn.st"
# an input by its own name; a bare model.json with --weights; without them
mk_st "$TMP/x.st" x F32 8,64 2048
expect 0 "" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/x.st" -o "$TMP/o.st"
expect 0 "" -- "$GG" run tests/cases/mlp_json/model.json --weights tests/cases/mlp_json/weights.safetensors --inputs $M/mlp/io.safetensors -o "$TMP/j.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/j.st" $M/mlp/io.safetensors
expect 1 "parameter 'fc1.weight' has no data" -- "$GG" run tests/cases/mlp_json/model.json --inputs $M/mlp/io.safetensors -o "$TMP/j.st"
# guards
mk_st "$TMP/b9.st" in.0 F32 9,64 2304
expect 1 "guard failed: tensor 'x' size mismatch at index 0. expected 8, actual 9" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/b9.st" -o "$TMP/o.st"
mk_st "$TMP/f64.st" in.0 F64 8,64 4096
expect 1 "guard failed: tensor 'x' dtype mismatch. expected float32, actual float64" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/f64.st" -o "$TMP/o.st"
mk_st "$TMP/f63.st" in.0 F32 8,63 2016
expect 1 "guard failed: tensor 'x' size mismatch at index 1. expected 64, actual 63" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/f63.st" -o "$TMP/o.st"
mk_st "$TMP/extra.st" in.1 F32 8,64 2048
expect 1 "no tensor for input 0" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/extra.st" -o "$TMP/o.st"
mk_st "$TMP/b3.st" in.0 F32 3,64 768
expect 0 "" -- "$GG" run $M/mlp_dynamic_batch/model.pt2 --inputs "$TMP/b3.st" -o "$TMP/o.st"
mk_st "$TMP/b65.st" in.0 F32 65,64 16640
expect 1 "expected s77 in [1, 64], actual 65" -- "$GG" run $M/mlp_dynamic_batch/model.pt2 --inputs "$TMP/b65.st" -o "$TMP/o.st"
expect 1 "header length" -- "$GG" run $M/mlp/model.pt2 --inputs tests/bad/truncated.json -o "$TMP/o.st"
# explain
expect 0 "s77 in [1, 64]" -- "$GG" explain $M/mlp_dynamic_batch/model.pt2
expect 0 "float32[s77, 64]" -- "$GG" explain $M/mlp_dynamic_batch/model.pt2
expect 0 "parameter 'fc1.weight'" -- "$GG" explain $M/mlp/model.pt2
expect 0 "unsupported nodes (graph breaks): 0" -- "$GG" explain $M/llama_tiny/model.pt2
expect 0 "File \"model.py\", line 3, in forward" -- "$GG" explain tests/bad/unknown_op.json
expect 0 "'torch.ops.aten.frobnicate.default'" -- "$GG" explain tests/bad/unknown_op.json
# names that look like code are carried as data and printed escaped
expect 0 '/* \n */' -- "$GG" explain tests/bad/evil_names.json

# the op list in docs/ is the table's
"$GG" ops >"$TMP/ops.md"
expect 0 "" -- cmp "$TMP/ops.md" docs/ops.md

echo "== compiled models: guards, determinism, weights, bench, samples"
"$GG" compile $M/mlp/model.pt2 -o "$TMP/mlp.so" 2>"$TMP/err" || no "compile mlp: $(cat "$TMP/err")"
expect 1 "guard failed: tensor 'x' size mismatch at index 0. expected 8, actual 9" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/b9.st" -o "$TMP/o.st"
expect 1 "guard failed: tensor 'x' dtype mismatch. expected float32, actual float64" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/f64.st" -o "$TMP/o.st"
expect 1 "guard failed: tensor 'x' size mismatch at index 1. expected 64, actual 63" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/f63.st" -o "$TMP/o.st"
expect 1 "guard failed: expected 1 inputs, got a tensor named 'in.1'" -- "$GG" run "$TMP/mlp.so" --inputs tests/corpus/ops/add_alpha/io.safetensors -o "$TMP/o.st"
expect 0 "" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/x.st" -o "$TMP/o.st"
"$GG" compile $M/mlp_dynamic_batch/model.pt2 -o "$TMP/dyn.so" 2>"$TMP/err" || no "compile mlp_dynamic_batch: $(cat "$TMP/err")"
expect 0 "" -- "$GG" run "$TMP/dyn.so" --inputs "$TMP/b3.st" -o "$TMP/o3.st"
expect 0 "" -- "$GG" run "$TMP/dyn.so" --inputs "$TMP/b9.st" -o "$TMP/o9.st"
# hostile DLTensors through the C ABI: each refused with its message (tests/guards.c)
if ${CC:-cc} -Iinclude -I/usr/include/x86_64-linux-gnu tests/guards.c "$TMP/dyn.so" -Wl,-rpath,"$TMP" -o "$TMP/guards" 2>"$TMP/err"; then
  "$TMP/guards" >"$TMP/guards.out" 2>&1
  tally "$TMP/guards.out" guards
else
  no "cannot build tests/guards.c: $(head -c 300 "$TMP/err")"
fi
expect 1 "guard failed: tensor 'x' size mismatch at index 0. expected s77 in [1, 64], actual 65" -- "$GG" run "$TMP/dyn.so" --inputs "$TMP/b65.st" -o "$TMP/o.st"
# a failed guard says what to do
expect 1 "actual 9; the model was exported with this size fixed: to vary it, export with dynamic_shapes" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/b9.st" -o "$TMP/o.st"
expect 1 "actual 9; the model was exported with this size fixed" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/b9.st" -o "$TMP/o.st"
expect 1 "actual float64; convert it (PyTorch: x.to(torch.float32)) or export the model with float64 inputs" -- "$GG" run "$TMP/mlp.so" --inputs "$TMP/f64.st" -o "$TMP/o.st"
expect 1 "actual float64; convert it (PyTorch: x.to(torch.float32))" -- "$GG" run $M/mlp/model.pt2 --inputs "$TMP/f64.st" -o "$TMP/o.st"
expect 1 "actual 65; to allow it, export with a wider torch.export.Dim range" -- "$GG" run "$TMP/dyn.so" --inputs "$TMP/b65.st" -o "$TMP/o.st"
expect 1 "(name them in.0 to in.0, or by the inputs' names" -- "$GG" run "$TMP/mlp.so" --inputs tests/corpus/ops/add_alpha/io.safetensors -o "$TMP/o.st"
expect 0 "" -- "$GG" run "$TMP/dyn.so" --inputs $M/mlp_dynamic_batch/io.safetensors -o "$TMP/od.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/od.st" $M/mlp_dynamic_batch/io.safetensors
# the same model and flags give the same bytes, wherever they are built
mkdir -p "$TMP/d1/x" "$TMP/d2/y/z"
(cd "$TMP/d1/x" && "$OLDPWD/$GG" compile "$OLDPWD/$M/bert_tiny/model.pt2" -o bert.so) 2>"$TMP/err" || no "compile bert_tiny: $(cat "$TMP/err")"
(cd "$TMP/d2/y/z" && "$OLDPWD/$GG" compile "$OLDPWD/$M/bert_tiny/model.pt2" -o bert.so) 2>"$TMP/err" || no "compile bert_tiny: $(cat "$TMP/err")"
expect 0 "" -- cmp "$TMP/d1/x/bert.so" "$TMP/d2/y/z/bert.so"
# weights written while the compiler runs (what models with 64 MiB of weights or more do; forced here
# for a small one): the same bytes, and the model runs
expect 0 "weights written while the compiler ran" -- env GCC_GRAPH_TEST_BLOB_OVERLAP=1 "$GG" compile $M/bert_tiny/model.pt2 -o "$TMP/bert_ov.so" -v
expect 0 "" -- cmp "$TMP/d1/x/bert.so" "$TMP/bert_ov.so"
expect 0 "" -- "$GG" run "$TMP/bert_ov.so" --inputs $M/bert_tiny/io.safetensors -o "$TMP/bert_ov.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/bert_ov.st" $M/bert_tiny/io.safetensors
expect 0 "" -- "$GG" compile $M/bert_tiny/model.pt2 -S -o "$TMP/src1"
expect 0 "" -- "$GG" compile $M/bert_tiny/model.pt2 -S -o "$TMP/src2"
expect 0 "" -- cmp "$TMP/src1/model.c" "$TMP/src2/model.c"
expect 0 "" -- grep -q "^static .* k0(" "$TMP/src1/model.c"
expect 0 "" -- grep -qF "/* gather: node embedding (torch.ops.aten.embedding.default) */" "$TMP/src1/model.c"
# weights left in the .pt2 and mapped at open
expect 0 "" -- "$GG" compile $M/mlp/model.pt2 --weights external -o "$TMP/mlp_ext.so"
expect 1 "keeps its weights in a file" -- "$GG" run "$TMP/mlp_ext.so" --inputs $M/mlp/io.safetensors -o "$TMP/oe.st"
expect 1 "not the weights file" -- "$GG" run "$TMP/mlp_ext.so" --weights $M/bert_tiny/model.pt2 --inputs $M/mlp/io.safetensors -o "$TMP/oe.st"
expect 0 "" -- "$GG" run "$TMP/mlp_ext.so" --weights $M/mlp/model.pt2 --inputs $M/mlp/io.safetensors -o "$TMP/oe.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/oe.st" $M/mlp/io.safetensors
# weights appended to the .so: a stripped or truncated one is refused with a message; -S sources
# (weights.bin included by model.c) build by hand into a model that gives the same outputs
cp "$TMP/mlp.so" "$TMP/mlp_cut.so" && truncate -s -100 "$TMP/mlp_cut.so"
expect 1 "the weights appended to the model are missing or damaged" -- "$GG" run "$TMP/mlp_cut.so" --inputs "$TMP/x.st" -o "$TMP/oc.st"
if command -v strip >/dev/null; then
  strip -o "$TMP/mlp_strip.so" "$TMP/mlp.so"
  expect 1 "the weights appended to the model are missing or damaged" -- "$GG" run "$TMP/mlp_strip.so" --inputs "$TMP/x.st" -o "$TMP/oc.st"
fi
expect 0 "" -- "$GG" compile $M/mlp/model.pt2 -S -o "$TMP/mlp_src"
(cd "$TMP/mlp_src" && cc -O2 -std=gnu11 -fPIC -fopenmp -shared model.c gg_rt.c -lopenblas -lm -o hand.so) 2>"$TMP/err" || no "hand build of -S sources: $(head -c 300 "$TMP/err")"
expect 0 "" -- "$GG" run "$TMP/mlp_src/hand.so" --inputs $M/mlp/io.safetensors -o "$TMP/oh.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/oh.st" $M/mlp/io.safetensors
# a bare model.json with --weights compiles the same way
expect 0 "" -- "$GG" compile tests/cases/mlp_json/model.json --weights tests/cases/mlp_json/weights.safetensors -o "$TMP/mj.so"
expect 0 "" -- "$GG" run "$TMP/mj.so" --inputs $M/mlp/io.safetensors -o "$TMP/mj.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/mj.st" $M/mlp/io.safetensors
# names that look like code compile safely: they only reach the C file escaped
expect 0 "" -- "$GG" compile tests/bad/evil_names.json -o "$TMP/evil.so"
mk_st "$TMP/ev.st" in.0 F32 2,3 24
expect 1 "no tensor for input 1" -- "$GG" run "$TMP/evil.so" --inputs "$TMP/ev.st" -o "$TMP/o.st"
# bench: the last line is JSON
"$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 5 >"$TMP/bench" 2>&1 || no "bench failed: $(cat "$TMP/bench")"
expect 0 '"median_ms"' -- tail -n 1 "$TMP/bench"
expect 0 '"threads"' -- tail -n 1 "$TMP/bench"
# its order statistics in order: min <= median <= p90 <= p99 <= max, over 20 runs
"$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 20 --warmup 1 >"$TMP/bench20" 2>&1 || no "bench failed: $(cat "$TMP/bench20")"
expect 0 "" -- python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); v=[j[k] for k in ('min_ms','median_ms','p90_ms','p99_ms','max_ms')]; sys.exit(0 if v == sorted(v) and j['mean_ms'] <= j['max_ms'] else 1)" "$TMP/bench20"
expect 2 "bad count" -- "$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 0
# compare: outputs against expected ones, tensor by tensor (exit 0 agree, 1 depart or missing, 2 usage)
expect 0 "" -- "$GG" run "$TMP/mlp.so" --inputs $M/mlp/io.safetensors -o "$TMP/cmp.st"
expect 0 "all 1 agree" -- "$GG" compare "$TMP/cmp.st" "$TMP/cmp.st"
expect 0 "agrees (relative error" -- "$GG" compare $M/mlp/io.safetensors "$TMP/cmp.st"
expect 0 "not compared" -- "$GG" compare $M/mlp/io.safetensors "$TMP/cmp.st"
expect 1 "DEPARTS: relative error" -- "$GG" compare $M/mlp/io.safetensors "$TMP/cmp.st" --tol 0
expect 1 "'in.0'                   float32[8, 64]         MISSING" -- "$GG" compare "$TMP/cmp.st" $M/mlp/io.safetensors
mk_st "$TMP/cmp_shape.st" out.0 F32 8,9 288
expect 1 "has float32[8, 9]" -- "$GG" compare "$TMP/cmp_shape.st" "$TMP/cmp.st"
mk_st "$TMP/cmp_int.st" out.0 I64 8,10 640
expect 1 "DEPARTS" -- "$GG" compare "$TMP/cmp_int.st" "$TMP/cmp.st"
expect 1 "cannot open" -- "$GG" compare /nonexistent.st "$TMP/cmp.st"
expect 2 "missing EXPECTED" -- "$GG" compare "$TMP/cmp.st"
expect 2 "did you mean '--tol'" -- "$GG" compare "$TMP/cmp.st" "$TMP/cmp.st" --tl 1
cp /lib/x86_64-linux-gnu/libm.so.6 "$TMP/libm.so" 2>/dev/null || cp "$(ls /usr/lib/*/libm.so.6 | head -n 1)" "$TMP/libm.so"
expect 1 "writes through a view made by 'split.Tensor'" -- "$GG" compile tests/bad/write_through_split.json -o "$TMP/ws.so"
expect 1 "not a gcc-graph model" -- "$GG" run "$TMP/libm.so" --inputs $M/mlp/io.safetensors -o "$TMP/o.st"
expect 1 "cannot load" -- "$GG" run tests/bad/truncated.json.so --inputs $M/mlp/io.safetensors -o "$TMP/o.st"

# --time-report: a line per stage and the total
expect 0 "cc (build the .so)" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/tr.so" --time-report
expect 0 "write .so + weights" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/tr.so" --time-report
expect 0 "decompose" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/tr.so" --time-report
expect 0 "total" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/tr.so" --time-report
# --debug-dir: the graph after each stage, one line per node, and the timings
expect 0 "" -- "$GG" compile tests/corpus/train/mlp_train/model.pt2 --train -o "$TMP/dd.so" --debug-dir "$TMP/dd"
expect 0 "'linear': float32[16, 64] = linear(input='x'" -- cat "$TMP/dd/01-load.txt"
expect 0 "log_softmax.int(self='linear_2'" -- cat "$TMP/dd/04-decompose.txt"
expect 0 "gradient  'linear.grad" -- cat "$TMP/dd/05-autograd.txt"
expect 0 "saved" -- cat "$TMP/dd/07-forward.txt"
expect 0 "gradient" -- cat "$TMP/dd/06-backward.txt"
expect 0 "# the backward" -- cat "$TMP/dd/08-schedule.txt"
# the schedule stage's dump: where each node is computed (schedule.c)
expect 0 "" -- "$GG" compile tests/extra/epilogues/model.pt2 -o "$TMP/dde.so" --debug-dir "$TMP/dde" --time-report
expect 0 "'relu6.cl0' (relu6): in the epilogue of 'conv2d.cl2'" -- cat "$TMP/dde/07-schedule.txt"
expect 0 "'add_2.cl2' (add.Tensor): computed inside the loop of 'gelu.cl0'" -- cat "$TMP/dde/07-schedule.txt"
expect 0 "schedule" -- cat "$TMP/dde/timings.txt"
expect 0 "cc (build the .so)" -- cat "$TMP/dd/timings.txt"
expect 0 "Generated by gcc-graph" -- cat "$TMP/dd/model.c"
expect 0 "schedule (the compiled code)" -- cat "$TMP/dd/schedule.txt"
# the man page and --help agree: every option and variable --help names is documented there
expect 0 "" -- sh tests/man_help.sh "$GG"
# the man page renders without a warning from man and troff (a line starting with '.' is a request)
if command -v man >/dev/null 2>&1; then
  expect 0 "" -- sh -c 'w=$(MANWIDTH=80 man --warnings -l man/gcc-graph.1 2>&1 >/dev/null); [ -z "$w" ] || { echo "$w" >&2; exit 1; }'
fi
# build integration: dependency files, parallel cc, the cache, colors, logs, progress
expect 0 "" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/dep.so" -MD
expect 0 "$TMP/dep.so: $M/mlp/model.pt2" -- cat "$TMP/dep.d"
expect 0 "$M/mlp/model.pt2:" -- cat "$TMP/dep.d"
expect 0 "" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/dep.so" -MF "$TMP/other.dep"
expect 0 "$TMP/dep.so: $M/mlp/model.pt2" -- cat "$TMP/other.dep"
# (a cache of its own with the runtime's objects: the model's object of an earlier compile would be taken)
mkdir -p "$TMP/j2c/gcc-graph" && cp "$XDG_CACHE_HOME"/gcc-graph/runtime-*.o "$TMP/j2c/gcc-graph/"
expect 0 "-c model.c" -- env XDG_CACHE_HOME="$TMP/j2c" "$GG" compile $M/mlp/model.pt2 -o "$TMP/j2.so" -j 2 -v
# the model's object is cached by its code: the same model again links without cc on model.c, to the same .so
expect 0 "[cache] model hit" -- env XDG_CACHE_HOME="$TMP/j2c" GCC_GRAPH_LOGS=cache "$GG" compile $M/mlp/model.pt2 -o "$TMP/j3.so" -j 2
expect 0 "" -- cmp "$TMP/j2.so" "$TMP/j3.so"
expect 0 "model.c gg_rt.c" -- env GCC_GRAPH_NO_CACHE=1 "$GG" compile $M/mlp/model.pt2 -o "$TMP/j1.so" -j1 -v
expect 0 "" -- "$GG" run "$TMP/j1.so" --inputs $M/mlp/io.safetensors -o "$TMP/j1.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/j1.st" $M/mlp/io.safetensors
expect 2 "bad job count" -- "$GG" compile $M/mlp/model.pt2 -o "$TMP/j.so" -j 0
expect 0 "" -- env GCC_GRAPH_CACHE_DIR="$TMP/cache" "$GG" compile $M/mlp/model.pt2 -o "$TMP/c1.so"
expect 0 "cache hit" -- env GCC_GRAPH_CACHE_DIR="$TMP/cache" "$GG" compile $M/mlp/model.pt2 -o "$TMP/c2.so" -v
expect 0 "" -- cmp "$TMP/c1.so" "$TMP/c2.so"
expect 0 "[cache] miss" -- env GCC_GRAPH_CACHE_DIR="$TMP/cache" GCC_GRAPH_LOGS=cache "$GG" compile $M/mlp/model.pt2 -o "$TMP/c3.so" --cflags -O1
expect 0 "[cache] hit" -- env GCC_GRAPH_CACHE_DIR="$TMP/cache" GCC_GRAPH_LOGS=cache "$GG" compile $M/mlp/model.pt2 -o "$TMP/c3.so" --cflags -O1
# the compiled runtime, kept per compiler, flags and runtime source (by default under $XDG_CACHE_HOME):
# another model takes it from there, and its .so is the one built without the cache
expect 0 "[cache] runtime miss $TMP/rtc/gcc-graph/runtime-" -- env XDG_CACHE_HOME="$TMP/rtc" GCC_GRAPH_LOGS=cache "$GG" compile $M/mlp/model.pt2 -o "$TMP/r1.so"
expect 0 "[cache] runtime hit" -- env XDG_CACHE_HOME="$TMP/rtc" GCC_GRAPH_LOGS=cache "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/r2.so"
rm -f "$TMP"/rtc/gcc-graph/model-*.o   # (the model's object is cached too: this one compiles it, with -j1 after the runtime's cached one)
expect 0 "-c model.c" -- env XDG_CACHE_HOME="$TMP/rtc" "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/r2.so" -j1 -v
expect 0 "" -- "$GG" run "$TMP/r2.so" --inputs $M/cnn_small/io.safetensors -o "$TMP/r2.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/r2.st" $M/cnn_small/io.safetensors
expect 0 "" -- env GCC_GRAPH_NO_CACHE=1 "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/r3.so"
expect 0 "" -- cmp "$TMP/r2.so" "$TMP/r3.so"
expect 0 "[cache] runtime miss" -- env XDG_CACHE_HOME="$TMP/rtc" GCC_GRAPH_LOGS=cache "$GG" compile $M/mlp/model.pt2 -o "$TMP/r4.so" --cflags "-O2 -fno-math-errno"
expect 0 "" -- env XDG_CACHE_HOME="$TMP/rtc2" GCC_GRAPH_NO_CACHE=1 "$GG" compile $M/mlp/model.pt2 -o "$TMP/r5.so"
expect 1 "" -- test -e "$TMP/rtc2"
expect 1 "$(printf '\033[1;31merror:')" -- "$GG" run nowhere.pt2 --inputs x -o y -fdiagnostics-color=always
expect 1 "gcc-graph: error: nowhere.pt2" -- "$GG" run nowhere.pt2 --inputs x -o y -fdiagnostics-color=never
expect 1 "gcc-graph: error: nowhere.pt2" -- "$GG" run nowhere.pt2 --inputs x -o y
expect 2 "bad value in '-fdiagnostics-color=pink'" -- "$GG" run nowhere.pt2 -fdiagnostics-color=pink
expect 2 "unknown category 'bogus'" -- env GCC_GRAPH_LOGS=bogus "$GG" ops
expect 0 "[decomp] node 'cross_entropy_loss': cross_entropy_loss ->" -- env GCC_GRAPH_LOGS=decomp "$GG" compile tests/corpus/train/mlp_train/model.pt2 -o "$TMP/lg.so"
expect 0 "[autograd] node 'linear' (linear)" -- env GCC_GRAPH_LOGS=autograd,partition "$GG" compile tests/corpus/train/mlp_train/model.pt2 --train -o "$TMP/lg.so"
expect 0 "[partition] min-cut: forward" -- env GCC_GRAPH_LOGS=autograd,partition "$GG" compile tests/corpus/train/mlp_train/model.pt2 --train -o "$TMP/lg.so"
expect 0 "[fusion] node" -- env GCC_GRAPH_LOGS=+all "$GG" compile $M/bert_tiny/model.pt2 -o "$TMP/lg.so"
expect 0 "[schedule] k0" -- env GCC_GRAPH_LOGS=schedule "$GG" compile $M/mlp/model.pt2 -o "$TMP/lg.so"
expect 0 "[guards] input 0 'x': float32, rank 2" -- env GCC_GRAPH_LOGS=guards "$GG" compile $M/mlp/model.pt2 -o "$TMP/lg.so"
expect 0 "[memory]" -- env GCC_GRAPH_LOGS=memory "$GG" compile $M/mlp/model.pt2 -o "$TMP/lg.so"
expect 0 "Generated by gcc-graph" -- env GCC_GRAPH_LOGS=output_code "$GG" compile $M/mlp/model.pt2 -o "$TMP/lg.so"
expect 0 "[functionalize] node" -- env GCC_GRAPH_LOGS=functionalize "$GG" compile tests/corpus/ops/inplace_chain/model.pt2 -o "$TMP/lg.so"
if command -v script >/dev/null; then   # on a terminal: a progress line, cleared at the end
  expect 0 "building the .so with the C compiler" -- script -qec "$GG compile $M/mlp/model.pt2 -o $TMP/pg.so" /dev/null
fi
# explain: the schedule in text, everything as JSON (schemas/explain.schema.json)
expect 0 "schedule (the compiled code):" -- "$GG" explain $M/bert_tiny/model.pt2
expect 0 "intermediate memory:" -- "$GG" explain $M/bert_tiny/model.pt2
"$GG" explain $M/bert_tiny/model.pt2 --json >"$TMP/ex.json" 2>"$TMP/err" || no "explain --json: $(cat "$TMP/err")"
expect 0 "ok" -- sh -c "python3 tests/explain_json.py <'$TMP/ex.json'"
"$GG" explain tests/corpus/train/mlp_train/model.pt2 --json --train >"$TMP/ext.json" 2>"$TMP/err" || no "explain --json --train: $(cat "$TMP/err")"
expect 0 "ok" -- sh -c "python3 tests/explain_json.py training <'$TMP/ext.json'"
expect 0 '"format":	"gcc-graph model"' -- "$GG" explain "$TMP/mlp.so" --json
# check: every stage agrees on healthy models; a miscompiled op is caught at the compiled stage
expect 0 "every stage agrees with the loaded graph" -- "$GG" check $M/cnn_small/model.pt2 --inputs $M/cnn_small/io.safetensors
expect 0 "weights folded                         agrees" -- "$GG" check $M/cnn_small/model.pt2 --inputs $M/cnn_small/io.safetensors
# weight folding (fold.c): batch norm into the convolution before it, attention's q/k/v linears
# stacked into one product, not with --weights external (the new weights live in the .so); the
# folded models' results are checked against PyTorch with every case in the compiled section
expect 0 "batch norm 'batch_norm_1' folded into convolution 'conv2d_1'" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/fold.so"
# a layer scale folded into the linear before it (ConvNeXt's through its permute, timm's), not a scale of another dim; on
# the GPU the residual after the scaled linear then joins its epilogue
env GCC_GRAPH_LOGS=fusion "$GG" compile tests/extra/layer_scale_bf16/model.pt2 --target cuda -S -o "$TMP/ls.cu" --debug-dir "$TMP/ls" >"$TMP/err" 2>&1
if [ "$(grep -o "the scale '[a-z0-9_]*' folded into linear" "$TMP/err" | tr '\n' ' ')" = "the scale 'p_gamma' folded into linear the scale 'p_g2' folded into linear " ] &&
   grep -q "matrix product and its epilogue (cuBLASLt) *'mul_1[.a-z0-9]*'  + add_1" "$TMP/ls/schedule.txt"; then ok
else no "layer scales: $(grep scale "$TMP/err" | head -c 300) $(grep cuBLASLt "$TMP/ls/schedule.txt")"; fi
expect 0 "linear 'linear_2' computed in the stacked product 'linear.stacked0.0'" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/bert_tiny/model.pt2 -o "$TMP/fold.so"
expect 0 "linear 'linear_5' computed in the stacked product 'linear_4.stacked0.0'" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/llama_tiny/model.pt2 -o "$TMP/fold.so"
# an activation that alone reads a convolution or linear is applied in its epilogue (no kernel of its
# own), not under the miscompile test hook (which needs the ReLU's own kernel)
# (cnn_small's convolutions channels-last, the stem too; and NCHW under --no-channels-last)
expect 0 "node 'relu.cl0' (relu) applied in the epilogue of 'batch_norm.fold0.cl2' (_conv_nhwc)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/fold.so"
expect 0 "node 'relu_1.cl0' (relu) applied in the epilogue of 'batch_norm_1.fold0.cl0' (_conv_nhwc)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/cnn_small/model.pt2 -o "$TMP/fold.so"
expect 0 "node 'relu_1' (relu) applied in the epilogue of 'batch_norm_1.fold0' (conv2d)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/cnn_small/model.pt2 --no-channels-last -o "$TMP/fold.so"
expect 0 "node 'relu' (relu) applied in the epilogue of 'linear' (linear)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/mlp/model.pt2 -o "$TMP/mlpe.so"
# float32 gelu, hardswish, hardsigmoid (silu, sigmoid) too, with their float32 functions
expect 0 "node 'gelu' (gelu) applied in the epilogue of 'linear_4' (linear)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/bert_tiny/model.pt2 -o "$TMP/bte.so"
# GPT-2's Conv1D (addmm between views): the residual after it joins its epilogue on the CPU too
expect 0 "node 'add_4.1' (add.Tensor) applied in the epilogue of 'addmm_1' (addmm)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/gpt2_tiny/model.pt2 -o "$TMP/g2e.so"
expect 0 "node 'hardswish_.cl0' (hardswish) applied in the epilogue of 'batch_norm.fold0.cl2' (_conv_nhwc)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/mobilenet_v3_small/model.pt2 -o "$TMP/mbe.so"
expect 0 "node 'hardswish_' (hardswish) applied in the epilogue of 'batch_norm.fold0' (conv2d)" -- env GCC_GRAPH_LOGS=fusion "$GG" compile $M/mobilenet_v3_small/model.pt2 --no-channels-last -o "$TMP/mbe.so"
env GCC_GRAPH_LOGS=fusion GCC_GRAPH_TEST_MISCOMPILE=relu "$GG" compile $M/mlp/model.pt2 -o "$TMP/mlpm.so" 2>"$TMP/err" || no "compile with the miscompile hook: $(cat "$TMP/err")"
if grep -q "applied in the epilogue" "$TMP/err"; then no "ReLU fused under GCC_GRAPH_TEST_MISCOMPILE=relu"; else ok; fi
# the epilogue is the chain of pointwise nodes after a product or convolution (tests/extra/epilogues):
# a residual computed after the first convolution goes to the later one's epilogue; float64; addmm
# (after its bias); a batched product; a residual computed inside its add, and a value that is also
# an output, end the chain (the float32 convolutions run channels-last: their nodes' names end in .clN;
# the copy of their input into that layout is a kernel of its own, not the convolution's; the float64
# one stays NCHW)
"$GG" explain tests/extra/epilogues/model.pt2 >"$TMP/epi_explain" 2>&1 || no "explain epilogues: $(tail -n 1 "$TMP/epi_explain")"
for k in "'conv2d_2.cl0'  + add_1.cl0, relu.cl0" "'conv2d_3.cl0'  + leaky_relu.cl0, mul.cl0, sub.cl0" "'conv2d_4.cl0'  + sigmoid.cl0, mul_1.cl0" "'matmul'  + div" "'addmm'  + relu_1" \
         "'conv2d_5'  + add_4, relu_2" "'conv2d_7.cl0'  + add_6.cl0\$" "'conv2d_6.cl0'\$"; do
  if grep -q "$k" "$TMP/epi_explain"; then ok; else no "epilogues: no kernel $k in explain's schedule"; fi
done
# the CUDA target gets the products' epilogues: a kernel right after the product, in place; a
# convolution's bias is added by the pointwise kernel after it there (decompose's bias_apart), which
# then computes the chain (relu6's reads the convolution, its bias and the residual)
"$GG" compile tests/extra/epilogues/model.pt2 --target cuda -S -o "$TMP/epi_cu" >"$TMP/err" 2>&1 || no "epilogues -S --target cuda: $(cat "$TMP/err")"
for k in "/* applies: div */" "/* applies: relu_1 */" "/* pointwise: node relu6 " "/* pointwise: node sub "; do
  if cat "$TMP"/epi_cu/model*.cu | grep -qF "$k"; then ok; else no "epilogues: the CUDA code lacks '$k'"; fi
done
if cat "$TMP"/epi_cu/model*.cu | grep -A1 -F "/* pointwise: node relu6 " | grep -q "const float \*x2, const gg_s"; then ok; else no "epilogues: relu6's CUDA kernel does not read three tensors"; fi
# explain shows each kernel's iteration space, bytes and FLOPs (conv2d: 2 x 1600 outputs x 72 deep, plus
# one per element for the add and relu6; it reads x once, as its input and as the residual) and the
# fusions refused, with why (NCHW: a value that is an output of the model ends a chain)
for k in "[2, 10, 10, 8] x 72 deep  read 8.5 KiB  written 6.2 KiB  2.336e+05 FLOPs" "fusions refused: 5" \
         "'conv2d_1.cl0' into 'add_1.cl0': operand 'conv2d_2.cl0.0' is computed after the product" "'add_6.cl0': read 2 times"; do
  if grep -qF "$k" "$TMP/epi_explain"; then ok; else no "epilogues: explain lacks '$k'"; fi
done
"$GG" explain tests/extra/epilogues/model.pt2 --no-channels-last >"$TMP/epi_nchw" 2>&1 || no "explain epilogues --no-channels-last: $(tail -n 1 "$TMP/epi_nchw")"
for k in "[2, 8, 10, 10] x 72 deep  read 8.5 KiB  written 6.2 KiB  2.336e+05 FLOPs" "'add_6': an output of the model" "'conv2d_7'  + add_6"; do
  if grep -qF "$k" "$TMP/epi_nchw"; then ok; else no "epilogues --no-channels-last: explain lacks '$k'"; fi
done
"$GG" explain tests/extra/epilogues/model.pt2 --json >"$TMP/epi.json" 2>"$TMP/err" || no "explain --json epilogues: $(cat "$TMP/err")"
expect 0 "ok" -- sh -c "python3 tests/explain_json.py <'$TMP/epi.json'"
# in place: conv2d_6's output dies in the kernel of relu_3 (+ tanh, add_5), which reads it at the index
# it writes, so relu_3 takes its memory; inplace_reuse reads each dying input at two indices (a + a.t(),
# c + c[:, :1]): none in place (its compiled case fails if they were)
expect 0 "(1 written in place of a dying input)" -- env GCC_GRAPH_LOGS=memory "$GG" compile tests/extra/epilogues/model.pt2 -o "$TMP/epi.so"
expect 0 "(0 written in place of a dying input)" -- env GCC_GRAPH_LOGS=memory "$GG" compile tests/extra/inplace_reuse/model.pt2 -o "$TMP/ipr.so"
# ... and gives PyTorch's answers on BLAS too (the epilogue after BLAS's product, per span)
"$GG" compile tests/extra/epilogues/model.pt2 -o "$TMP/epi.so" 2>"$TMP/err" || no "compile epilogues: $(cat "$TMP/err")"
expect 0 "" -- env GCC_GRAPH_BLAS_ONLY=1 "$GG" run "$TMP/epi.so" --inputs tests/extra/epilogues/io.safetensors -o "$TMP/epi_blas.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/epi_blas.st" tests/extra/epilogues/io.safetensors
# weights packed at open for the runtime's AVX-512 kernel: the packed descriptors are in the source;
# the same .so run on BLAS (GCC_GRAPH_BLAS_ONLY=1, what machines without AVX-512 run) agrees with
# PyTorch too (every compiled case below runs on the packed kernel where this machine has AVX-512)
if "$GG" compile $M/cnn_small/model.pt2 -S -o "$TMP/cs_src" 2>"$TMP/err" && grep -q "gg_rt_conv_nhwc_f32(&c, x, w, pk" "$TMP/cs_src/model.c" && grep -q "static const gg_pack_desc gg_packs" "$TMP/cs_src/model.c"; then ok; else no "cnn_small's convolutions are not on packed weights: $(cat "$TMP/err")"; fi
if "$GG" compile $M/cnn_small/model.pt2 --no-channels-last -S -o "$TMP/cs_src" 2>"$TMP/err" && grep -q "gg_rt_conv_packed_f32" "$TMP/cs_src/model.c" && grep -q "static const gg_pack_desc gg_packs" "$TMP/cs_src/model.c"; then ok; else no "cnn_small's NCHW convolutions (--no-channels-last) are not on packed weights: $(cat "$TMP/err")"; fi
for c in cnn_small mlp bert_tiny mobilenet_v3_small; do
  "$GG" compile $M/$c/model.pt2 -o "$TMP/blas_$c.so" 2>"$TMP/err" || no "compile $c: $(cat "$TMP/err")"
  expect 0 "" -- env GCC_GRAPH_BLAS_ONLY=1 "$GG" run "$TMP/blas_$c.so" --inputs $M/$c/io.safetensors -o "$TMP/blas_$c.st"
  expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/blas_$c.st" $M/$c/io.safetensors
done
# a bfloat16 CNN's convolutions (stem included) run in bfloat16 (gg_rt_conv_nhwc_bf16: AMX where this
# machine has it; depthwise ones a loop of float32 sums), none widened to float32 around them; the same
# .so agrees with PyTorch without AMX
# (the float32 kernel on widened copies) and without AMX or the packed kernel (BLAS, the weight widened per call)
if "$GG" compile tests/extra/layout_cnn_bf16/model.pt2 -S -o "$TMP/cb_src" 2>"$TMP/err" && grep -q "gg_rt_conv_nhwc_bf16(&c" "$TMP/cb_src/model.c" &&
   [ "$(grep -c "one product over all positions, packed weight): node" "$TMP/cb_src/model.c")" = 5 ] &&
   ! grep -q "node [a-z_0-9]*\.wide" "$TMP/cb_src/model.c"; then ok;
else no "layout_cnn_bf16's convolutions are not bfloat16 ones ($(cat "$TMP/err"))"; fi
"$GG" compile tests/extra/layout_cnn_bf16/model.pt2 -o "$TMP/cb.so" 2>"$TMP/err" || no "compile layout_cnn_bf16: $(cat "$TMP/err")"
for env in GCC_GRAPH_NO_AMX=0 GCC_GRAPH_NO_AMX=1 "GCC_GRAPH_NO_AMX=1 GCC_GRAPH_BLAS_ONLY=1"; do
  expect 0 "" -- env $env "$GG" run "$TMP/cb.so" --inputs tests/extra/layout_cnn_bf16/io.safetensors -o "$TMP/cb.st"
  expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/cb.st" tests/extra/layout_cnn_bf16/io.safetensors
done
# ... and with its weights left in the .pt2 (--weights external: permuted at run time, none packed at
# open; AMX's panels made per call), with AMX and without
"$GG" compile tests/extra/layout_cnn_bf16/model.pt2 --weights external -o "$TMP/cbe.so" 2>"$TMP/err" || no "compile layout_cnn_bf16 --weights external: $(cat "$TMP/err")"
for env in GCC_GRAPH_NO_AMX=0 GCC_GRAPH_NO_AMX=1; do
  expect 0 "" -- env $env "$GG" run "$TMP/cbe.so" --weights tests/extra/layout_cnn_bf16/model.pt2 --inputs tests/extra/layout_cnn_bf16/io.safetensors -o "$TMP/cbe.st"
  expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/cbe.st" tests/extra/layout_cnn_bf16/io.safetensors
done
# a bfloat16 convolution's batch norm is folded into it where it runs in bfloat16 (channels-last), not
# where it runs in float32 between casts (--no-channels-last): there the norm stays exact
expect 0 "batch norm 'batch_norm' folded into convolution 'conv2d'" -- env GCC_GRAPH_LOGS=fusion "$GG" compile tests/extra/layout_cnn_bf16/model.pt2 -o "$TMP/cbf.so"
env GCC_GRAPH_LOGS=fusion "$GG" compile tests/extra/layout_cnn_bf16/model.pt2 --no-channels-last -o "$TMP/cbf.so" 2>"$TMP/err" || no "compile layout_cnn_bf16 --no-channels-last: $(cat "$TMP/err")"
if grep -q "folded into" "$TMP/err"; then no "a bfloat16 norm folded under --no-channels-last"; else ok; fi
# resblock_bf16's convolutions take their ReLU and residual add in the epilogue (batch norm folded into
# them), and a ReLU of bfloat16 values is not rounded again (its value is one of its input's)
if "$GG" compile tests/extra/resblock_bf16/model.pt2 -S -o "$TMP/rb_src" 2>"$TMP/err" && grep -q "epilogue of node batch_norm_2.fold0.cl0: add.cl0 relu_2.cl0" "$TMP/rb_src/model.c" &&
   grep -q "const float r[0-9]* = f_relu_f(a[0-9]*);" "$TMP/rb_src/model.c" && ! grep -q "gg_f2bf(f_relu" "$TMP/rb_src/model.c"; then ok;
else no "resblock_bf16: the residual and ReLU are not in a bfloat16 convolution's epilogue, or the ReLU is rounded ($(cat "$TMP/err"))"; fi
# dropout in eval mode is the identity: its output is its input's storage, no kernel of its own
# kernels that differ only in their sizes (squeezenet's fire modules) are one function given its sizes
if "$GG" compile $M/squeezenet1_1/model.pt2 -S -o "$TMP/sq_src" 2>"$TMP/err" && grep -q "the same code, other sizes" "$TMP/sq_src/model.c" &&
   grep -q "const int64_t \*restrict gg_kc" "$TMP/sq_src/model.c"; then ok; else no "squeezenet's kernels that differ only in sizes are compiled apart ($(cat "$TMP/err"))"; fi
if "$GG" compile $M/bert_tiny/model.pt2 -S -o "$TMP/bt_src" 2>"$TMP/err" && grep -q "node layer_norm" "$TMP/bt_src/model.c" && ! grep -q "node dropout" "$TMP/bt_src/model.c"; then ok; else no "dropout in eval mode has a kernel of its own (or compile -S failed: $(cat "$TMP/err"))"; fi
# float32 gelu and softmax compute with scalar.h's float32 functions (the float pass's, on float
# operands), in kernels built for AVX-512 too (mlp's softmax: bert_tiny's attention is one kernel)
if grep -q "f32_gelu_erf_f(a" "$TMP/bt_src/model.c" && "$GG" compile $M/mlp/model.pt2 -S -o "$TMP/mlp_src" 2>"$TMP/err" && grep -q "ex\[j\] = gg_expf(x\[" "$TMP/mlp_src/model.c" &&
   grep -q "^GG_VEC static \(GG_NOINLINE \)\?void" "$TMP/bt_src/model.c"; then ok; else no "bert_tiny's gelu or mlp's softmax not on the float32 functions ($(cat "$TMP/err"))"; fi
# float32 attention on the CPU is the runtime's fused kernel (gg_rt_attn.c), no score matrix: bert_tiny's
# reads q, k and v in place from the stacked product and writes [batch, L, heads, D], so that the
# transpose after it is a view (no copy kernel before the output projection)
if grep -q "gg_rt_attention(0, &a, q + " "$TMP/bt_src/model.c" && ! grep -q "node scaled_dot_product_attention.*softmax\|(torch.ops.aten.softmax" "$TMP/bt_src/model.c" &&
   ! grep -q "copy.*node transpose" "$TMP/bt_src/model.c"; then ok; else no "bert_tiny's attention is not the fused CPU kernel"; fi
# nn.MultiheadAttention's permute(2, 0, 1, 3) after the fused attention (vit_tiny): the attention writes
# its output in that order, so the view before the out-projection is no copy, on both targets
# (compile_case checks the answers; make test-cuda on the GPU)
"$GG" compile $M/vit_tiny/model.pt2 -S -o "$TMP/vt_src" >/dev/null 2>&1
got="$(grep -c 'attention (fused, float32): node' "$TMP/vt_src/model.c")|$(grep -c 'copy: node view' "$TMP/vt_src/model.c")"
if [ "$got" = "2|0" ]; then ok; else no "vit_tiny on the CPU: $got fused attentions|copies of the view after them, expected 2|0"; fi
"$GG" compile $M/vit_tiny/model.pt2 --target cuda -S -o "$TMP/vt_cu" >/dev/null 2>&1
got="$(grep -c 'attention (fused, float32): node' "$TMP/vt_cu/model.c")|$(grep -c 'copy: node view' "$TMP/vt_cu/model.c")"
if [ "$got" = "2|0" ]; then ok; else no "vit_tiny on the GPU: $got fused attentions|copies of the view after them, expected 2|0"; fi
# chains of views that copy as written but are a view of their source composed (decompose.c's
# compose_view_chains): vit_tiny's in-projection (contiguous, then q, k and v viewed [L, N * H, D] and
# [N, H, L, D]) read in place by its attentions, on both targets; tests/extra/view_chains' nine
# chains that compose and three that stay (compile_case checks their answers)
"$GG" compile $M/vit_tiny/model.pt2 --target cuda --precision bf16 -S -o "$TMP/vt_cub" >/dev/null 2>&1
got="$(cat "$TMP/vt_src"/model.c* | grep -c 'copy: node contiguous')|$(cat "$TMP/vt_cu"/model.c* | grep -c 'copy: node contiguous')|$(cat "$TMP/vt_cub"/model.c* | grep -c 'copy: node.*(torch.ops.aten.contiguous')"
if [ "$got" = "0|0|0" ]; then ok; else no "vit_tiny: $got copies of its in-projection (CPU|GPU|GPU bf16), expected 0|0|0"; fi
for t in cpu cuda; do
  got=$(GCC_GRAPH_LOGS=decomp "$GG" compile tests/extra/view_chains/model.pt2 --target $t -S -o "$TMP/vc_$t" 2>&1 | grep -c "composed into one without a copy")
  if [ "$got" = 9 ]; then ok; else no "view_chains --target $t: $got chains composed, expected 9"; fi
done
# attention written out as its pieces (tests/extra/attention_written: matmul with k transposed, a
# division or multiplication by a number or none, a float mask added either way round, softmax,
# matmul) becomes one fused attention, three times; the fourth, whose scores are also summed, stays
GCC_GRAPH_LOGS=decomp "$GG" compile tests/extra/attention_written/model.pt2 -S -o "$TMP/aw" >"$TMP/err" 2>&1
got="$(grep -c 'attention written out' "$TMP/err")|$(grep -c 'attention (fused, float32): node' "$TMP/aw/model.c")|$(grep -c '^/\* softmax: node' "$TMP/aw/model.c")"
if [ "$got" = "3|3|1" ]; then ok; else no "attention_written on the CPU: $got rewritten|fused|softmax kernels, expected 3|3|1 ($(head -c 300 "$TMP/err"))"; fi
# ... and so are the six forms of tests/extra/attention_f32 (masks, causal, grouped heads, head sizes),
# and of attention_bf16 and attention_f16 (widened in the kernel, dt 3 and 2; make test checks all
# their answers)
for c in f32:0 bf16:3 f16:2; do
  "$GG" compile tests/extra/attention_${c%:*}/model.pt2 -S -o "$TMP/af_cpu" >/dev/null 2>&1
  got="$(grep -c 'attention (fused, .*): node' "$TMP/af_cpu/model.c")|$(grep -c "gg_rt_attention(${c#*:}, " "$TMP/af_cpu/model.c")|$(grep -c 'softmax' "$TMP/af_cpu/model.c")"
  if [ "$got" = "6|5|0" ]; then ok; else no "attention_${c%:*} on the CPU: $got fused|runtime calls (two the same code)|softmax kernels, expected 6|5|0"; fi
done
# GPT-2's tanh GELU written out (pow(x, 3), tanh) on the float32 functions too: x*x*x and gg_tanhf, not libm in double
if "$GG" compile $M/gpt2_tiny/model.pt2 -S -o "$TMP/g2_src" 2>"$TMP/err" && grep -q "f32_pow3_f(a" "$TMP/g2_src/model.c" && grep -q "f32_tanh_f(a" "$TMP/g2_src/model.c"; then ok; else no "gpt2_tiny's pow and tanh not on the float32 functions ($(cat "$TMP/err"))"; fi
env GCC_GRAPH_LOGS=fusion "$GG" compile $M/cnn_small/model.pt2 --weights external -o "$TMP/fold.so" 2>"$TMP/err" || no "compile --weights external: $(cat "$TMP/err")"
if grep -q "folded into" "$TMP/err"; then no "weights folded with --weights external"; else ok; fi
expect 0 "partitioned (forward, then backward)   agrees" -- "$GG" check tests/corpus/train/cnn_train/model.pt2 --train --inputs tests/corpus/train/cnn_train/io.safetensors
expect 1 "compiled                               DEPARTS: out.0" -- env GCC_GRAPH_TEST_MISCOMPILE=relu "$GG" check $M/cnn_small/model.pt2
# the channels-last stage (tests/channels_last.txt): its convolutions and its copies, the stage agreeing
# with the graph before it under check (on the GPU the compiled stage needs a GPU: not asserted here; on
# the CPU the compiled code runs and agrees too)
grep -v '^#' tests/channels_last.txt | while IFS='|' read -r c fl nconv ncopy chk tgt; do
  tgt=${tgt:-cuda}
  rm -rf "$TMP/cl"
  if ! "$GG" compile $c/model.pt2 --target $tgt $fl -S -o "$TMP/cl.cu" --debug-dir "$TMP/cl" >"$TMP/err" 2>&1; then echo "FAIL channels-last $c: $(head -c 300 "$TMP/err")"; continue; fi
  got="$(grep -cE "(= _conv_nhwc\(|\.cl[0-9]+\.0': [a-z0-9]+\[[0-9, ]*\] = linear\()" "$TMP"/cl/*-channels.txt)|$(grep -c '^  k[0-9]* *copy ' "$TMP/cl/schedule.txt")"
  [ "$got" = "$nconv|$ncopy" ] || echo "FAIL channels-last $c ($tgt): $got convolutions|copies, expected $nconv|$ncopy"
  if [ "$chk" = check ]; then
    "$GG" check $c/model.pt2 --target $tgt $fl --tol 3e-2 >"$TMP/out" 2>&1
    grep -q "channels-last convolutions  *agrees" "$TMP/out" || echo "FAIL channels-last $c ($tgt): check: $(tail -n 3 "$TMP/out")"
    [ "$tgt" = cuda ] || grep -q "^  compiled  *agrees" "$TMP/out" || echo "FAIL channels-last $c ($tgt): check's compiled stage: $(tail -n 3 "$TMP/out")"
  fi
  rm -rf "$TMP/cl"
  "$GG" compile $c/model.pt2 --target $tgt $fl --no-channels-last -S -o "$TMP/cl.cu" --debug-dir "$TMP/cl" >"$TMP/err" 2>&1
  [ ! -e "$TMP"/cl/*-channels.txt ] && ! cat "$TMP/cl.cu/model.c" "$TMP"/cl.cu/model*.cu | grep -q _conv_nhwc || echo "FAIL channels-last $c: --no-channels-last still converts"
done >"$TMP/cl.log"
if [ -s "$TMP/cl.log" ]; then no "$(cat "$TMP/cl.log")"; else ok; fi
# on the GPU the stem's bias and ReLU (and --precision's cast) run after its max pooling, on the pooled
# values: the pooling reads the convolution's bfloat16 output and a pointwise kernel of the pooling's
# steps follows it (a bfloat16 export; a float32 one under --precision bf16, whose cast to float32 the
# chain crosses too)
for c in "tests/extra/resblock_bf16|" "tests/corpus/models/cnn_small|--precision bf16"; do
  rm -rf "$TMP/pc"
  "$GG" compile ${c%|*}/model.pt2 ${c#*|} --target cuda -S -o "$TMP/pc.cu" --debug-dir "$TMP/pc" >"$TMP/err" 2>&1
  if grep -A2 "max pooling, channels-last" "$TMP/pc/schedule.txt" | grep -Eq "^  k[0-9]+ +pointwise .*max_pool2d\.cl[0-9]" &&
     ! grep -q "^  k[0-9]* *pointwise *'relu[^']*'  + batch_norm\.fold0" "$TMP/pc/schedule.txt" &&
     grep -q "bfloat16\[[0-9, ]*\] = _max_pool_nhwc(" "$TMP"/pc/*-channels.txt; then ok
  else no "the GPU's pooling chain (${c%|*} ${c#*|}): $(grep -A3 'max pooling' "$TMP/pc/schedule.txt" | head -4)$(head -c 300 "$TMP/err")"; fi
done
# on the GPU, cuBLASLt's epilogue applies a product's bias, residual and ReLU (gg_cu_gemm_ep): 1x1 convolutions of stride 1
# made products (the bias and ReLU; the bottleneck's residual, its NCHW input copied channels-last once for its first
# convolution and read there by the others; a residual first in its add), linear and bmm with a residual and a ReLU; not a
# 1x1 convolution of stride 2
rm -rf "$TMP/pe"
"$GG" compile tests/extra/product_epilogues/model.pt2 --target cuda -S -o "$TMP/pe.cu" --debug-dir "$TMP/pe" >"$TMP/err" 2>&1
got="$(sed -n "s/^  k[0-9]*  *matrix product and its epilogue (cuBLASLt)  *'\([a-z0-9_]*\)[.a-z0-9]*'  + \(.*\)/\1:\2/p" "$TMP/pe/schedule.txt" | tr -d ' ' | tr '\n' ' ')"
if [ "$got" = "conv2d_0:relu_1.cl0 conv2d_4:add_5.cl0,relu_6.cl0 conv2d_9:add_10.cl0 linear_13:add_14,relu_15 linear_16:add_17,relu_18 bmm_19:add_20,relu_21 " ] &&
   grep -q "gg_cu_gemm_ep(2, .*, NULL, res + " "$TMP/pe.cu/model.c" && [ "$(grep -c 'res + ' "$TMP/pe.cu/model.c")" = 5 ]; then ok
else no "cuBLASLt's epilogues on the GPU: $got $(head -c 300 "$TMP/err")"; fi
# under --precision bf16 a ReLU between a lowered result and the next lowered node runs in bfloat16 (the same bits), its
# float32 side dropped (the stem's, before max pooling, stays); on the GPU the SE block's 1x1 convolution then takes it in
# cuBLASLt's epilogue
rm -rf "$TMP/pr"
"$GG" compile tests/extra/precision_layout_cnn_tf32/model.pt2 --precision bf16 --target cuda -S -o "$TMP/pr.cu" --debug-dir "$TMP/pr" >"$TMP/err" 2>&1
got="$(grep -c "bfloat16\[[0-9, ]*\] = relu(" "$TMP"/pr/*-precision.txt)|$(grep -c "float32\[[0-9, ]*\] = relu(" "$TMP"/pr/*-precision.txt)"
if [ "$got" = "2|1" ] && grep -q "matrix product and its epilogue (cuBLASLt) *'conv2d_3[.a-z0-9]*'  + conv2d_4" "$TMP/pr/schedule.txt"; then ok
else no "--precision bf16's ReLUs in bfloat16: $got bfloat16|float32 ReLUs, expected 2|1; $(grep cuBLASLt "$TMP/pr/schedule.txt") $(head -c 300 "$TMP/err")"; fi
# on the GPU --precision bf16's casts join the arithmetic beside them across views (GPT-2's Conv1D view, a ViT-style
# transpose): each norm read only by its cast stores bfloat16 (3 of 4; the last is the output), the widening after each
# product is computed in the residual addition or the GELU that reads it, the GELU writes the next product's bfloat16;
# no cast is a kernel of its own: 15 kernels (23 before)
rm -rf "$TMP/pv"
"$GG" compile tests/extra/precision_views_bf16/model.pt2 --precision bf16 --target cuda -S -o "$TMP/pv.cu" --debug-dir "$TMP/pv" >"$TMP/err" 2>&1
got="$(grep -Ec "^  k[0-9]* *layer norm rows( in registers)? *'[^']*'  \+ [a-z_0-9]*\.lowp0\.cast0$" "$TMP/pv/schedule.txt")|$(grep -c "^  k" "$TMP/pv/schedule.txt")|$(grep -Ec "^  k[0-9]+ +pointwise +'[^']*\.cast[0-9]+'$" "$TMP/pv/schedule.txt")|$(grep -Ec "^  k[0-9]+ +pointwise +'addmm_3\.lowp0\.cast0'  \+ addmm_2\.lowp2\.cast1, .*tanh" "$TMP/pv/schedule.txt")"
got="$got|$(grep -c "gg_cu_gemm_ep(5, .*, bias + .*, res + " "$TMP/pv.cu/model.c")"
if [ "$got" = "3|13|0|1|2" ] && grep -q "uint16_t \*restrict y, void \*restrict mo" "$TMP/pv.cu/model.cu"; then ok
else no "--precision bf16's casts beside their arithmetic on the GPU: $got (norms storing casts|kernels|lone casts|GELU with both casts|widened products), expected 3|13|0|1|2; $(head -c 300 "$TMP/err")"; fi
# Norms on the GPU keep their rows in registers where the row is whole 16-byte vectors of at most 64
# floats a lane (norm_rows: six such rows, one of 30 floats in the generic kernel); make test-cuda runs them
rm -rf "$TMP/nr"
"$GG" compile tests/extra/norm_rows/model.pt2 --target cuda -S -o "$TMP/nr.cu" --debug-dir "$TMP/nr" >"$TMP/err" 2>&1
got="$(grep -Ec "^  k[0-9]+ +(layer|rms) norm rows in registers " "$TMP/nr/schedule.txt")|$(grep -Ec "^  k[0-9]+ +layer norm rows +'layer_norm_3'" "$TMP/nr/schedule.txt")"
if [ "$got" = "6|1" ]; then ok
else no "norms in registers on the GPU: $got (in registers|generic), expected 6|1; $(head -c 300 "$TMP/err")"; fi
# ... a post-norm block's norm (bert_tiny: read by the residual and by the cast before the next products)
# stores float32 and the bfloat16 copy in one kernel: 4 such norms, no cast of a norm a kernel of its own (31 kernels before)
rm -rf "$TMP/bt"
"$GG" compile tests/corpus/models/bert_tiny/model.pt2 --precision bf16 --target cuda -S -o "$TMP/bt.cu" --debug-dir "$TMP/bt" >"$TMP/err" 2>&1
got="$(grep -Ec "^  k[0-9]+ +layer norm rows in registers +'[^']*'  \+ [a-z_0-9.]*lowp0$" "$TMP/bt/schedule.txt")|$(grep -c "^  k" "$TMP/bt/schedule.txt")|$(cat "$TMP/bt.cu"/model*.cu | grep -c "y2 + r \* L + c")"
if [ "$got" = "4|27|1" ]; then ok
else no "a post-norm's norm storing its bfloat16 copy on the GPU: $got (norms with a copy|kernels|kernels storing a copy: the 4 norms' code is one), expected 4|27|1; $(head -c 300 "$TMP/err")"; fi
# ... in inference: under --train (train_llama_mlp's gradient accumulation after a product) no product is widened by cuBLASLt
"$GG" compile tests/extra/train_llama_mlp/model.pt2 --train --precision bf16 --target cuda -S -o "$TMP/tw.cu" >"$TMP/err" 2>&1
if [ -s "$TMP/tw.cu/model.c" ] && ! grep -q "gg_cu_gemm_ep(5" "$TMP/tw.cu/model.c"; then ok
else no "--train --precision bf16 widened a product in cuBLASLt (inference only): $(grep -c 'gg_cu_gemm_ep(5' "$TMP/tw.cu/model.c") $(head -c 300 "$TMP/err")"; fi
# ... and a chain cuBLASLt cannot apply whole (add, then tanh) stays the kernel after the product, its addend not given to cuBLASLt
"$GG" compile tests/extra/same_code/model.pt2 --target cuda -S -o "$TMP/sc.cu" >"$TMP/err" 2>&1
if grep -q "gg_cu_gemm_ep(.*, NULL, 1);" "$TMP/sc.cu/model.c" && ! grep -q "res + " "$TMP/sc.cu/model.c"; then ok
else no "same_code on the GPU: an addend given to cuBLASLt outside its epilogue: $(grep 'res + ' "$TMP/sc.cu/model.c" | head -c 300)$(head -c 300 "$TMP/err")"; fi
# --train --target cuda: batch norm's variance and its two gradient sums compute their pointwise inputs
# in their own loops (3 split reductions with fused nodes), and the values the forward saves (the
# convolution's output, the batch mean and variance) are computed in their slots, not copied there
rm -rf "$TMP/trs"
"$GG" compile tests/corpus/train/cnn_train/model.pt2 --train --target cuda -S -o "$TMP/trs.cu" --debug-dir "$TMP/trs" >"$TMP/err" 2>&1
got="$(grep -c "split row reduction .* + " "$TMP/trs/schedule.txt")|$(grep -c "^  k[0-9]* *copy  *'\(conv2d\|batch_norm\.0\.[13]\)'" "$TMP/trs/schedule.txt")"
if [ "$got" = "3|0" ]; then ok; else no "training schedule on the GPU: $got fused reductions|copies of saved values, expected 3|0: $(head -c 300 "$TMP/err")"; fi
# the schedule's fusions and fold's masks (tests/extra/fusion_forms, whose answers make test checks on
# the CPU): on the GPU, RoPE's rotate_half, the cat of three and RMSNorm's normalization are one kernel
# each (the cats, and the float32 cast read twice, in their readers' loops); the two causal masks
# become is_causal, the mask of ones goes, the mask that is not causal stays, repeated key/value heads
# are read unrepeated, attention's transposed output is no copy, the linear and the matmul over
# permuted rows are one product each, their outputs in row order (23 kernels in all, 9 of them
# copies of outputs)
rm -rf "$TMP/ff"
GCC_GRAPH_LOGS=decomp "$GG" compile tests/extra/fusion_forms/model.pt2 --target cuda -S -o "$TMP/ff.cu" --debug-dir "$TMP/ff" >"$TMP/err" 2>&1
got="$(grep -c 'is causal: is_causal instead' "$TMP/err")|$(grep -c 'masks nothing: dropped' "$TMP/err")|$(grep -c '(enable_gqa), not repeated' "$TMP/err")|$(grep -c "^  k[0-9]* *pointwise *'\(add_7\|mul_11\|mul_19\)' .*\(cat_4\|cat_10\|to_12.0\)" "$TMP/ff/schedule.txt")|$(grep -c '^  k' "$TMP/ff/schedule.txt")|$(grep -c "M = INT64_C(30)" "$TMP/ff.cu/model.c")"
if [ "$got" = "2|1|1|3|23|2" ]; then ok; else no "fusion_forms on the GPU: $got causal masks|masks dropped|heads unrepeated|fused kernels|kernels|products of 30 rows, expected 2|1|1|3|23|2"; fi
# under --train (no weight folding) a causal mask made of constants becomes is_causal all the same
# (tests/extra/train_attention's first attention), in the decomposition stage
GCC_GRAPH_LOGS=decomp "$GG" compile tests/extra/train_attention/model.pt2 --train -S -o "$TMP/tatt" >"$TMP/err" 2>&1
if [ "$(grep -c 'is causal: is_causal instead' "$TMP/err")" = 1 ]; then ok; else no "train_attention's causal mask under --train: $(head -c 300 "$TMP/err")"; fi
# float32 attention on the GPU: the six forms of tests/extra/attention_f32 (make test checks their
# answers on the CPU, make test-cuda on the GPU) are each one call of the fused float32 kernel (dt 0;
# 4 under --precision tf32), not products and a softmax
"$GG" compile tests/extra/attention_f32/model.pt2 --target cuda -S -o "$TMP/af.cu" >/dev/null 2>&1
"$GG" compile tests/extra/attention_f32/model.pt2 --target cuda --precision tf32 -S -o "$TMP/af4.cu" >/dev/null 2>&1
got="$(grep -c 'gg_cu_attention(0,' "$TMP/af.cu/model.c")|$(grep -c 'gg_cu_attention(4,' "$TMP/af4.cu/model.c")|$(grep -c 'gg_cu_gemm' "$TMP/af.cu/model.c")"
if [ "$got" = "6|6|0" ]; then ok; else no "attention_f32 on the GPU: $got fused float32|fused under tf32|products, expected 6|6|0"; fi
# a float32 convolution's bias (batch norm folded into it) on the GPU: added by the pointwise kernel
# after it, not by a pass of cuDNN's own (AddTensor: 32% of ResNet-50's time under --precision tf32);
# each convolution is called without one and the kernel after it reads it
GCC_GRAPH_LOGS=decomp "$GG" compile tests/corpus/models/cnn_small/model.pt2 --target cuda -S -o "$TMP/cb.cu" >"$TMP/err" 2>&1
got="$(grep -c 'conv2d -> 3 nodes' "$TMP/err")|$(grep -c '^  k[0-9]*(t[0-9]*, [a-z0-9]*, w[0-9]*, NULL, ' "$TMP/cb.cu/model.c")"
if [ "$got" = "2|2" ]; then ok; else no "cnn_small on the GPU: $got convolutions with the bias apart|called without one, expected 2|2"; fi
# a GPU sum that computes its input (exp) over a dim of size 1 only: one element per output
expect 0 "" -- "$GG" compile tests/cuda_schedule/mean_size1.json --target cuda -S -o "$TMP/ms1.cu"
# constant padding with a fill value no int64 holds (1e19; found by fuzz_model): compiled on both
# targets, the value converted without undefined behaviour (make sanitize would stop on it)
expect 0 "" -- "$GG" compile tests/cuda_schedule/pad_huge_value.json --target cuda -S -o "$TMP/phv.cu"
expect 0 "" -- "$GG" compile tests/cuda_schedule/pad_huge_value.json -S -o "$TMP/phv.c"
# a bfloat16 matrix-vector product widened and added to a float32 vector of its shape: cuBLASLt takes that vector as its C,
# not as a bias (its N is 1); a 16-bit product's operand permuted so that neither of its last two strides is 1 (natively,
# and made so by --precision's cast moving next to the ReLU before it: it does not across such a permute) is copied first
"$GG" compile tests/cuda_schedule/matvec_widened.json --target cuda -S -o "$TMP/mv.cu" >"$TMP/err" 2>&1
got="$(grep -c 'gg_cu_gemm_ep(5, .*, NULL, res + ' "$TMP/mv.cu/model.c")"
for m in "permuted_bf16_operand|" "permuted_cast_operand|--precision bf16"; do
  "$GG" compile tests/cuda_schedule/${m%|*}.json --target cuda ${m#*|} -S -o "$TMP/po.cu" >>"$TMP/err" 2>&1
  got="$got|$(grep -Ec 'gg_cu_gemm_ep\(3, M, N, K, 1, a \+ [^,]*, (INT64_C\(1\), [^,]*|[^,]*, INT64_C\(1\)), ' "$TMP/po.cu/model.c")"
done
if [ "$got" = "1|1|1" ]; then ok; else no "16-bit products' operands on the GPU: $got (matrix-vector residual as C|permuted operand read with a unit stride x2), expected 1|1|1; $(head -c 300 "$TMP/err")"; fi
# the stage's edges (tests/layout: a bf16 convolution before flip and tril, which read positions; a
# weight and a batch norm two nodes share; a view of a channels-last value): the stage agrees; so
# do convolutions whose kernel is their stride made products of their patches (float32 and
# bfloat16: from an NCHW image and from a channels-last value)
{ for m in tests/layout/*.json; do
    w=${m%.json}.safetensors
    [ -f "$w" ] && echo "$m --weights $w" || echo "$m"
  done
  for c in tests/extra/patch_convs tests/extra/patch_convs_bf16; do echo "$c/model.pt2 --inputs $c/io.safetensors"; done
} | xargs -P 2 -I ARGS sh -c '"$0" check ARGS --target cuda --tol 3e-2 2>&1 | grep -q "channels-last convolutions  *agrees" || echo "FAIL channels-last edge ARGS"' "$GG" >"$TMP/cle.log" 2>&1
if [ -s "$TMP/cle.log" ]; then no "$(cat "$TMP/cle.log")"; else ok; fi
# ... and that they are products there: of patch_convs' five convolutions only the 3x3 one stays one
got=""
for c in patch_convs patch_convs_bf16; do
  got="$got|$("$GG" explain tests/extra/$c/model.pt2 --target cuda 2>&1 | grep -cE '^  k[0-9]+ +convolution')"
done
if [ "$got" = "|1|1" ]; then ok; else no "patch convolutions on the GPU: $got convolution kernels, expected |1|1"; fi
# --precision: the lowered stage reports what bf16 costs, the later ones are held to it (a training
# step too: its half-type products with a bias once rounded twice on the CPU); tf32 is the GPU's only
expect 0 "relative error" -- "$GG" check $M/bert_tiny/model.pt2 --inputs $M/bert_tiny/io.safetensors --precision bf16
grep -qF "against float32 (--precision bf16)" "$TMP/out" && grep -qF "every later stage agrees with the lowered graph" "$TMP/out" && ok || no "check --precision bf16: $(tail -n 3 "$TMP/out")"
expect 0 "every later stage agrees with the lowered graph" -- "$GG" check tests/corpus/train/mlp_train/model.pt2 --train --precision bf16 --inputs tests/corpus/train/mlp_train/io.safetensors
# the compiled stage under bf16 is held to bfloat16's tolerance unless --tol is given (tests/cuda.sh
# checks both on the GPU, where the fused attention rounds P and dS to bf16: 4e-3 from the interpreter)
expect 0 "within 0.03, the lower type's" -- "$GG" check tests/extra/train_attention_bf16/model.pt2 --train --precision bf16 --inputs tests/extra/train_attention_bf16/io.safetensors
expect 2 "unknown precision 'bf32'" -- "$GG" compile $M/mlp/model.pt2 --precision bf32 -o "$TMP/p.so"
expect 2 "check takes fp32, bf16 or fp16" -- "$GG" check $M/mlp/model.pt2 --precision tf32
expect 1 "--precision tf32 goes with --target cuda" -- "$GG" compile $M/mlp/model.pt2 --precision tf32 -o "$TMP/p.so"
expect 1 "--precision tf32x3 goes with --target cuda" -- "$GG" compile $M/mlp/model.pt2 --precision tf32x3 -o "$TMP/p.so"
# --precision tf32x3: each float32 product is the runtime's code 7 (three TF32 products of split
# operands; tests/cuda.sh runs it), none left code 0; attention stays float32's (code 0)
"$GG" compile $M/mlp/model.pt2 --target cuda -S -o "$TMP/x3a.cu" >/dev/null 2>&1
"$GG" compile $M/mlp/model.pt2 --target cuda --precision tf32x3 -S -o "$TMP/x3b.cu" >/dev/null 2>&1
"$GG" compile tests/extra/attention_f32/model.pt2 --target cuda --precision tf32x3 -S -o "$TMP/x3c.cu" >/dev/null 2>&1
got="$(grep -c 'gg_cu_gemm_ep(0,' "$TMP/x3a.cu/model.c")|$(grep -c 'gg_cu_gemm_ep(7,' "$TMP/x3b.cu/model.c")|$(grep -c 'gg_cu_gemm_ep(0,' "$TMP/x3b.cu/model.c")|$(grep -c 'gg_cu_attention(0,' "$TMP/x3c.cu/model.c")"
if [ "$got" = "2|2|0|6" ]; then ok; else no "--precision tf32x3: $got (float32 products|code 7 under tf32x3|code 0 left|float32 attention), expected 2|2|0|6"; fi
expect 0 "" -- "$GG" compile $M/mlp/model.pt2 --precision fp16 -o "$TMP/p16.so"
expect 0 "compiled with --precision fp16" -- "$GG" explain "$TMP/p16.so"
expect 0 'fp16' -- "$GG" explain "$TMP/p16.so" --json
expect 2 "missing -o DIR" -- "$GG" minify $M/cnn_small/model.pt2
# minify: the test-only miscompiled relu is found in a real model, reduced to one node, written as a
# standalone repro whose correct compilation gives the interpreter's answers
expect 1 "reduced to 1 node" -- env GCC_GRAPH_TEST_MISCOMPILE=relu "$GG" minify $M/cnn_small/model.pt2 -o "$TMP/repro"
expect 1 "'relu' = relu" -- env GCC_GRAPH_TEST_MISCOMPILE=relu "$GG" minify $M/cnn_small/model.pt2 -o "$TMP/repro"
expect 0 "" -- "$GG" compile "$TMP/repro/model.json" -o "$TMP/repro.so"
expect 0 "" -- "$GG" run "$TMP/repro.so" --inputs "$TMP/repro/inputs.safetensors" -o "$TMP/repro.st"
expect 0 "" -- "$BUILD/test-golden" --compare "$TMP/repro.st" "$TMP/repro/expected.safetensors"
expect 0 "nothing to minify" -- "$GG" minify $M/mlp/model.pt2 -o "$TMP/repro2"
# GCC_GRAPH_PROFILE: the nodes that took the most time, when the model is closed
expect 0 "gcc-graph profile: run" -- env GCC_GRAPH_PROFILE=1 "$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 2
expect 0 "linear (linear)" -- env GCC_GRAPH_PROFILE=1 "$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 2
expect 0 "gcc-graph profile: backward" -- env GCC_GRAPH_PROFILE=1 "$GG" bench "$TMP/dd.so" --inputs tests/corpus/train/mlp_train/io.safetensors --iters 2
# GCC_GRAPH_PROFILE=FILE.json: a Chrome trace with every node of every run (bench: 5 warm-up + 3 runs)
expect 0 "events in $TMP/trace.json" -- env GCC_GRAPH_PROFILE="$TMP/trace.json" "$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 3
expect 0 "trace ok" -- python3 -c "
import json, sys
j = json.load(open(sys.argv[1])); ev = [e for e in j['traceEvents'] if e['ph'] == 'X']
names = sorted({e['name'] for e in ev})
assert ev and len(ev) % 8 == 0 and len(ev) == 8 * len(names), (len(ev), names)
assert 'linear (linear)' in names and all(e['dur'] >= 0 and e['cat'] == 'run' for e in ev), names
assert all(a['ts'] <= b['ts'] for a, b in zip(ev, ev[1:])), 'events in order'
print('trace ok')" "$TMP/trace.json"
expect 0 "events in $TMP/trace_t.json" -- env GCC_GRAPH_PROFILE="$TMP/trace_t.json" "$GG" bench "$TMP/dd.so" --inputs tests/corpus/train/mlp_train/io.safetensors --iters 2
expect 0 "backward forward" -- python3 -c "
import json, sys
print(*sorted({e.get('cat') for e in json.load(open(sys.argv[1]))['traceEvents'] if e['ph'] == 'X'}))" "$TMP/trace_t.json"
expect 0 "cannot write /nonexistent/t.json" -- env GCC_GRAPH_PROFILE=/nonexistent/t.json "$GG" bench "$TMP/mlp.so" --inputs $M/mlp/io.safetensors --iters 1
# a node name that is not UTF-8 (tests/bad/latin1_node.json) keeps the trace JSON: U+FFFD in its place
"$GG" compile tests/bad/latin1_node.json -o "$TMP/l1.so" 2>"$TMP/err" || no "compile latin1_node: $(cat "$TMP/err")"
python3 -c "
import json, struct, sys
h = json.dumps({n: {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [24 * i, 24 * i + 24]} for i, n in enumerate(['in.0', 'in.1'])}).encode()
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + bytes(48))" "$TMP/l1in.st"
expect 0 "events in $TMP/l1.json" -- env GCC_GRAPH_PROFILE="$TMP/l1.json" "$GG" bench "$TMP/l1.so" --inputs "$TMP/l1in.st" --iters 2
expect 0 "add\ufffd\ufffd\ufffd (add.Tensor)" -- python3 -c "
import json, sys
j = json.load(open(sys.argv[1], encoding='utf-8'))
print(ascii(sorted({e['name'] for e in j['traceEvents'] if e['ph'] == 'X'})))" "$TMP/l1.json"
# explain --html: one self-contained page (tests/report_page.py checks its data), drawn in headless
# Chromium where it is installed (the DOM it renders: every kernel, stage and tensor, no script error,
# a model's HTML-like names shown as text)
expect 0 "wrote $TMP/bert.html" -- "$GG" explain $M/bert_tiny/model.pt2 --html "$TMP/bert.html"
expect 0 "wrote $TMP/mlp.html" -- "$GG" explain $M/mlp/model.pt2 --html "$TMP/mlp.html" --profile "$TMP/trace.json"
expect 0 "wrote $TMP/evil.html" -- "$GG" explain tests/bad/html_names.json --html "$TMP/evil.html"
expect 0 "wrote $TMP/train.html" -- "$GG" explain tests/corpus/train/mlp_train/model.pt2 --train --html "$TMP/train.html"
expect 0 "ok" -- python3 tests/report_page.py "$TMP/bert.html"
expect 0 "ok" -- python3 tests/report_page.py "$TMP/mlp.html" --profile
expect 0 "ok" -- python3 tests/report_page.py "$TMP/evil.html" --evil
expect 0 '"saved_bytes"' -- grep -o '"saved_bytes"' "$TMP/train.html"
expect 1 "not a Chrome trace" -- "$GG" explain $M/mlp/model.pt2 --html "$TMP/x.html" --profile $M/mlp/io.safetensors
expect 1 "cannot open" -- "$GG" explain $M/mlp/model.pt2 --html "$TMP/x.html" --profile "$TMP/nonexistent.json"
expect 1 "cannot write" -- "$GG" explain $M/mlp/model.pt2 --html /nonexistent/x.html
expect 2 "--profile goes with --html" -- "$GG" explain $M/mlp/model.pt2 --profile "$TMP/trace.json"
expect 2 "not a compiled .so" -- "$GG" explain "$TMP/mlp.so" --html "$TMP/x.html"
expect 2 "--html needs a file name, not '--train'" -- "$GG" explain $M/mlp/model.pt2 --html --train
expect 2 "--cuda-arch takes sm_XY" -- "$GG" explain $M/mlp/model.pt2 --target cuda --cuda-arch garbage --html "$TMP/x.html"
expect 2 "goes with --target cuda" -- "$GG" explain $M/mlp/model.pt2 --cuda-arch sm_90
CHROMIUM=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -n "$CHROMIUM" ]; then
  for page in bert mlp:--profile evil:--evil train; do
    name=${page%%:*} flag=""
    [ "$name" != "$page" ] && flag=${page#*:}
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$TMP/chromium" \
      --dump-dom "file://$(realpath "$TMP/$name.html")" >"$TMP/$name.dom" 2>"$TMP/chromium.log"
    expect 0 "ok" -- python3 tests/report_page.py "$TMP/$name.html" "$TMP/$name.dom" $flag
  done
else
  echo "skipped: explain --html's page in a browser (no chromium: apt-get install chromium)"
fi
# explain a compiled model from its metadata
expect 0 "in.0  'x'                      float32[8, 64]" -- "$GG" explain "$TMP/mlp.so"
expect 0 "s77 in [1, 64]" -- "$GG" explain "$TMP/dyn.so"
expect 0 "guards (checked before every run)" -- "$GG" explain "$TMP/dyn.so"
expect 0 "external in 'model.pt2'" -- "$GG" explain "$TMP/mlp_ext.so"
# a .so needs only libc, libm, libgomp and the BLAS
readelf -d "$TMP/mlp.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort >"$TMP/needed"
# (glibc's loader ld-linux provides __tls_get_addr: the runtime's per-thread packing buffers)
expect 0 "" -- sh -c "! grep -vE '^(libc\.so|libm\.so|libgomp\.so|libopenblas\.so|libblas\.so|libpthread\.so|ld-linux)' '$TMP/needed'"
expect 0 "libopenblas" -- cat "$TMP/needed"
# samples: a C program that dlopens a model, and the Python loader
expect 0 "" -- ${CC:-cc} -Iinclude samples/run_model.c -ldl -o "$TMP/run_model"
expect 0 "out.0: [8, 10]" -- "$TMP/run_model" "$TMP/mlp.so"
expect 0 "out.0: [2, 10]" -- "$TMP/run_model" "$TMP/dyn.so"   # a symbolic batch, fed at 2
expect 0 "" -- "$GG" compile $M/llama_tiny/model.pt2 -o "$TMP/llama.so"
expect 0 "out.0: [1, 24, 1000]" -- "$TMP/run_model" "$TMP/llama.so"     # int64 token ids
PY=${PYTHON:-python3}
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import numpy" 2>/dev/null && PY=/usr/bin/python3
if "$PY" -c "import numpy" 2>/dev/null; then
  expect 0 "python loader ok" -- "$PY" tests/python_loader.py "$TMP/mlp.so" $M/mlp/io.safetensors
  expect 0 "python loader ok" -- "$PY" tests/python_loader.py "$TMP/dyn.so" $M/mlp_dynamic_batch/io.safetensors
  expect 0 "python training ok" -- "$PY" tests/python_train.py "$TMP/sgd.so" tests/corpus/train/mlp_train/io.safetensors
  # tied weights (one Parameter under two names): one gradient, one storage, updated as one
  expect 0 "tied to 'emb.weight' (one storage, one gradient)" -- "$GG" explain tests/extra/train_tied/model.pt2
  expect 0 "" -- "$GG" compile tests/extra/train_tied/model.pt2 --train --optimizer adamw -o "$TMP/tied.so"
  expect 0 "python training ok: 5 gradients" -- "$PY" tests/python_train.py "$TMP/tied.so" tests/extra/train_tied/io.safetensors
  # random ops (rand, randn, randperm, dropout in training): their statistics, fresh draws per run,
  # manual_seed and GCC_GRAPH_SEED repeating them, the interpreter's generator the compiled model's
  R=tests/random/random_ops
  expect 0 "" -- "$GG" compile $R/model.pt2 -o "$TMP/rnd.so"
  expect 0 "" -- env GCC_GRAPH_SEED=7 "$GG" run "$TMP/rnd.so" --inputs $R/io.safetensors -o "$TMP/rnd.st"
  expect 0 "" -- env GCC_GRAPH_SEED=7 "$GG" run $R/model.pt2 --interpret --inputs $R/io.safetensors -o "$TMP/rndi.st"
  expect 0 "random ops ok" -- "$PY" tests/random_ops.py "$TMP/rnd.so" $R/io.safetensors "$TMP/rnd.st" "$TMP/rndi.st"
  # data-parallel on the CPU: 2 ranks through torch.distributed's gloo against one process (docs/distributed.md)
  if "$PY" -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
    expect 0 "" -- "$GG" compile tests/extra/train_tiny_resnet/model.pt2 --train --optimizer sgd --lr 0.05 --momentum 0.9 --bucket-mb 0.001 -o "$TMP/dp.so"
    expect 0 "data parallel ok: 2 ranks" -- "$PY" tests/data_parallel.py "$TMP/dp.so" tests/extra/train_tiny_resnet/io.safetensors 5
    expect 0 "data parallel ok: 3 ranks" -- "$PY" tests/data_parallel.py "$TMP/dp.so" tests/extra/train_tiny_resnet/io.safetensors 2 3
    expect 0 "5" -- sh -c "nm -D --defined-only '$TMP/dp.so' | grep -c ' T gg_\\(bucket\\|num_buckets\\|set_data_parallel\\|nccl_unique_id\\|set_data_parallel_nccl\\)\$'"
  else
    no "python3 with torch.distributed (gloo) is needed for the data-parallel test (Debian: python3-torch)"
  fi
else
  no "python3 with NumPy is needed to test the Python package (python/)"
fi
# bench/gpu_profile.py on a listing as ncu writes it (tests/gpu_profile: an earlier call with a timing
# candidate, then four alike; "12,000" nanoseconds): the last call's kernels by node, and with
# --explain the products' FLOPs over the cuBLAS kernels' time (2.8 GFLOP in 14 us: 200 TFLOP/s)
expect 0 "products: 2 in the schedule, 2.8 GFLOP over 2 cuBLAS kernels' 0.014 ms: 200 TFLOP/s = 28.6% of 700 TFLOP/s" -- \
  python3 bench/gpu_profile.py tests/gpu_profile/ncu.csv tests/gpu_profile/model.cu 3 --explain tests/gpu_profile/explain.json --ceiling 700
grep -q "^| k1 pointwise: node relu (relu) | 0.003 |" "$TMP/out" && grep -q "^4 kernels, 0.019 ms" "$TMP/out" && ok || no "gpu_profile.py: $(head -n 3 "$TMP/out")"
# bench/gpu_suite.py (PRODUCTS=1) reads the products' line that gpu_profile.py and gpu_trace.py print
cp "$TMP/out" "$TMP/prof_out"
if "$PY" -c "import torch" 2>/dev/null; then
  expect 0 "(0.014, 200.0)" -- "$PY" -c "import sys; sys.path.insert(0, 'bench'); import gpu_suite; print(gpu_suite.products_rate(open(sys.argv[1]).read()))" "$TMP/prof_out"
  # bench/gpu_trace.py refuses a CPU model by name
  "$GG" compile $M/mlp/model.pt2 -o "$TMP/trace_cpu.so" >/dev/null 2>&1
  expect 1 "trace_cpu.so: a CPU model; gpu_trace.py traces models compiled with --target cuda" -- "$PY" bench/gpu_trace.py "$TMP/trace_cpu.so" $M/mlp/io.safetensors /dev/null
else
  no "python3 with torch is needed to test bench/gpu_suite.py's reading of the products' rate"
fi
echo "== the Python package: pip install ./python into a fresh venv (offline), used from another folder"
if "$PY" -c "import numpy, torch, venv, ensurepip" 2>/dev/null; then
  rm -rf "$TMP/venv" "$TMP/pkg" && mkdir -p "$TMP/pkg"
  cp $M/mlp/model.pt2 "$TMP/pkg/mlp.pt2" && cp $M/mlp/io.safetensors "$TMP/pkg/mlp.st"
  cp tests/corpus/train/mlp_train/model.pt2 "$TMP/pkg/train.pt2" && cp tests/corpus/train/mlp_train/io.safetensors "$TMP/pkg/train.st"
  echo "not a zip" >"$TMP/pkg/bad.pt2"
  if "$PY" -m venv --system-site-packages "$TMP/venv" >"$TMP/err" 2>&1 &&
     "$TMP/venv/bin/python" -m pip install -q --no-index ./python >>"$TMP/err" 2>&1; then
    expect 0 "python package ok" -- env XDG_CACHE_HOME="$TMP/pkg/cache" GCC_GRAPH="$PWD/$GG" "$TMP/venv/bin/python" tests/python_package.py "$TMP/pkg"
    expect 0 "gcc_graph-$(sed -n 's/^version = "\(.*\)"/\1/p' python/pyproject.toml)-py3-none-any.whl" -- sh -c '"$1" -m pip wheel -q --no-index --no-deps ./python -w "$2" && ls "$2"' _ "$TMP/venv/bin/python" "$TMP/pkg/whl"
  else
    no "pip install ./python into a venv: $(tail -n 5 "$TMP/err")"
  fi
else
  no "python3 with NumPy, torch and venv (python3-venv) is needed to test the Python package"
fi
mkdir -p "$TMP/mk/models" && cp $M/mlp/model.pt2 "$TMP/mk/models/a.pt2"
expect 0 "" -- make -s -C "$TMP/mk" -f "$PWD/samples/Makefile" GCC_GRAPH="$PWD/$GG"
expect 0 "" -- test -f "$TMP/mk/build/models/a.so"
expect 0 "Nothing to be done" -- make -C "$TMP/mk" -f "$PWD/samples/Makefile" GCC_GRAPH="$PWD/$GG"
# exports named from another folder, with -MD's dependencies: a changed .pt2 is rebuilt, an unchanged one not
mkdir -p "$TMP/mk/exports" && cp $M/mlp/model.pt2 "$TMP/mk/exports/b.pt2"
expect 0 "" -- make -s -C "$TMP/mk" -f "$PWD/samples/Makefile" GCC_GRAPH="$PWD/$GG" MODELS="exports/b.pt2"
expect 0 "build/models/b.so: exports/b.pt2" -- cat "$TMP/mk/build/models/b.d"
expect 0 "Nothing to be done" -- make -C "$TMP/mk" -f "$PWD/samples/Makefile" GCC_GRAPH="$PWD/$GG" MODELS="exports/b.pt2"
touch -d "1 hour ago" "$TMP/mk/build/models/b.so"   # (older than its .pt2, as after a new export)
expect 1 "" -- make -q -C "$TMP/mk" -f "$PWD/samples/Makefile" GCC_GRAPH="$PWD/$GG" MODELS="exports/b.pt2"

# make install: binary, header, pkg-config file, man page under DESTDIR/PREFIX; the sample builds against them
expect 0 "" -- make -s install DESTDIR="$TMP/inst" PREFIX=/opt/gg BUILD="$BUILD"
expect 0 "gcc-graph 0" -- "$TMP/inst/opt/gg/bin/gcc-graph" --version
expect 0 "prefix=/opt/gg" -- cat "$TMP/inst/opt/gg/lib/pkgconfig/gcc-graph.pc"
expect 0 "" -- test -f "$TMP/inst/opt/gg/share/man/man1/gcc-graph.1"
expect 0 "" -- ${CC:-cc} -I"$TMP/inst/opt/gg/include" samples/run_model.c -ldl -o "$TMP/run_model2"

echo "== hostile inputs"
grep -v '^#' tests/bad/expect.txt | while read -r file cmd msg; do
  [ -n "$file" ] || continue
  if [ "$cmd" = run ]; then
    mk_st "$TMP/in.st" in.0 F32 2,3 24
    set -- "$GG" run "tests/bad/$file" --inputs "$TMP/in.st" -o "$TMP/o.st"
  elif [ "$cmd" = train ]; then
    set -- "$GG" run "tests/bad/$file" --train --inputs "$TMP/in.st" -o "$TMP/o.st"
  else
    set -- "$GG" explain "tests/bad/$file"
  fi
  timeout 20 "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc = 1 ] && grep -qF -- "$msg" "$TMP/err"; then echo ok; else echo "FAIL tests/bad/$file: exit $rc: $(head -c 300 "$TMP/err")"; fi
done >"$TMP/bad"
pass=$((pass + $(grep -c '^ok' "$TMP/bad")))
fail=$((fail + $(grep -c '^FAIL' "$TMP/bad")))
grep '^FAIL' "$TMP/bad"

echo "== concurrency: compiled models run from 8 threads at once, built with ThreadSanitizer (clang, libomp's archer)"
# each model's -S sources and tests/concurrency.c built with -fsanitize=thread; OpenMP regions run
# 2 threads under libomp, whose synchronization TSan learns from archer (OMP_TOOL_LIBRARIES)
archer=$(${FUZZ_CC:-clang} -print-resource-dir 2>/dev/null)/../../libarcher.so
if printf '#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n' >"$TMP/o.c" &&
   ${FUZZ_CC:-clang} -fsanitize=thread -fopenmp "$TMP/o.c" -o "$TMP/o" >/dev/null 2>&1 && [ -f "$archer" ]; then
  for c in $M/cnn_small $M/bert_tiny tests/corpus/train/mlp_train; do
    n=$(basename $c) tflag=""
    case $n in *_train) tflag=--train;; esac
    rm -rf "$TMP/ts_$n"
    if "$GG" compile $c/model.pt2 $tflag -S -o "$TMP/ts_$n" >"$TMP/err" 2>&1 &&
       (cd "$TMP/ts_$n" && ${FUZZ_CC:-clang} -O1 -g -std=gnu11 -fPIC -fopenmp -fsanitize=thread -DGG_NO_CLONES -shared model.c gg_rt.c -lopenblas -lm -o libts.so) >>"$TMP/err" 2>&1 &&
       ${FUZZ_CC:-clang} -O1 -g -std=c11 -fsanitize=thread -fopenmp -Iinclude tests/concurrency.c "$TMP/ts_$n/libts.so" -Wl,-rpath,"$TMP/ts_$n" -lpthread -o "$TMP/ts_$n/t" >>"$TMP/err" 2>&1; then
      OMP_NUM_THREADS=2 OMP_TOOL_LIBRARIES="$archer" TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1" "$TMP/ts_$n/t" $c/io.safetensors 8 3 >"$TMP/tso" 2>&1
      if [ $? = 0 ] && grep -q "^1 passed, 0 failed" "$TMP/tso" && ! grep -q "ThreadSanitizer" "$TMP/tso"; then ok; else no "concurrent runs of $n: $(grep -m 3 -E 'FAIL|SUMMARY|WARNING' "$TMP/tso")"; fi
    else
      no "ThreadSanitizer build of $n: $(head -c 300 "$TMP/err")"
    fi
  done
else
  echo "(clang with -fsanitize=thread, libomp and its archer library are needed: apt-get install clang libomp-dev; not run)"
fi
echo "== fuzzing: each libFuzzer harness (tests/fuzz) for ${FUZZ_TEST_SECONDS:-5} s, where clang has its fuzzer runtime"
if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' >"$TMP/f.c" &&
   ${FUZZ_CC:-clang} -fsanitize=fuzzer "$TMP/f.c" -o "$TMP/f" >/dev/null 2>&1; then
  fz="model pt2 safetensors run"   # the run harness builds a model's OpenMP code: clang needs libomp
  printf '#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n' >"$TMP/o.c"
  ${FUZZ_CC:-clang} -fopenmp "$TMP/o.c" -o "$TMP/o" >/dev/null 2>&1 || { fz="model pt2 safetensors"; echo "(clang -fopenmp does not link: fuzz_run is not run; apt-get install libomp-dev)"; }
  if make -s fuzz-build FUZZ_NAMES="$fz" >"$TMP/fuzzbuild" 2>&1; then
    BUILD=build-fuzz sh tests/fuzz/run.sh "${FUZZ_TEST_SECONDS:-5}" $fz >"$TMP/fuzz" 2>&1
    tally "$TMP/fuzz" fuzz
    grep '^ok' "$TMP/fuzz"
  else
    no "make fuzz-build: $(tail -n 5 "$TMP/fuzzbuild")"
  fi
else
  echo "(clang -fsanitize=fuzzer does not link: the fuzz harnesses are not run; apt-get install clang libclang-rt-dev)"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
