#!/bin/sh
# cuda_source.sh CASE_DIR WORK_DIR: generate a case's CUDA source (compile --target cuda -S; training
# cases with --train: the forward and the backward) and compile it with nvcc (no GPU needed) to PTX:
# the C++ front end checks host and device code alike, and the device code is generated; ptxas and the
# host compiler are left out (a third of the time), as is optimization: the test is whether nvcc accepts
# the code. make test builds two whole CUDA .so files, and make test-cuda builds and runs every case.
# Prints "ok CASE" or "FAIL CASE: why". GENERATE_ONLY=1 (make
# sanitize) stops after generating: the sanitizers watch gcc-graph, not nvcc.
case=$1 work=$2
BUILD=${BUILD:-build}
name=$(echo "$case" | tr / _)
d="$work/$name"
expect=$(grep "^$case " tests/compile_refused.txt 2>/dev/null | cut -d' ' -f2-)
prec=$(sed -n 's/.*"precision": "\([a-z0-9]*\)".*/\1/p' "$case/case.json" 2>/dev/null)
train=
grep -q '"kind": "train"' "$case/case.json" 2>/dev/null && train=--train
"$BUILD/gcc-graph" compile "$case/model.pt2" --target cuda $train ${prec:+--precision $prec} -S -o "$d" >"$d.err" 2>&1
rc=$?
if [ -n "$expect" ]; then
  if [ $rc = 1 ] && grep -qF -- "$expect" "$d.err"; then echo "ok $case (refused as expected)"; else echo "FAIL $case: expected refusal '$expect', got exit $rc: $(head -c 300 "$d.err")"; fi
  exit 0
fi
if [ $rc != 0 ]; then echo "FAIL $case: generate CUDA: $(head -c 400 "$d.err")"; exit 0; fi
if [ "${GENERATE_ONLY:-0}" = 1 ]; then echo "ok $case"; rm -rf "$d" "$d.err"; exit 0; fi
for cu in "$d"/model*.cu; do
  if ! (cd "$d" && ${NVCC:-nvcc} -arch=compute_90 -ptx -O0 -diag-suppress=177,550 -I/usr/include/x86_64-linux-gnu "${cu##*/}" -o model.ptx) >"$d.err" 2>&1; then
    echo "FAIL $case: nvcc on ${cu##*/}: $(grep -m 3 error "$d.err" | head -c 400)"; exit 0
  fi
done
# the host code (launches, library calls, descriptors) is plain C11: the C compiler checks it
if ! (cd "$d" && ${CC:-cc} -std=gnu11 -fsyntax-only -Wall -Wno-unused-function -Wno-unused-variable -I/usr/include/x86_64-linux-gnu model.c) >"$d.err" 2>&1; then
  echo "FAIL $case: cc on the host code: $(grep -m 3 -E 'error|warning' "$d.err" | head -c 400)"; exit 0
fi
echo "ok $case"
rm -rf "$d" "$d.err"
