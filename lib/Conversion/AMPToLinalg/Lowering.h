//===- Lowering.h - one amp op to linalg on tensors -------------*- C++ -*-===//
//
// amp-lower-to-linalg's pieces: OpLowering builds one op's replacement
// values; each family of ops (Elementwise.cpp, Shape.cpp, Linear.cpp,
// Pooling.cpp, Reduction.cpp, Losses.cpp, Optimizers.cpp) adds its
// ops' lowerings to a LoweringSet with its populate function, in the manner
// of torch-mlir's TorchToLinalg/PopulatePatterns.h; LowerToLinalg.cpp is the
// pass over them. The unary functions lower through their
// UnaryFunctionOpInterface (Elementwise.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_CONVERSION_AMPTOLINALG_LOWERING_H
#define AMP_CONVERSION_AMPTOLINALG_LOWERING_H

#include "Builders.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <string>

namespace mlir::amp::linalg_lowering {

inline RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }
inline Type eltOf(Value v) { return rtt(v).getElementType(); }
inline int64_t normAxis(int64_t a, int64_t r) { return a < 0 ? a + r : a; }
inline std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}
using Iter = utils::IteratorType;
using P = arith::CmpFPredicate;

/// The window attributes of a convolution or pooling op over `spatial`
/// dims.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, padLo, padHi;
};

class OpLowering {
public:
  explicit OpLowering(Operation *op) : op(op), b(op), e{b, op->getLoc()} {}

  /// The op's replacement values (null for results nobody reads that the
  /// lowering skips), or failure with the op's error emitted.
  FailureOr<SmallVector<Value>> run();

  Operation *op;
  OpBuilder b;
  Emit e;

  LogicalResult refuse(const Twine &why) {
    return op->emitOpError("has no lowering to linalg: ") << why;
  }
  RankedTensorType resultType(unsigned i = 0) {
    return cast<RankedTensorType>(op->getResult(i).getType());
  }
  Value toF32Tensor(Value v) {
    if (eltOf(v).isF32())
      return v;
    auto t = RankedTensorType::get(rtt(v).getShape(), e.f32());
    return e.map1(t, {v}, [](Emit &, ValueRange a) { return a[0]; });
  }

  /// The window attributes of op `o` over `spatial` dims; the kernel's
  /// extent from `kernelFromW` where the op has no kernel_shape.
  LogicalResult windowOf(Operation *o, int64_t spatial, ArrayRef<int64_t> kernelFromW, Window &w);
  /// x padded by the window's pads with `value`.
  Value pad(Value x, const Window &w, double value);

  /// Softmax (log: log-softmax) of x along `axis` into a result of type
  /// rt (Reduction.cpp; the losses use it too).
  LogicalResult softmax(Value x, int64_t axis, bool log, RankedTensorType rt,
                        SmallVector<Value> &out);
};

/// The lowering of one op: its replacement values into `out` (null for
/// results nobody reads that the lowering skips), or failure with the op's
/// error emitted (OpLowering::refuse).
using LowerFn = std::function<LogicalResult(OpLowering &, Operation *, SmallVector<Value> &)>;

/// Each op's lowering, by the op's class.
class LoweringSet {
public:
  template <typename... OpTys> void add(const LowerFn &fn) {
    (table.try_emplace(TypeID::get<OpTys>(), fn), ...);
  }
  /// OpTy's lowering by Family's member `m` (Family: an OpLowering with the
  /// family's own members, made for the op).
  template <typename Family, typename OpTy>
  void addMember(LogicalResult (Family::*m)(OpTy, SmallVector<Value> &)) {
    add<OpTy>([m](OpLowering &l, Operation *op, SmallVector<Value> &out) {
      Family f(l.op);
      return (f.*m)(cast<OpTy>(op), out);
    });
  }
  /// The op's lowering, or null.
  const LowerFn *lookup(Operation *op) const {
    auto it = table.find(op->getName().getTypeID());
    return it == table.end() ? nullptr : &it->second;
  }

private:
  llvm::DenseMap<TypeID, LowerFn> table;
};

// The families' lowerings (one file each).
void populateElementwiseLowerings(LoweringSet &set);
void populateShapeLowerings(LoweringSet &set);
void populateLinearLowerings(LoweringSet &set);
void populatePoolingLowerings(LoweringSet &set);
void populateReductionLowerings(LoweringSet &set);
void populateLossLowerings(LoweringSet &set);
void populateOptimizerLowerings(LoweringSet &set);

/// The unary functions (UnaryFunctionOpInterface) on floats: y = f(x) in
/// f32 (Elementwise.cpp); failure where op is not one.
FailureOr<Value> lowerUnaryFunction(OpLowering &l, Operation *op);

} // namespace mlir::amp::linalg_lowering

#endif // AMP_CONVERSION_AMPTOLINALG_LOWERING_H
