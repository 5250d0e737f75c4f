#!/usr/bin/env bash
# The main job, as far as the pipeline goes today: write the example models
# (the MLP of AMP-REFERENCE.md section 5, a small CNN, a transformer block) as
# ONNX, import them into the amp dialect, and run the passes that exist.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
BIN=$BUILD/bin
OUT=$BUILD/examples
mkdir -p "$OUT"

echo "== 1. Example models (ONNX, written by python/amp_mlir/examples.py)"
PYTHONPATH=python .venv/bin/python -m amp_mlir.examples --out "$OUT"

echo
echo "== 2. Import: $BIN/amp-translate --import-onnx $OUT/mlp.onnx"
echo "   (weights elided from the listing; they are the amp.init values)"
"$BIN/amp-translate" --import-onnx "$OUT/mlp.onnx" -o "$OUT/mlp.mlir"
"$BIN/amp-opt" "$OUT/mlp.mlir" --mlir-elide-resource-strings-if-larger=16 \
  --mlir-elide-elementsattrs-if-larger=8 | sed -n '/^module/,/^}/p'

echo
echo "== 3. Every example through import, verification and amp-fold-casts"
for m in mlp cnn transformer_block; do
  "$BIN/amp-translate" --import-onnx "$OUT/$m.onnx" -o "$OUT/$m.mlir"
  "$BIN/amp-opt" "$OUT/$m.mlir" --canonicalize --amp-fold-casts -o "$OUT/$m.opt.mlir"
  ops=$(grep -oE '= amp\.[a-z_]+' "$OUT/$m.opt.mlir" | sort | uniq -c | awk '{printf "%s %s, ", $3, $1}')
  params=$(grep -o 'amp.param = ' "$OUT/$m.opt.mlir" | wc -l)
  echo "   $m: $params parameters; ops: ${ops%, }"
done
echo
echo "Autocast, loss scaling, lowering and training are the next steps of the"
echo "build order (see the README); the files above are in $OUT."
