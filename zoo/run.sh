#!/bin/sh
# zoo/run.sh EXPORTDIR WORKDIR [NAME...]: every case that zoo/export.py wrote into EXPORTDIR (or the
# NAMEs given, or shell patterns such as 'hf_*'), compiled by gcc-graph on the CPU and, where
# nvidia-smi finds a GPU, with --target cuda, run on its inputs and compared with PyTorch's float32
# and float64 outputs (tests/compile_case.sh: the error allowed is 10 times PyTorch float32's own),
# JOBS at once; then the table (zoo/table.py), written to WORKDIR/zoo.md and to stdout. Each case's
# verdict is kept in WORKDIR/cpu/NAME.result and WORKDIR/cuda/NAME.result (and the .so and outputs
# of the cases that fail, beside them).
#
# Environment: BUILD (the folder with gcc-graph and test-golden, from the repository's root or
# absolute; default build), JOBS (cases at once; default the processors), TARGETS ("cpu cuda"; default
# cpu, and cuda when a GPU is there), ZOO_TIMEOUT (seconds per case and target, default 900),
# OMP_NUM_THREADS (threads of each compiled model's run; default 1, as JOBS run at once).
set -u
if [ "${1:-}" = --one ]; then   # internal: one case on one target
  t=$2 case=$3 work=$4
  n=$(basename "$case")
  s=$(date +%s)
  tgt=
  [ "$t" = cuda ] && tgt=cuda
  r=$(TARGET=$tgt timeout -k 10 "${ZOO_TIMEOUT:-900}" sh tests/compile_case.sh "$case" "$work/$t" 2>&1)
  rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && r="FAIL $case: timeout: more than ${ZOO_TIMEOUT:-900} s"
  [ -n "$r" ] || r="FAIL $case: tests/compile_case.sh ended with status $rc and said nothing"
  printf '%s\n' "$r" > "$work/$t/$n.result"
  case $r in *"is not supported"*)   # every op the model needs that gcc-graph lacks, not only the first
    "$BUILD/gcc-graph" explain "$case/model.pt2" --json 2>/dev/null | python3 -c 'import json, sys
for u in json.load(sys.stdin).get("unsupported") or []: print(u.get("target", "?"))' > "$work/$t/$n.unsupported" 2>/dev/null ;;
  esac
  echo $(($(date +%s) - s)) > "$work/$t/$n.seconds"
  printf '%-4s %s\n' "$t" "$(printf '%s' "$r" | head -n 1 | cut -c 1-240)"
  exit 0
fi

if [ $# -lt 2 ]; then echo "usage: zoo/run.sh EXPORTDIR WORKDIR [NAME...]" >&2; exit 2; fi
exp=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && work=$(cd "$2" && pwd) || exit 2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2   # tests/compile_case.sh reads tests/ from the repository's root
BUILD=${BUILD:-build}
export BUILD
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for b in gcc-graph test-golden; do
  [ -x "$BUILD/$b" ] || { echo "zoo/run.sh: no $BUILD/$b (make $BUILD/gcc-graph $BUILD/test-golden, or BUILD=...)" >&2; exit 2; }
done
if [ -z "${TARGETS:-}" ]; then
  TARGETS=cpu
  nvidia-smi -L >/dev/null 2>&1 && TARGETS="cpu cuda"
fi
JOBS=${JOBS:-$(nproc)}

cases=
if [ $# -gt 0 ]; then
  for n in "$@"; do for d in "$exp"/$n; do [ -f "$d/model.pt2" ] && cases="$cases $d"; done; done   # NAME may be a pattern (hf_*)
else
  for d in "$exp"/*/; do d=${d%/}; [ -f "$d/model.pt2" ] && cases="$cases $d"; done
fi
set -- $cases
[ $# -gt 0 ] || { echo "zoo/run.sh: no exported case in $exp (zoo/export.py writes them)" >&2; exit 2; }
echo "zoo: $# cases, targets: $TARGETS, $JOBS at once, gcc-graph: $BUILD/gcc-graph"
s0=$(date +%s)
for t in $TARGETS; do mkdir -p "$work/$t"; rm -f "$work/$t"/*.result "$work/$t"/*.seconds "$work/$t"/*.unsupported; done
# the first case alone on each target: gcc-graph builds its runtime once into its cache
for t in $TARGETS; do sh "$root/zoo/run.sh" --one "$t" "$1" "$work"; done
shift
for c in "$@"; do for t in $TARGETS; do echo "$t $c $work"; done; done | xargs -P "$JOBS" -L 1 sh "$root/zoo/run.sh" --one
echo "zoo: compiled and ran in $(($(date +%s) - s0)) s"
ZOO_TARGETS="$TARGETS" python3 "$root/zoo/table.py" "$exp" "$work" > "$work/zoo.md" && cat "$work/zoo.md"
