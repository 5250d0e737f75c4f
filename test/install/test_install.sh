#!/bin/sh
# ctest install-package: `cmake --install` of this build into a fresh prefix,
# then, from that prefix only:
#   1. another CMake project (test/install/consumer) finds the package
#      (find_package(AMPMLIR)), links the importer, the passes and the
#      runtime, imports an ONNX model and runs amp-autocast on it by name;
#   2. the installed amp-compile writes a training program (its runtime from
#      <prefix>/lib) that trains two steps;
#   3. the installed amp-opt runs (its libMLIR found through the RPATH).
# usage: test_install.sh BUILD_DIR PYTHON
set -eu
build=$1
py=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL  $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install"; }
for f in lib/cmake/AMPMLIR/AMPMLIRConfig.cmake lib/libAMPTransforms.a lib/libamprt.a \
         include/amp/Transforms/Passes.h.inc include/amprt/amprt.h bin/amp-compile; do
  [ -e "$tmp/prefix/$f" ] || fail "the install has no $f"
done
echo "ok    installed into a fresh prefix ($(find "$tmp/prefix" -type f | wc -l) files)"

# A model: Gemm -> Relu -> Gemm, a cross-entropy training graph's forward.
"$py" - "$tmp" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as H, TensorProto as TP, numpy_helper as NH
tmp = sys.argv[1]
rng = np.random.default_rng()
w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 8), (4, 16)))
n = [H.make_node("Gemm", ["x", "w1"], ["h"], transB=1), H.make_node("Relu", ["h"], ["r"]),
     H.make_node("Gemm", ["r", "w2"], ["output"], transB=1)]
g = H.make_graph(n, "mlp", [H.make_tensor_value_info("x", TP.FLOAT, [6, 8])],
                 [H.make_tensor_value_info("output", TP.FLOAT, [6, 4])],
                 [NH.from_array(w1, "w1"), NH.from_array(w2, "w2")])
onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]), f"{tmp}/mlp.onnx")
np.savez(f"{tmp}/data.npz", x=rng.standard_normal((12, 8)).astype(np.float32),
         labels=rng.integers(0, 4, 12).astype(np.int64))
PY

cmake -S "$here/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; fail "configuring a project with find_package(AMPMLIR)"; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 ||
  { tail -40 "$tmp/build.log"; fail "building against the installed package"; }
grep -q "$tmp/prefix" "$tmp/consumer/CMakeCache.txt" || fail "the package was not found in the prefix"
echo "ok    a CMake project with find_package(AMPMLIR) built against the install"
out=$("$tmp/consumer/consumer" "$tmp/mlp.onnx" "amp-autocast{target=bf16}") ||
  fail "the consumer failed: $out"
echo "$out" | grep -q "amp.gemm.*xbf16" || fail "no bf16 gemm after amp-autocast:
$out"
echo "$out" | grep -q "amp.cast" || fail "no casts after amp-autocast"
echo "$out" | grep -q "runtime: cpu context ok" || fail "no runtime context"
echo "ok    the consumer imported the model, ran amp-autocast{target=bf16} ($(echo "$out" | grep -c "amp.cast") casts, bf16 gemms) and made a runtime context"

# The linalg autocast, as a compiler holding linalg on tensors runs it.
cat > "$tmp/mm.mlir" <<'MLIR'
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %acc: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %y = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
MLIR
out=$("$tmp/consumer/consumer" "$tmp/mm.mlir" "amp-autocast{target=bf16}") ||
  fail "the consumer failed on linalg: $out"
echo "$out" | grep -q "linalg.matmul ins(.*tensor<4x8xbf16>, tensor<8x16xbf16>) outs(.*tensor<4x16xf32>)" ||
  fail "no bf16 linalg.matmul with f32 outs after amp-autocast:
$out"
echo "ok    the consumer ran amp-autocast{target=bf16} on linalg on tensors (AMPAutocastModels): bf16 inputs, f32 accumulator"

"$tmp/prefix/bin/amp-compile" "$tmp/mlp.onnx" -o "$tmp/train" --optimizer sgd --loss-fn cross_entropy \
  --precision fp16 >"$tmp/compile.log" 2>&1 || { cat "$tmp/compile.log"; fail "the installed amp-compile"; }
"$tmp/train" --data "$tmp/data.npz" --steps 2 --metrics "$tmp/m.jsonl" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; fail "the program the installed amp-compile wrote"; }
[ "$(wc -l < "$tmp/m.jsonl")" -eq 2 ] || fail "the program did not write 2 metrics lines"
# ... and it was the prefix's runtime: with that one broken, linking fails.
mv "$tmp/prefix/lib/libamprt_runner.a" "$tmp/runner.a"
: > "$tmp/prefix/lib/libamprt_runner.a"
if "$tmp/prefix/bin/amp-compile" "$tmp/mlp.onnx" -o "$tmp/train2" --optimizer sgd --loss-fn cross_entropy \
    >/dev/null 2>&1; then
  fail "amp-compile did not link <prefix>/lib/libamprt_runner.a"
fi
mv "$tmp/runner.a" "$tmp/prefix/lib/libamprt_runner.a"
echo "ok    the installed amp-compile wrote a training program with <prefix>/lib's runtime (an empty libamprt_runner.a there makes it fail): $(tail -1 "$tmp/train.log")"
"$tmp/prefix/bin/amp-opt" --version >/dev/null 2>&1 || fail "the installed amp-opt does not start"
echo "ok    the installed amp-opt starts (libMLIR through its RPATH)"
echo "6 passed, 0 failed"
