#!/usr/bin/env bash
# Runs the libFuzzer harnesses of fuzz/ (built by `make fuzz` in BUILD, the
# sanitizer build folder) for SECONDS each, from the seed corpora
# (fuzz/make_seeds.py, made once per folder) and fuzz/*.dict:
#
#   scripts/fuzz.sh BUILD SECONDS [FUZZER...]     (default: all five)
#
# Each fuzzer runs with ASan + UBSan (every report aborts), a 2 GiB RSS limit
# (-rss_limit_mb, -malloc_limit_mb: one allocation over it is a finding), and
# a 10 s per-input timeout. New inputs go to BUILD/fuzz/corpus/NAME, findings
# (crash-*, oom-*, timeout-*, leak-*) to BUILD/fuzz/findings/NAME. Prints one
# line per fuzzer (executions, coverage, features, corpus size, seconds) and
# exits non-zero when any fuzzer found something.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/fuzz.sh BUILD SECONDS [FUZZER...]}
SECONDS_EACH=${2:?usage: scripts/fuzz.sh BUILD SECONDS [FUZZER...]}
shift 2
ALL=(onnx-import npz safetensors ort-checkpoint mlir-parse)
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=("${ALL[@]}")

declare -A DICT=([onnx-import]=onnx [npz]=npz [safetensors]=safetensors [mlir-parse]=mlir)
declare -A MAXLEN=([onnx-import]=65536 [npz]=65536 [safetensors]=16384 [ort-checkpoint]=16384
                   [mlir-parse]=16384)

SEEDS="$BUILD/fuzz/seeds"
mkdir -p "$BUILD/fuzz"
(
  # One maker at a time (ctest runs the fuzz-* entries side by side).
  flock 9
  if [ ! -f "$SEEDS/.done" ]; then
    rm -rf "$SEEDS"
    ORT_PY=""
    [ -x .venv-ort/bin/python ] && ORT_PY="$PWD/.venv-ort/bin/python"
    .venv/bin/python fuzz/make_seeds.py "$SEEDS" $ORT_PY >/dev/null
    touch "$SEEDS/.done"
  fi
) 9>"$BUILD/fuzz/.seeds.lock"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:allocator_may_return_null=1}"
# allow_user_poisoning=0: LLVM's BumpPtrAllocator (inlined from its headers
# into our instrumented code, e.g. when the amp dialect's attributes are
# uniqued) poisons the rest of each new slab; the uninstrumented libMLIR then
# hands out and writes that memory without unpoisoning it: false reports.
ASAN_OPTIONS="$ASAN_OPTIONS:allow_user_poisoning=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for name in "${NAMES[@]}"; do
  bin="$BUILD/bin/fuzz-$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (make fuzz builds it)" >&2
    exit 2
  fi
  corpus="$BUILD/fuzz/corpus/$name" findings="$BUILD/fuzz/findings/$name"
  mkdir -p "$corpus" "$findings"
  log="$BUILD/fuzz/$name.log"
  args=(-max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10
        -max_len="${MAXLEN[$name]}" -print_final_stats=1 -artifact_prefix="$findings/")
  [ -n "${DICT[$name]:-}" ] && args+=(-dict="fuzz/${DICT[$name]}.dict")
  [ -n "${FUZZ_JOBS:-}" ] && args+=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
  start=$(date +%s)
  rc=0
  "$bin" "${args[@]}" "$corpus" "$SEEDS/$name" >"$log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  units=$(ls "$corpus" | wc -l)
  found=$(ls "$findings" | wc -l)
  printf 'fuzz-%-15s %10s execs  cov %6s  ft %6s  corpus %5s  %4ss  findings %s  rc %s\n' \
    "$name" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$units" "$secs" "$found" "$rc"
  if [ "$rc" != 0 ] || [ "$found" != 0 ]; then
    status=1
    echo "fuzz-$name: a finding (log: $log; inputs: $findings):" >&2
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -20 >&2 || true
  fi
done
exit $status
