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
echo "== 4. Autocast to f16: $BIN/amp-opt mlp.mlir --amp-autocast=\"target=f16 report=... dot=...\""
"$BIN/amp-opt" "$OUT/mlp.mlir" \
  --amp-autocast="target=f16 report=$OUT/mlp.autocast.json dot=$OUT/mlp.autocast.dot" \
  -o "$OUT/mlp.f16.mlir"
"$BIN/amp-opt" "$OUT/mlp.f16.mlir" --mlir-elide-resource-strings-if-larger=16 \
  --mlir-elide-elementsattrs-if-larger=8 | sed -n '/^  func.func/,/^  }/p' | sed 's/^  //; s/amp.init = [^,]*, //g'
echo
echo "   decisions ($OUT/mlp.autocast.json):"
.venv/bin/python - "$OUT/mlp.autocast.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for d in r["ops"]:
    acc = f", accumulate {d['accumulate']}" if "accumulate" in d else ""
    print(f"   {d['node']:32} {d['op']:32} {d['class']:7} -> {d['compute_type']}{acc}")
s = r["summary"]
print(f"   casts inserted: {s['casts_inserted']}, parameters cast to {r['target']}: {s['params_cast_to_target']}")
PY
ls "$OUT"/mlp.autocast.* | sed 's/^/   picture \/ report: /'
for m in cnn transformer_block; do
  for t in f16 bf16; do
    "$BIN/amp-opt" "$OUT/$m.mlir" --amp-autocast="target=$t report=$OUT/$m.$t.json" -o /dev/null
  done
  .venv/bin/python -c "import json,sys; r=json.load(open('$OUT/$m.f16.json')); print('   $m (f16):', r['summary']['ops_by_compute_type'], 'casts', r['summary']['casts_inserted'])"
done

echo
echo "== 5. Run the MLP's forward pass on the runtime (JIT), in each precision"
.venv/bin/python - "$OUT/mlp_in.npz" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(42)  # the source documents' data: X ~ N(0, 1), y in [0, 10)
np.savez(sys.argv[1], input=rng.standard_normal((256, 64)).astype(np.float32),
         labels=rng.integers(0, 10, 256).astype(np.int64))
PY
for p in fp32 fp16 bf16; do
  printf "   %-5s " "$p"
  "$BIN/amp-run" "$OUT/mlp.onnx" --inputs "$OUT/mlp_in.npz" --outputs "$OUT/mlp_out_$p.npz" \
    --precision "$p" --print | grep '^loss' | sed 's/^loss: f32 \[\] =/loss/'
done

echo
echo "== 6. Compile it ahead of time and run the program"
"$BIN/amp-compile" "$OUT/mlp.onnx" -o "$OUT/mlp_prog" --precision bf16 | sed 's/^/   /'
"$OUT/mlp_prog" --inputs "$OUT/mlp_in.npz" --outputs "$OUT/mlp_prog_out.npz"
.venv/bin/python -c "import numpy as np; a, b = np.load('$OUT/mlp_prog_out.npz'), np.load('$OUT/mlp_out_bf16.npz'); print('   program loss', float(a['loss']), '(same as amp-run:', bool(np.array_equal(a['loss'], b['loss'])), end=')\n')"

echo
echo "== 7. The backward graph: $BIN/amp-opt model.mlir --amp-autodiff"
for m in mlp cnn transformer_block; do
  "$BIN/amp-opt" "$OUT/$m.mlir" --amp-autodiff -o "$OUT/$m.grad.mlir"
  grads=$(grep -o 'amp.grad = "[^"]*"' "$OUT/$m.grad.mlir" | wc -l)
  bwd=$(grep -c 'amp.differentiates' "$OUT/$m.grad.mlir")
  echo "   $m: $grads parameter gradients, $bwd backward ops"
done
echo "   the MLP's gradients, run in each precision (max |d loss / d fc1.weight|):"
for p in fp32 fp16 bf16; do
  "$BIN/amp-run" "$OUT/mlp.grad.mlir" --inputs "$OUT/mlp_in.npz" --outputs "$OUT/mlp_grad_$p.npz" \
    --precision "$p"
  .venv/bin/python -c "import numpy as np; g = np.load('$OUT/mlp_grad_$p.npz'); print('   $p ', float(np.abs(g['grad:fc1.weight']).max()), ' loss', float(g['loss']))"
done

echo
echo "== 8. One training step: $BIN/amp-opt mlp.mlir --amp-autodiff --amp-optimizer=\"optimizer=adamw lr=0.001\""
"$BIN/amp-opt" "$OUT/mlp.mlir" --amp-autodiff --amp-optimizer="optimizer=adamw lr=0.001" \
  -o "$OUT/mlp.train.mlir"
echo "   $(grep -o 'amp.opt_state = ' "$OUT/mlp.train.mlir" | wc -l) state arguments (amp.opt_state: step, exp_avg, exp_avg_sq), $(grep -o 'amp.updates = ' "$OUT/mlp.train.mlir" | wc -l) results tied to what they update (amp.updates)"
for p in fp32 bf16; do
  "$BIN/amp-run" "$OUT/mlp.train.mlir" --inputs "$OUT/mlp_in.npz" --outputs "$OUT/mlp_step_$p.npz" \
    --precision "$p"
  .venv/bin/python -c "import numpy as np; o = np.load('$OUT/mlp_step_$p.npz'); print('   $p  loss', float(o['loss']), ' step', int(o['new:step']), ' fc2.bias', np.round(o['new:fc2.bias'][:4], 5))"
done

echo
echo "Loss scaling and the training run (many steps, checkpoints) are the next"
echo "steps of the build order (see the README); the files above are in $OUT."
