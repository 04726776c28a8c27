#!/bin/sh
# device: export the new cases with PyTorch 2.11, then time training steps against PyTorch eager
set -u
tar xJf .carry.tar.xz
export LD_LIBRARY_PATH=$PWD/.carry/lib CPATH=$PWD/.carry/include LIBRARY_PATH=$PWD/.carry/lib PYTHONUNBUFFERED=1
ln -sf libopenblas.so.0 .carry/lib/libopenblas.so
nproc; python3 -c "import torch; print(torch.__version__)"; grep -m1 'model name' /proc/cpuinfo
python3 tests/extra_src/export.py $OUT/exp grad_unary grad_shapes grad_pool grad_matmul3d train_tiny_lm train_tiny_resnet train_llama_mlp train_misc bench 2>&1 | grep -v Warning | tail -40
(cd $OUT/exp && tar czf $OUT/exp.tgz . ) && rm -rf $OUT/exp
mkdir -p bench/train && tar xzf $OUT/exp.tgz -C /tmp && cp -r /tmp/bench_train/* bench/train/
ls bench/train
TRAIN=1 THREADS=16 ITERS=${ITERS:-10} BUILD=build sh bench/run.sh 2>&1 | tee $OUT/bench_train.txt
