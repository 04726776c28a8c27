#!/bin/sh
# compile_case.sh CASE_DIR WORK_DIR: compile a case, run the .so on its inputs, compare with PyTorch.
# Training cases (case.json kind "train") compile with --train and compare the loss, every
# gradient and every updated buffer.
# Prints "ok CASE" or "FAIL CASE: why". Cases listed in tests/compile_refused.txt (and, on the CPU,
# tests/compile_refused_cpu.txt) must instead be refused with exit status 1 and the message given there. TARGET=cuda compiles with --target cuda
# (make test-cuda, on a machine with a GPU), training cases too; GG_FLAGS adds compile options.
case=$1 work=$2
BUILD=${BUILD:-build}
name=$(echo "$case" | tr / _)
expect=$(grep "^$case " tests/compile_refused.txt 2>/dev/null | cut -d' ' -f2-)
# refused on the CPU only (tests/compile_refused_cpu.txt): --target cuda compiles them
[ "$TARGET" = cuda ] || [ -n "$expect" ] || expect=$(grep "^$case " tests/compile_refused_cpu.txt 2>/dev/null | cut -d' ' -f2-)
train=
grep -q '"kind": "train"' "$case/case.json" 2>/dev/null && train=--train
# a case exported with "precision" (case.json) compiles with --precision; its out.N are PyTorch's
# answers under torch.autocast (or TF32), and its error is held to 3 times theirs
prec=$(sed -n 's/.*"precision": "\([a-z0-9]*\)".*/\1/p' "$case/case.json" 2>/dev/null)
factor=
[ -n "$prec" ] && factor="--factor 3"
target=
[ "$TARGET" = cuda ] && target="--target cuda"
"$BUILD/gcc-graph" compile "$case/model.pt2" $train $target ${prec:+--precision $prec} $GG_FLAGS -o "$work/$name.so" >"$work/$name.err" 2>&1
rc=$?
if [ -n "$expect" ]; then
  if [ $rc = 1 ] && grep -qF -- "$expect" "$work/$name.err"; then echo "ok $case (refused as expected)"; else echo "FAIL $case: expected refusal '$expect', got exit $rc: $(head -c 300 "$work/$name.err")"; fi
  exit 0
fi
if [ $rc != 0 ]; then echo "FAIL $case: compile: $(head -c 400 "$work/$name.err")"; exit 0; fi
if ! "$BUILD/gcc-graph" run "$work/$name.so" --inputs "$case/io.safetensors" -o "$work/$name.st" >"$work/$name.err" 2>&1; then
  echo "FAIL $case: run: $(head -c 300 "$work/$name.err")"; exit 0
fi
if ! "$BUILD/test-golden" --compare "$work/$name.st" "$case/io.safetensors" $factor >"$work/$name.err" 2>&1; then
  echo "FAIL $case: $(head -c 300 "$work/$name.err")"; exit 0
fi
echo "ok $case"
rm -f "$work/$name.so" "$work/$name.st" "$work/$name.err"
