#!/usr/bin/env bash
# The main job: the demo (docs/semantics.md section 5).
# A PyTorch MLP with its cross-entropy loss is exported to ONNX, imported,
# autocast, differentiated and compiled ahead of time into training programs
# (amp-compile --optimizer sgd --lr 0.01), which run 200 steps in fp16 with
# dynamic loss scaling and in fp32, printing loss and scale every 40 steps;
# then PyTorch's own AMP run of the same model and data is compared and both
# loss curves and the scale are drawn (PNG). A short tour of the other
# tools follows.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
BIN=$BUILD/bin
OUT=$BUILD/demo
mkdir -p "$OUT"

echo "== 1. The model, exported from PyTorch: python -m amp_mlir.demo export $OUT"
PYTHONPATH=python .venv/bin/python -m amp_mlir.demo export "$OUT"

echo
echo "== 2. Import and autocast: what runs in which precision (amp-opt --amp-autocast=target=f16)"
"$BIN/amp-translate" --import-onnx "$OUT/mlp.onnx" -o "$OUT/mlp.mlir"
"$BIN/amp-opt" "$OUT/mlp.mlir" --amp-autodiff \
  --amp-autocast="target=f16 report=$OUT/mlp.autocast.json" -o /dev/null
.venv/bin/python - "$OUT/mlp.autocast.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for d in r["ops"]:
    acc = f", accumulate {d['accumulate']}" if "accumulate" in d else ""
    print(f"   {d['node'][:38]:38} {d['op']:34} {d['class']:7} -> {d['compute_type']}{acc}")
PY

echo
echo "== 3. The training step, compiled ahead of time"
echo "   $BIN/amp-compile mlp.onnx -o train_fp16 --precision fp16 --optimizer sgd --lr 0.01"
"$BIN/amp-compile" "$OUT/mlp.onnx" -o "$OUT/train_fp16" --precision fp16 --optimizer sgd \
  --lr 0.01 | sed 's/^/   /'
"$BIN/amp-compile" "$OUT/mlp.onnx" -o "$OUT/train_fp32" --precision fp32 --optimizer sgd \
  --lr 0.01 | sed 's/^/   /'
"$BIN/amp-opt" "$OUT/mlp.mlir" --amp-autodiff --amp-optimizer="optimizer=sgd lr=0.01" \
  --amp-loss-scaling -o "$OUT/mlp.train.mlir"
echo "   the step (amp-opt --amp-autodiff --amp-optimizer --amp-loss-scaling), its loss-scaling ops:"
grep -oE '= amp\.(unscale_and_check|update_scale|sgd_update|step_count)[^{:]*' "$OUT/mlp.train.mlir" \
  | sed 's/^= /     /' | cut -c1-110

for p in fp16 fp32; do
  echo
  echo "== 4. Train in $p: ./train_$p --data data.npz --steps 200 --metrics $p.jsonl --print-every 40"
  "$OUT/train_$p" --data "$OUT/data.npz" --steps 200 --metrics "$OUT/$p.jsonl" \
    --print-every 40 --checkpoint-dir "$OUT/ckpt_$p" | sed 's/^/   /'
done

echo
echo "== 5. The same run in PyTorch (autocast fp16 + GradScaler, and fp32), and the plot"
PYTHONPATH=python .venv/bin/python -m amp_mlir.demo report "$OUT"

echo
echo "== 6. A tour of the other tools on the example models (python/amp_mlir/examples.py)"
EX=$BUILD/examples
mkdir -p "$EX"
PYTHONPATH=python .venv/bin/python -m amp_mlir.examples --out "$EX" | sed 's/^/   /'
for m in mlp cnn transformer_block; do
  "$BIN/amp-translate" --import-onnx "$EX/$m.onnx" -o "$EX/$m.mlir"
  "$BIN/amp-opt" "$EX/$m.mlir" --amp-autodiff -o "$EX/$m.grad.mlir"
  params=$(grep -o 'amp.param = ' "$EX/$m.mlir" | wc -l)
  bwd=$(grep -c 'amp.differentiates' "$EX/$m.grad.mlir")
  echo "   $m: $params parameters, $bwd backward ops"
done
.venv/bin/python - "$EX/mlp_in.npz" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(42)
np.savez(sys.argv[1], input=rng.standard_normal((256, 64)).astype(np.float32),
         labels=rng.integers(0, 10, 256).astype(np.int64))
PY
echo "   the MLP's forward pass on the runtime (amp-run, JIT) in each precision:"
for p in fp32 fp16 bf16; do
  printf "     %-5s " "$p"
  "$BIN/amp-run" "$EX/mlp.onnx" --inputs "$EX/mlp_in.npz" --precision "$p" --print \
    | grep '^loss' | sed 's/^loss: f32 \[\] =/loss/'
done
echo "   the transformer block, 20 AdamW steps in bf16 (amp-compile --precision bf16 --optimizer adamw):"
.venv/bin/python - "$EX/tb_data.npz" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(0)
np.savez(sys.argv[1], input=rng.standard_normal((8, 16, 64)).astype(np.float32),
         labels=rng.integers(0, 10, 8).astype(np.int64))
PY
"$BIN/amp-compile" "$EX/transformer_block.onnx" -o "$EX/tb_train" --precision bf16 \
  --optimizer adamw --lr 0.001 | sed 's/^/     /'
"$EX/tb_train" --data "$EX/tb_data.npz" --steps 20 --print-every 10 | sed 's/^/     /'
echo
echo "Files: $OUT (model, data, programs, metrics, checkpoints, amp_demo.png), $EX."
