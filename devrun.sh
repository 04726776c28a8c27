#!/bin/sh
set -u
tar xJf .carry.tar.xz
export LD_LIBRARY_PATH=$PWD/.carry/lib CPATH=$PWD/.carry/include LIBRARY_PATH=$PWD/.carry/lib PYTHONUNBUFFERED=1
ln -sf libopenblas.so.0 .carry/lib/libopenblas.so
python3 tests/extra_src/export.py $OUT/exp grad_scalar_ops 2>&1 | grep -v Warning | grep -v "cls.__new__" | tail -8
(cd $OUT/exp && tar czf $OUT/exp3.tgz . ) && rm -rf $OUT/exp
THREADS=16 ITERS=20 BUILD=build sh bench/run.sh .carry/shared_bench/mlp_big .carry/shared_bench/resnet18_224 .carry/shared_bench/mobilenet_v3_small_224 .carry/shared_bench/encoder_d256_s128_b4 2>&1 | tee $OUT/bench_inf.txt
