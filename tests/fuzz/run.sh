#!/bin/sh
# run.sh SECONDS [HARNESS...]: run the libFuzzer harnesses (built by `make fuzz-build` into
# $BUILD, default build-fuzz) for SECONDS each, one after another on one core. Corpora grow in
# $BUILD/corpus/NAME, seeded from tests/corpus, tests/extra* and tests/bad; a crash, leak or
# sanitizer report is written to $BUILD/crashes/NAME/ and fails the run (exit 1). Ends with
# "N passed, N failed" (one per harness) for tests/run.sh.
# FUZZ_JOBS=N runs N independent fuzzers per harness (libFuzzer's -jobs/-workers: one process each,
# sharing the corpus; logs in $BUILD/fuzz_NAME.jobs/); executions are summed over them. On a
# many-core host this scales where -fork did not (about a third of the rate per core on 64 cores).
BUILD=${BUILD:-build-fuzz}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac   # FUZZ_JOBS runs in a folder of its own
secs=${1:-60}
shift
names=${*:-"model pt2 safetensors run"}
pass=0 fail=0
for name in $names; do
  bin=$BUILD/fuzz_$name
  corpus=$BUILD/corpus/$name
  crashes=$BUILD/crashes/$name
  mkdir -p "$corpus" "$crashes"
  # seeds: every corpus case's model (as JSON for the model harness), its inputs, and the hostile files
  case $name in
    model)
      if [ ! -f "$corpus/.seeded" ]; then
        for f in tests/corpus/*/*/model.json tests/extra*/*/model.json tests/bad/*.json; do
          [ -f "$f" ] && cp "$f" "$corpus/$(echo "$f" | tr / _)"
        done
        # the JSON inside the small .pt2 archives
        for f in tests/corpus/ops*/*/model.pt2 tests/corpus/models/mlp*/model.pt2; do
          [ -f "$f" ] && unzip -p "$f" '*/models/model.json' >"$corpus/$(echo "$f" | tr / _).json" 2>/dev/null
        done
        find "$corpus" -size 0 -delete
        touch "$corpus/.seeded"
      fi
      opts="-max_len=262144";;
    pt2)
      if [ ! -f "$corpus/.seeded" ]; then
        for f in tests/corpus/ops/*/model.pt2 tests/corpus/models/mlp/model.pt2 tests/bad/*.pt2; do
          [ -f "$f" ] && [ "$(wc -c <"$f")" -lt 300000 ] && cp "$f" "$corpus/$(echo "$f" | tr / _)"
        done
        touch "$corpus/.seeded"
      fi
      opts="-max_len=300000";;
    safetensors)
      if [ ! -f "$corpus/.seeded" ]; then
        for f in tests/corpus/ops/*/io.safetensors; do
          [ -f "$f" ] && [ "$(wc -c <"$f")" -lt 65536 ] && cp "$f" "$corpus/$(echo "$f" | tr / _)"
        done
        touch "$corpus/.seeded"
      fi
      opts="-max_len=65536";;
    run)   # hostile DLTensors: no seeds needed, the decoder reads any bytes
      opts="-max_len=4096";;
  esac
  log=$BUILD/fuzz_$name.log
  jobs=${FUZZ_JOBS:-1} jdir=$BUILD/fuzz_$name.jobs
  if [ "$jobs" -gt 1 ]; then rm -rf "$jdir"; mkdir -p "$jdir"; opts="$opts -jobs=$jobs -workers=$jobs"; fi
  # -timeout: an input running over 10 s is a hang; -rss_limit_mb: an allocation the file cannot justify
  before=$(ls "$crashes" | wc -l)
  here=$(pwd)
  [ "$jobs" -gt 1 ] && cd "$jdir"
  OMP_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1} \
    "$bin" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -artifact_prefix="$crashes/" -print_final_stats=1 $opts >"$log" 2>&1
  rc=$?
  cd "$here"
  if [ "$jobs" -gt 1 ]; then
    cat "$jdir"/fuzz-*.log >>"$log" 2>/dev/null
    runs=$(cat "$jdir"/fuzz-*.log 2>/dev/null | sed -n 's/^stat::number_of_executed_units: *//p' | awk '{s += $1} END {print s}')
    [ "$(ls "$crashes" | wc -l)" != "$before" ] && rc=1   # a job that crashed ends alone; the driver's status may not say
  else
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  fi
  if [ $rc = 0 ]; then
    echo "ok   fuzz_$name: ${runs:-?} executions in ${secs} s, no crash"
    pass=$((pass + 1))
  else
    echo "FAIL fuzz_$name: exit $rc after ${runs:-?} executions; $(ls "$crashes" | head -n 3 | tr '\n' ' ') (see $log)"
    grep -m 3 -E 'ERROR|runtime error|SUMMARY' "$log"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
