#!/bin/sh
# carry.sh DIR: the libraries and headers gcc-graph's build takes from Debian (cJSON, minizip, DLPack's
# header, OpenBLAS's OpenMP build with its Fortran runtime), packed into DIR (the large ones as xz),
# with DIR/env.sh, which a shell in the checkout on another x86-64 machine sources to unpack them into
# /tmp/gg-carry and build gcc-graph there: for a machine that has a C compiler, CUDA and PyTorch but
# not these packages (the GPU hosts the benchmarks run on). Run here, after tools/setup.sh.
#   tools/carry.sh .dev   (here; .dev is git-ignored: carry it with the checkout), then there:  . .dev/env.sh
set -eu
out=${1:?usage: tools/carry.sh DIR}
lib=/usr/lib/x86_64-linux-gnu inc=/usr/include
blas=$lib/openblas-openmp/libopenblas.so.0
for f in $inc/cjson/cJSON.h $inc/minizip/unzip.h $inc/dlpack/dlpack.h $inc/x86_64-linux-gnu/cblas.h $lib/libcjson.so.1 $lib/libminizip.so.1 "$blas"; do
  [ -e "$f" ] || { echo "carry.sh: $f is missing (tools/setup.sh installs it)" >&2; exit 1; }
done
rm -rf "$out/include" "$out/lib" "$out/libs.tar.xz" "$out/libopenblas.so.0.xz"
mkdir -p "$out/include" "$out/lib"
cp -a $inc/cjson $inc/minizip $inc/dlpack "$out/include/"
cp $inc/x86_64-linux-gnu/cblas.h $inc/x86_64-linux-gnu/openblas_config.h $inc/x86_64-linux-gnu/cblas_mangling.h "$out/include/" 2>/dev/null || true
cp -a $lib/libcjson.so* $lib/libminizip.so* "$out/lib/"
for dep in $(ldd "$blas" | awk '/libgfortran|libquadmath/ {print $3}'); do cp -L "$dep" "$out/lib/"; done
(cd "$out" && tar cJf libs.tar.xz lib && rm -rf lib)
xz -T0 -c "$blas" >"$out/libopenblas.so.0.xz"
cat >"$out/env.sh" <<'ENV'
# sourced in the checkout: unpack the carried libraries into /tmp/gg-carry, point the compilers and
# the loader at them (and at CUDA's and the Python wheels' libraries), then build gcc-graph
D=$(cd "${GG_CARRY:-.dev}" && pwd)   # the folder this file is in (GG_CARRY=DIR when it is not .dev)
C=/tmp/gg-carry
mkdir -p $C && tar xJf "$D/libs.tar.xz" -C $C && cp -a $C/lib/. $C/ && rm -rf $C/lib
xz -dc "$D/libopenblas.so.0.xz" >$C/libopenblas.so.0 && ln -sf libopenblas.so.0 $C/libopenblas.so
# a compiled model links OpenBLAS's OpenMP build where Debian puts it
mkdir -p /usr/lib/x86_64-linux-gnu/openblas-openmp 2>/dev/null && cp $C/libopenblas.so.0 /usr/lib/x86_64-linux-gnu/openblas-openmp/ 2>/dev/null
NV=$(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
L=""; for d in $NV; do [ -d "$d" ] && L=$L:$d; done
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LIBRARY_PATH=$C:/usr/local/cuda/lib64 CPATH=$D/include:/usr/local/cuda/include
make -j"$(nproc)" build/gcc-graph build/test-golden >/tmp/gg-carry/make.log 2>&1 || { tail -30 /tmp/gg-carry/make.log; return 1 2>/dev/null || exit 1; }
ENV
du -sh "$out"
