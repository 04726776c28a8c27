#!/bin/sh
# setup.sh: install the Debian packages gcc-graph's build and tests use that this machine lacks
# (apt-get, as root or through sudo). `make test`, `make demo` and .ci/run call it first; with
# everything installed it does nothing. GCC_GRAPH_NO_SETUP=1 skips it.
#   build:  a C compiler, cJSON, minizip, OpenBLAS (its OpenMP build), DLPack's header
#   tests:  NumPy and PyTorch (side-by-side answers, the Python package), clang with its sanitizer
#           and fuzzer runtimes and libomp (TSan, libFuzzer), unzip, venv and pip (pip install ./python),
#           Chromium (explain --html's page, drawn headless)
set -u
[ "${GCC_GRAPH_NO_SETUP:-0}" = 1 ] && exit 0
BUILD_PKGS="build-essential libcjson-dev libminizip-dev libopenblas-dev libopenblas0-openmp libdlpack-dev"
TEST_PKGS="python3-numpy python3-torch python3-venv python3-pip clang libclang-rt-14-dev libomp-dev unzip chromium"
if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: not a Debian system; install the equivalents of: $BUILD_PKGS (and for the tests: $TEST_PKGS)" >&2
  exit 0
fi
missing=""
for pkg in $BUILD_PKGS $TEST_PKGS; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  SUDO=none
fi
if [ "$SUDO" != none ]; then
  echo "setup: installing$missing" >&2
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >&2 && exit 0
  echo "setup: apt-get failed" >&2
fi
need=""
for pkg in $BUILD_PKGS; do
  case " $missing " in *" $pkg "*) need="$need $pkg";; esac
done
echo "setup: missing:$missing; as root: apt-get install$missing" >&2
[ -z "$need" ] || exit 1   # the build cannot go on; the tests that need the others say they were not run
exit 0
