//===- PolicyTest.cpp - the compiled-in autocast policy ------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Transforms/Autocast.h"
#include "amp/Transforms/AutocastOpInterface.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::amp;

TEST(DefaultPolicy, NamesOnlyRegisteredOpsAndCoversEveryComputeOp) {
  MLIRContext ctx;
  ctx.loadDialect<AMPDialect, arith::ArithDialect, linalg::LinalgDialect, math::MathDialect,
                  tensor::TensorDialect, tosa::TosaDialect>();
  Policy p = Policy::getDefault();
  ASSERT_FALSE(p.ops.empty());
  for (const auto &kv : p.ops) {
    llvm::StringRef name = kv.first();
    if (isAutocastPolicyRefinement(name))
      name = name.rsplit('.').first; // linalg.generic.contraction
    EXPECT_TRUE(RegisteredOperationName::lookup(name, &ctx).has_value())
        << kv.first().str() << " is not an op";
  }
  // Every upstream product and convolution is lowered by default.
  for (RegisteredOperationName name : ctx.getRegisteredOperations()) {
    llvm::StringRef n = name.getStringRef();
    bool product = (n.starts_with("linalg.") && !n.ends_with("_q") &&
                    (n.contains("matmul") || n.contains("conv") || n.contains("matvec") ||
                     n.contains("vecmat") || n == "linalg.dot" || n == "linalg.contract" ||
                     n.contains("mmt4d")) &&
                    !n.starts_with("linalg.quantized")) ||
                   n == "tosa.matmul" || n == "tosa.conv2d" || n == "tosa.conv3d" ||
                   n == "tosa.depthwise_conv2d" || n == "tosa.transpose_conv2d";
    if (!product)
      continue;
    auto it = p.ops.find(n);
    EXPECT_TRUE(it != p.ops.end() && it->second.cls == PrecisionClass::Lower)
        << n.str() << " is a product but not lowered by policies/default.json";
  }
  // Every amp op but the cast has a rule: nothing falls back silently.
  for (RegisteredOperationName name : ctx.getRegisteredOperations()) {
    llvm::StringRef n = name.getStringRef();
    if (!n.starts_with("amp.") || n == "amp.cast")
      continue;
    EXPECT_TRUE(p.ops.count(n)) << n.str() << " has no rule in policies/default.json";
  }
}

TEST(DefaultPolicy, FollowsTheReferenceLists) {
  Policy p = Policy::getDefault();
  for (const char *lower : {"amp.matmul", "amp.gemm", "amp.conv"}) {
    EXPECT_EQ(p.ops.lookup(lower).cls, PrecisionClass::Lower) << lower;
    EXPECT_EQ(p.ops.lookup(lower).accumulate, "f32") << lower;
  }
  for (const char *fp32 :
       {"amp.softmax", "amp.log_softmax", "amp.layer_norm", "amp.reduce_sum", "amp.reduce_mean",
        "amp.exp", "amp.log", "amp.pow", "amp.softmax_cross_entropy_loss", "amp.nll_loss"})
    EXPECT_EQ(p.ops.lookup(fp32).cls, PrecisionClass::FP32) << fp32;
  for (const char *follow : {"amp.relu", "amp.add", "amp.reshape", "amp.dropout"})
    EXPECT_EQ(p.ops.lookup(follow).cls, PrecisionClass::Follow) << follow;
  // Batch norm: low-precision activations, f32 statistics (PyTorch's
  // mixed-type batch norm under autocast).
  for (const char *storage : {"amp.batch_norm", "amp.batch_norm_grad"}) {
    EXPECT_EQ(p.ops.lookup(storage).cls, PrecisionClass::Storage) << storage;
    EXPECT_FALSE(storageOperands(storage).empty()) << storage;
  }
  EXPECT_TRUE(storageOperands("amp.relu").empty());
}

TEST(PolicyParse, AmendsAndReplaces) {
  MLIRContext ctx;
  ctx.loadDialect<AMPDialect>();
  std::vector<std::string> errors;
  ctx.getDiagEngine().registerHandler([&](Diagnostic &d) {
    errors.push_back(d.str());
    return success();
  });
  auto emit = [&] { return emitError(UnknownLoc::get(&ctx)); };
  auto amended =
      Policy::parse(R"({"ops": {"amp.softmax": "follow"}})", "t", Policy::getDefault(), &ctx, emit);
  ASSERT_TRUE(succeeded(amended));
  EXPECT_EQ(amended->ops.lookup("amp.softmax").cls, PrecisionClass::Follow);
  EXPECT_EQ(amended->ops.lookup("amp.matmul").cls, PrecisionClass::Lower);
  auto replaced = Policy::parse(R"({"extends": "none", "ops": {"amp.matmul": "fp32"}})", "t",
                                Policy::getDefault(), &ctx, emit);
  ASSERT_TRUE(succeeded(replaced));
  EXPECT_EQ(replaced->ops.size(), 1u);
  EXPECT_TRUE(errors.empty());
  EXPECT_TRUE(failed(
      Policy::parse(R"({"ops": {"amp.matmul": 3}})", "t", Policy::getDefault(), &ctx, emit)));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("'amp.matmul' must be a class name or an object"), std::string::npos)
      << errors[0];
}
