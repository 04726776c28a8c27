#!/bin/sh
# device: per-node profiles of the training benchmarks at 16 threads, then the training table
set -u
tar xJf .carry.tar.xz
export LD_LIBRARY_PATH=$PWD/.carry/lib CPATH=$PWD/.carry/include LIBRARY_PATH=$PWD/.carry/lib PYTHONUNBUFFERED=1
ln -sf libopenblas.so.0 .carry/lib/libopenblas.so
W=/tmp/w; mkdir -p $W
for m in encoder_train resnet_small_train; do
  python3 bench/make_weights.py bench/train/$m $W/$m >/dev/null
  build/gcc-graph compile bench/train/$m/model.json --weights $W/$m/weights.safetensors --train -o $W/$m.so
  GCC_GRAPH_PROFILE=1 OMP_NUM_THREADS=16 build/gcc-graph bench $W/$m.so --inputs $W/$m/input.safetensors --iters 10 2>&1 | grep -v "^ *[0-9.]* ms *[0-9.]*% .*" | head -3
  GCC_GRAPH_PROFILE=1 OMP_NUM_THREADS=16 build/gcc-graph bench $W/$m.so --inputs $W/$m/input.safetensors --iters 10 2>&1 | head -44 > $OUT/prof_$m.txt
done
TRAIN=1 THREADS=16 ITERS=10 BUILD=build sh bench/run.sh 2>&1 | tee $OUT/bench_train.txt
