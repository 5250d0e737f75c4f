//===- ShapeInferenceTest.cpp - building amp ops from C++ ----------------===//
//
// The importer and the passes build ops without stating result types; these
// tests pin the ONNX shape rules on examples from the ONNX operator docs.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::amp;

namespace {

class ShapeInference : public ::testing::Test {
protected:
  ShapeInference() : builder(&ctx) {
    ctx.loadDialect<AMPDialect>();
    module = ModuleOp::create(UnknownLoc::get(&ctx));
    builder.setInsertionPointToEnd(module.getBody());
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      messages.push_back(d.str());
      return success();
    });
  }
  ~ShapeInference() override { module.erase(); }

  /// A placeholder value of the given type (an unrealized cast of nothing).
  Value arg(ArrayRef<int64_t> shape, Type elt = {}) {
    if (!elt)
      elt = builder.getF32Type();
    auto t = RankedTensorType::get(shape, elt);
    return UnrealizedConversionCastOp::create(builder, UnknownLoc::get(&ctx), TypeRange{t},
                                              ValueRange{})
        .getResult(0);
  }

  MLIRContext ctx;
  OpBuilder builder;
  ModuleOp module;
  std::vector<std::string> messages;
};

Type tensor(MLIRContext *ctx, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, Float32Type::get(ctx));
}

TEST_F(ShapeInference, MatMulBroadcastsBatchAndPromotesVectors) {
  Location loc = UnknownLoc::get(&ctx);
  auto m = MatMulOp::create(builder, loc, arg({2, 1, 3, 4}), arg({5, 4, 6}), TypeAttr());
  EXPECT_EQ(m.getType(), tensor(&ctx, {2, 5, 3, 6}));
  auto v = MatMulOp::create(builder, loc, arg({4}), arg({3, 4, 6}), TypeAttr());
  EXPECT_EQ(v.getType(), tensor(&ctx, {3, 6}));
  auto d =
      MatMulOp::create(builder, loc, arg({ShapedType::kDynamic, 7, 4}), arg({4, 8}), TypeAttr());
  EXPECT_EQ(d.getType(), tensor(&ctx, {ShapedType::kDynamic, 7, 8}));
}

TEST_F(ShapeInference, GemmTransposes) {
  auto g = GemmOp::create(builder, UnknownLoc::get(&ctx), arg({4, 3}), arg({5, 4}), arg({5}),
                          builder.getF32FloatAttr(1.0f), builder.getF32FloatAttr(1.0f),
                          builder.getBoolAttr(true), builder.getBoolAttr(true), TypeAttr());
  EXPECT_EQ(g.getType(), tensor(&ctx, {3, 5}));
}

TEST_F(ShapeInference, ConvAndPoolOutputSizes) {
  Location loc = UnknownLoc::get(&ctx);
  // ONNX docs: 5x5 input, 3x3 kernel, stride 2, pads 1 -> 3x3.
  auto c =
      ConvOp::create(builder, loc, arg({1, 1, 5, 5}), arg({1, 1, 3, 3}), Value(), AutoPad::NOTSET,
                     nullptr, 1, nullptr, builder.getDenseI64ArrayAttr({1, 1, 1, 1}),
                     builder.getDenseI64ArrayAttr({2, 2}), TypeAttr());
  EXPECT_EQ(c.getType(), tensor(&ctx, {1, 1, 3, 3}));
  // maxpool_2d_ceil: 4x4, kernel 3, stride 2, ceil -> 2x2.
  auto p = MaxPoolOp::create(builder, loc, arg({1, 1, 4, 4}), AutoPad::NOTSET, true, nullptr,
                             builder.getDenseI64ArrayAttr({3, 3}), nullptr, 0,
                             builder.getDenseI64ArrayAttr({2, 2}));
  EXPECT_EQ(p.getOutput().getType(), tensor(&ctx, {1, 1, 2, 2}));
  // SAME_UPPER keeps ceil(D / stride).
  auto a = AveragePoolOp::create(builder, loc, arg({1, 3, 32, 31}), AutoPad::SAME_UPPER, false,
                                 false, nullptr, builder.getDenseI64ArrayAttr({3, 3}), nullptr,
                                 builder.getDenseI64ArrayAttr({2, 2}));
  EXPECT_EQ(a.getType(), tensor(&ctx, {1, 3, 16, 16}));
}

TEST_F(ShapeInference, ReshapeInfersMinusOneAndCopiesZeros) {
  auto r = ReshapeOp::create(builder, UnknownLoc::get(&ctx), arg({2, 3, 4}),
                             builder.getDenseI64ArrayAttr({0, -1}), false);
  EXPECT_EQ(r.getType(), tensor(&ctx, {2, 12}));
}

TEST_F(ShapeInference, SliceClampsLikeOnnx) {
  // ONNX docs slice example 2: data 2x4, starts [0, 1], ends [-1, 1000]
  // -> [[2, 3, 4]] (1x3).
  auto s = SliceOp::create(builder, UnknownLoc::get(&ctx), arg({2, 4}),
                           builder.getDenseI64ArrayAttr({0, 1}),
                           builder.getDenseI64ArrayAttr({-1, 1000}), nullptr, nullptr);
  EXPECT_EQ(s.getType(), tensor(&ctx, {1, 3}));
  // Negative step: starts [1, -1] ends [0, -1000] steps [1, -2] on 2x4
  // gives rows [1:0] (empty) ... use axis 1 alone: [3, 1] -> 2 elements.
  auto n =
      SliceOp::create(builder, UnknownLoc::get(&ctx), arg({2, 4}),
                      builder.getDenseI64ArrayAttr({-1}), builder.getDenseI64ArrayAttr({-1000}),
                      builder.getDenseI64ArrayAttr({1}), builder.getDenseI64ArrayAttr({-2}));
  EXPECT_EQ(n.getType(), tensor(&ctx, {2, 2}));
}

TEST_F(ShapeInference, LossShapes) {
  Location loc = UnknownLoc::get(&ctx);
  auto l = SoftmaxCrossEntropyLossOp::create(builder, loc, arg({8, 10, 3}),
                                             arg({8, 3}, builder.getI64Type()), Value(),
                                             Reduction::none, nullptr);
  EXPECT_EQ(l.getLoss().getType(), tensor(&ctx, {8, 3}));
  EXPECT_EQ(l.getLogProb().getType(), tensor(&ctx, {8, 10, 3}));
}

TEST_F(ShapeInference, InferenceFailureNamesOpAndRule) {
  // Direct calls (what the importer does) fail with a message instead of
  // crashing the builder.
  SmallVector<Type> types;
  Value a = arg({4, 3}), b = arg({4, 5});
  MatMulOp::Adaptor adaptor(ValueRange{a, b});
  EXPECT_TRUE(failed(MatMulOp::inferReturnTypes(&ctx, UnknownLoc::get(&ctx), adaptor, types)));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("'amp.matmul' op contracted dims differ"), std::string::npos)
      << messages[0];
}

TEST(ExactConversion, Table) {
  MLIRContext ctx;
  Builder b(&ctx);
  EXPECT_TRUE(isExactConversion(b.getF16Type(), b.getF32Type()));
  EXPECT_TRUE(isExactConversion(b.getBF16Type(), b.getF32Type()));
  EXPECT_FALSE(isExactConversion(b.getF32Type(), b.getF16Type()));
  EXPECT_FALSE(isExactConversion(b.getF16Type(), b.getBF16Type()));
  EXPECT_FALSE(isExactConversion(b.getBF16Type(), b.getF16Type()));
  EXPECT_TRUE(isExactConversion(b.getI8Type(), b.getF16Type()));
  EXPECT_FALSE(isExactConversion(b.getI32Type(), b.getF32Type()));
  EXPECT_TRUE(isExactConversion(b.getI16Type(), b.getF32Type()));
  EXPECT_TRUE(isExactConversion(b.getI1Type(), b.getBF16Type()));
  EXPECT_TRUE(isExactConversion(b.getI32Type(), b.getI64Type()));
  EXPECT_FALSE(isExactConversion(b.getI64Type(), b.getI32Type()));
  EXPECT_FALSE(isExactConversion(b.getI32Type(), b.getIntegerType(32, false)));
  EXPECT_TRUE(isExactConversion(b.getIntegerType(8, false), b.getI16Type()));
}

} // namespace
