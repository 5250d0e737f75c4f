//===- Lowering.cpp - OpLowering's window helpers ---------------------------===//
//
// The members of OpLowering that convolutions (Linear.cpp) and pooling
// (Pooling.cpp) share.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

LogicalResult OpLowering::windowOf(Operation *o, int64_t spatial, ArrayRef<int64_t> kernelFromW,
                                   Window &w) {
  auto arr = [&](StringRef name, int64_t n, int64_t dflt) -> SmallVector<int64_t> {
    if (auto a = o->getAttrOfType<DenseI64ArrayAttr>(name))
      return SmallVector<int64_t>(a.asArrayRef());
    return SmallVector<int64_t>(n, dflt);
  };
  if (auto ap = o->getAttrOfType<AutoPadAttr>("auto_pad"))
    if (ap.getValue() != AutoPad::NOTSET && ap.getValue() != AutoPad::VALID)
      return refuse("auto_pad SAME_UPPER / SAME_LOWER (export with explicit pads)");
  if (auto cm = o->getAttrOfType<BoolAttr>("ceil_mode"); cm && cm.getValue())
    return refuse("ceil_mode = 1");
  if (auto so = o->getAttrOfType<IntegerAttr>("storage_order"); so && so.getInt() != 0)
    return refuse("storage_order = 1");
  w.kernel =
      kernelFromW.empty() ? arr("kernel_shape", spatial, 1) : SmallVector<int64_t>(kernelFromW);
  w.strides = arr("strides", spatial, 1);
  w.dilations = arr("dilations", spatial, 1);
  SmallVector<int64_t> pads = arr("pads", 2 * spatial, 0);
  if ((int64_t)w.kernel.size() != spatial || (int64_t)w.strides.size() != spatial ||
      (int64_t)w.dilations.size() != spatial || (int64_t)pads.size() != 2 * spatial)
    return refuse("window attributes of the wrong length");
  w.padLo.assign(pads.begin(), pads.begin() + spatial);
  w.padHi.assign(pads.begin() + spatial, pads.end());
  return success();
}

Value OpLowering::pad(Value x, const Window &w, double value) {
  auto t = rtt(x);
  int64_t lead = t.getRank() - w.padLo.size();
  bool any = false;
  SmallVector<int64_t> lo(lead, 0), hi(lead, 0), shape(t.getShape());
  for (size_t i = 0; i < w.padLo.size(); ++i) {
    lo.push_back(w.padLo[i]);
    hi.push_back(w.padHi[i]);
    shape[lead + i] += w.padLo[i] + w.padHi[i];
    any |= w.padLo[i] || w.padHi[i];
  }
  if (!any)
    return x;
  SmallVector<OpFoldResult> l, h;
  for (size_t i = 0; i < lo.size(); ++i) {
    l.push_back(b.getIndexAttr(lo[i]));
    h.push_back(b.getIndexAttr(hi[i]));
  }
  Value v = e.cst(value, t.getElementType());
  return tensor::PadOp::create(b, op->getLoc(), RankedTensorType::get(shape, t.getElementType()), x,
                               l, h, v);
}
