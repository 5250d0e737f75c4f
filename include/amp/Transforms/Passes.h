//===- Passes.h - amp transformation passes ---------------------*- C++ -*-===//

#ifndef AMP_TRANSFORMS_PASSES_H
#define AMP_TRANSFORMS_PASSES_H

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <map>

namespace mlir {
class RewritePatternSet;
namespace amp {

#define GEN_PASS_DECL
#include "amp/Transforms/Passes.h.inc"

/// Appends to `f` the gradients of its result `lossName` for every
/// parameter not in `frozen`, with the rows of `paddingRows` ("name:row")
/// zero (see amp-autodiff).
LogicalResult differentiate(func::FuncOp f, StringRef lossName, ArrayRef<std::string> frozen,
                            ArrayRef<std::string> paddingRows = {});

/// Reverse mode over the ops before `b`'s insertion point in its block: the
/// gradients of `y` (seeded with ones) for each of `xs` (zeros where y does
/// not depend on one), built at the insertion point. `what` names y in
/// errors.
FailureOr<SmallVector<Value>> gradientsOf(OpBuilder &b, Value y, ArrayRef<Value> xs,
                                          StringRef what);

/// Ops whose result is their input's bytes under a new shape, or (see
/// isMatmulViewTranspose) read in place as a transposed view.
bool isAliasOp(Operation *op);

/// An amp.transpose that moves only dims of size 1 (Swin's window
/// partition of a 7 x 7 map into one window, [B, 1, 7, 1, 7, C] -> [B, 1,
/// 1, 7, 7, C]): its result's row-major bytes are its input's, so it is a
/// reshape.
bool isReshapeTranspose(Operation *op);

/// An amp.transpose that swaps the last two dims and is read only by
/// amp.matmul: no copy is made; the products read its input as a
/// transposed view (strides 1 and the rows' count on its last two dims).
bool isMatmulViewTranspose(Operation *op);

/// An amp.dropout that passes its input through (outside training mode or
/// with ratio 0, as PyTorch's) and whose mask nobody reads: its output is
/// its input's bytes, and no random numbers are drawn.
bool isIdentityDropout(Operation *op);

/// The most bytes one tensor of a memory plan may take (256 TiB): sizes and
/// arena offsets then stay far from int64 overflow.
constexpr int64_t kMaxPlannedTensorBytes = int64_t(1) << 48;

/// Bytes of a statically shaped tensor (f16 / bf16 counted as f32 when
/// asF32); failure for dynamic shapes and for sizes over
/// kMaxPlannedTensorBytes (or whose element count overflows).
FailureOr<int64_t> tensorBytes(Type t, bool asF32 = false);

struct MemoryPlan {
  int64_t arenaBytes = 0, arenaBytesIfF32 = 0;
  /// The most bytes live at once (64-byte aligned): no placement needs
  /// less; the arena is within a few percent of it.
  int64_t liveBytes = 0;
  /// The values live then.
  std::vector<Value> liveAtPeak;
  size_t buffers = 0;
  DenseMap<Value, int64_t> offsets; // owned values -> arena offset
};

/// The results of `f` its ops write straight into a state argument's
/// buffer (result -> argument number): an optimizer update's new parameter
/// or moment, the new step count and scale, a new f16 / bf16 weight copy,
/// where the argument is read by nothing after and the result returned
/// once. They take no arena slot (amp-plan-memory) and are no copy
/// (amp-lower-to-runtime).
std::map<unsigned, unsigned> inPlaceResults(func::FuncOp f);

/// Liveness-based placement of every value an amp op produces in `f`: the
/// smaller of two placements, each keeping values live at once apart:
/// largest first, each in a gap among the values
/// whose lifetimes it overlaps, the smallest that holds it (TFLite's greedy-by-size), and best fit
/// in order of definition.
FailureOr<MemoryPlan> planMemory(func::FuncOp f);

/// Merges duplicate casts of one value to one type and folds exact round
/// trips in `root`. Returns the number of casts removed.
unsigned foldAndMergeCasts(Operation *root);

/// Folds transposes into the products that can read them transposed, into
/// each other, and across casts to the narrower side (see
/// amp-fold-transposes). Returns the number of rewrites.
unsigned foldTransposes(Operation *root);

/// The result attribute dictionaries of `f` (an empty one where none).
SmallVector<DictionaryAttr> resultAttrDicts(func::FuncOp f);

/// Makes `results` (with `attrs`, one each) what `f` returns: the return's
/// operands, the function type's results and the result attributes.
void setFunctionResults(func::FuncOp f, ValueRange results, ArrayRef<DictionaryAttr> attrs);

#define GEN_PASS_REGISTRATION
#include "amp/Transforms/Passes.h.inc"

} // namespace amp
} // namespace mlir

#endif // AMP_TRANSFORMS_PASSES_H
