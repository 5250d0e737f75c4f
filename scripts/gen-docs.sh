#!/bin/sh
# The reference documentation generated from the ODS sources (the pass and
# op descriptions are written once, in the .td files):
#   docs/passes.md   every pass, its description and options (Passes.td)
#   docs/dialect.md  the amp dialect: every op, its syntax, attributes,
#                    operands and results (AMPOps.td)
#   docs/opcodes.md  amprt_exec's opcodes and descriptor layouts
#                    (runtime/include/amprt/amprt_ops.def)
# usage: scripts/gen-docs.sh [--check] [MLIR_TBLGEN [MLIR_INCLUDE_DIR]]
#   (make docs); --check regenerates into a temporary folder and fails when
#   docs/ differs (ctest docs-up-to-date).
set -eu
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
tblgen=${1:-/usr/lib/llvm-22/bin/mlir-tblgen}
mlirinc=${2:-/usr/lib/llvm-22/include}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/docs
if [ $check = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
"$tblgen" -gen-pass-doc -I "$root/include" -I "$mlirinc" "$root/include/amp/Transforms/Passes.td" \
  -o "$out/passes.md"
"$tblgen" -gen-dialect-doc -dialect=amp -I "$root/include" -I "$mlirinc" \
  "$root/include/amp/Dialect/AMP/IR/AMPOps.td" -o "$out/dialect.md"
python3 "$root/scripts/gen-opcodes.py" "$root" "$out/opcodes.md"
if [ $check = 1 ]; then
  bad=0
  for f in passes.md dialect.md opcodes.md; do
    if ! diff -u "$root/docs/$f" "$out/$f" >/dev/null 2>&1; then
      echo "docs/$f is not what the .td files give now (run 'make docs'):"
      diff -u "$root/docs/$f" "$out/$f" | head -20 || true
      bad=1
    else
      echo "docs/$f: up to date ($(wc -l < "$out/$f") lines)"
    fi
  done
  exit $bad
fi
echo "wrote docs/passes.md, docs/dialect.md, docs/opcodes.md"
