#!/usr/bin/env bash
# The test suites under the sanitizer build (make asan): ctest's sanitize-*
# entries run this.
#
#   scripts/sanitized.sh ASAN_BUILD lit LIT     the lit suite, its tools ASan + UBSan
#   scripts/sanitized.sh ASAN_BUILD unittests   the runtime's and the dialect's unit tests
#
# A sanitizer report aborts the process that made it (-fno-sanitize-recover,
# abort_on_error), so it fails the test that ran it; leaks are reported too.
set -euo pipefail
ASAN_BUILD=${1:?usage: scripts/sanitized.sh ASAN_BUILD lit LIT | unittests}
what=${2:?}
if [ ! -f "$ASAN_BUILD/CMakeCache.txt" ] || ! grep -q '^AMP_SANITIZE:STRING=address' "$ASAN_BUILD/CMakeCache.txt"; then
  echo "sanitized: no sanitizer build in '$ASAN_BUILD' (make asan builds it)" >&2
  exit 1
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
# allow_user_poisoning=0: LLVM's BumpPtrAllocator (inlined from its headers
# into our instrumented code, e.g. when the amp dialect's attributes are
# uniqued) poisons the rest of each new slab; the uninstrumented libMLIR then
# hands out and writes that memory without unpoisoning it: false reports.
ASAN_OPTIONS="$ASAN_OPTIONS:allow_user_poisoning=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
case "$what" in
  lit)
    LIT=${3:?}
    exec "$LIT" -sv "$ASAN_BUILD/test"
    ;;
  unittests)
    rc=0
    for t in amprt-tests amp-dialect-tests amp-transforms-tests; do
      echo "== $t"
      "$ASAN_BUILD/bin/$t" --gtest_brief=1 --gtest_filter=-CheckNumerics.DISABLED_Child || rc=1
    done
    exit $rc
    ;;
  *)
    echo "sanitized: unknown suite '$what' (lit, unittests)" >&2
    exit 2
    ;;
esac
