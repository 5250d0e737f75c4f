#!/bin/sh
# The C++ / CUDA sources are clang-formatted (.clang-format: LLVM style,
# 100 columns). usage: scripts/check-format.sh [--fix] [CLANG_FORMAT]
#   (ctest clang-format; --fix formats them in place).
set -eu
fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
cf=${1:-clang-format-22}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "$cf not found: the set-up (scripts/setup.sh) installs clang-format-22" >&2
  exit 1
fi
if [ -d .git ] || [ -f .git ]; then
  files=$(git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' '*.c' | grep -v '^test/fuzz-findings/')
else
  files=$(find include lib runtime tools unittests fuzz bench test -name '*.cpp' -o -name '*.h' -o -name '*.hpp' \
            -o -name '*.cu' -o -name '*.cuh' -o -name '*.c' | grep -v '^test/fuzz-findings/')
fi
n=$(echo "$files" | wc -l)
if [ $fix = 1 ]; then
  echo "$files" | xargs "$cf" -i
  echo "formatted $n files"
  exit 0
fi
if ! echo "$files" | xargs "$cf" --dry-run -Werror 2>/tmp/check-format.$$; then
  head -30 /tmp/check-format.$$
  echo "$(grep -c 'error:' /tmp/check-format.$$) places in the sources are not clang-formatted (scripts/check-format.sh --fix)"
  rm -f /tmp/check-format.$$
  exit 1
fi
rm -f /tmp/check-format.$$
echo "$n sources clang-formatted"
