//===- AMPOps.td - amp dialect operations ------------------*- tablegen -*-===//
//
// Every op states its ONNX counterpart. Result types are inferred from the
// operands and attributes (InferTypeOpInterface): the ONNX shape rules live in
// lib/Dialect/AMP/IR/AMPShapes.cpp, so the verifier, the importer and any C++
// builder share one implementation. A declared result type may be more static
// than the inferred one (value_info may know a dimension the rules cannot).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_DIALECT_AMP_IR_AMPOPS_TD
#define AMP_DIALECT_AMP_IR_AMPOPS_TD

include "amp/Dialect/AMP/IR/AMPDialect.td"
include "amp/Dialect/AMP/IR/AMPEnums.td"
include "amp/Dialect/AMP/IR/AMPInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def AMP_FloatElt : AnyTypeOf<[F32, F16, BF16]>;
def AMP_IntElt : AnyTypeOf<[I8, I16, I32, I64, UI8, UI16, UI32, UI64]>;

def AMP_FloatTensor : RankedTensorOf<[F32, F16, BF16]>;
def AMP_NumTensor : RankedTensorOf<[F32, F16, BF16, I8, I16, I32, I64, UI8,
                                    UI16, UI32, UI64]>;
def AMP_AnyTensor : RankedTensorOf<[F32, F16, BF16, I1, I8, I16, I32, I64, UI8,
                                    UI16, UI32, UI64]>;
def AMP_IndexTensor : RankedTensorOf<[I32, I64]>;
def AMP_BoolTensor : RankedTensorOf<[I1]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class AMP_Op<string mnemonic, list<Trait> traits = []>
    : Op<AMP_Dialect, mnemonic, traits>;

// An op whose result types come from the ONNX shape rules in C++.
// An op whose result types follow from its operands by the shape rules.
// `accumulatorResults`: a float result inferred f16 / bf16 may be declared
// f32 instead, holding the op's f32 accumulator unrounded (products, their
// gradients, sums; autocast writes it where only f32 reads the result).
class AMP_InferredOp<string mnemonic, list<Trait> traits = [], bit accumulatorResults = 0>
    : AMP_Op<mnemonic, traits # [InferTypeOpAdaptorWithIsCompatible]> {
  let extraClassDefinition = !if(accumulatorResults, [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange l,
                                            ::mlir::TypeRange r) {
      return ::mlir::amp::areCompatibleResultTypes(l, r, /*f32Accumulators=*/true);
    }
  }], [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange l,
                                            ::mlir::TypeRange r) {
      return ::mlir::amp::areCompatibleResultTypes(l, r);
    }
  }]);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// Elementwise op with one operand whose result has the operand's type.
class AMP_UnaryOp<string mnemonic, Type tensorType, list<Trait> traits = []>
    : AMP_Op<mnemonic, traits # [Pure, SameOperandsAndResultType,
                                 DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

// An element-wise op that is one of the runtime's unary functions: its
// UnaryKind (named like its mnemonic unless `unaryKind` says otherwise) and
// parameters (`unaryParams`: alpha, and beta where the function has one)
// are stated here once, and read through UnaryFunctionOpInterface by the
// runtime lowering, the linalg lowering and the gradient (amp.unary_grad of
// the same function). `unaryGradient` 0: the op writes its own
// buildGradients.
class AMP_UnaryFunctionOp<string mnemonic, Type tensorType = AMP_FloatTensor,
                          bit unaryGradient = 1>
    : AMP_UnaryOp<mnemonic, tensorType,
                  [AMP_UnaryFunctionOpInterface,
                   DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  string unaryKind = "::mlir::amp::UnaryKind::" # mnemonic;
  string unaryParams = "";
  let extraClassDeclaration = "::mlir::amp::UnaryFunction getUnaryFunction() { return {" #
      unaryKind # !if(!empty(unaryParams), "", ", " # unaryParams) # "}; }";
  let extraClassDefinition = !if(unaryGradient, [{
    ::llvm::LogicalResult $cppClass::buildGradients(
        ::mlir::OpBuilder &b, ::mlir::ArrayRef<::mlir::Value> rg,
        ::llvm::SmallVectorImpl<::mlir::Value> &og) {
      return ::mlir::amp::unaryFunctionGradients(b, *this, rg, og);
    }
  }], "");
}

// Elementwise binary op with multidirectional (numpy) broadcasting.
class AMP_BinaryOp<string mnemonic, list<Trait> traits = []>
    : AMP_InferredOp<mnemonic, traits # [Pure]> {
  let arguments = (ins AMP_NumTensor:$lhs, AMP_NumTensor:$rhs);
  let results = (outs AMP_NumTensor:$output);
}

//===----------------------------------------------------------------------===//
// Element type change
//===----------------------------------------------------------------------===//

def AMP_CastOp : AMP_Op<"cast", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Change of element type (ONNX Cast)";
  let description = [{
    Converts each element to the result's element type with the shape kept.
    Float to narrower float rounds to nearest even (overflow gives inf, the
    IEEE subnormal or zero on underflow); float to integer truncates toward
    zero; anything to i1 is `x != 0`.

    Folding keeps numerics exact: a cast to the same type folds away; a chain
    `A -> B -> C` whose first step is exact (every A value is a B value)
    becomes `A -> C`, and so `low -> f32 -> low` folds to the input, while the
    lossy `f32 -> low -> f32` never folds.
  }];
  let arguments = (ins AMP_AnyTensor:$input);
  let results = (outs AMP_AnyTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($output)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Matrix products and convolution
//===----------------------------------------------------------------------===//

def AMP_MatMulOp : AMP_InferredOp<"matmul", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>], 1> {
  let summary = "Matrix product with numpy semantics (ONNX MatMul)";
  let description = [{
    Batched matrix product: 1-D operands are promoted and the promoted
    dimension removed, leading (batch) dimensions broadcast.
  }];
  let arguments = (ins AMP_NumTensor:$lhs, AMP_NumTensor:$rhs,
                   OptionalAttr<TypeAttr>:$accumulate);
  let results = (outs AMP_NumTensor:$output);
}

def AMP_GemmOp : AMP_InferredOp<"gemm", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>], 1> {
  let summary = "alpha * op(A) * op(B) + beta * C (ONNX Gemm)";
  let description = [{
    A and B are 2-D, `trans_a` / `trans_b` transpose them first; C (optional)
    is unidirectionally broadcast to the M x N result.
  }];
  let arguments = (ins AMP_NumTensor:$a, AMP_NumTensor:$b,
                   Optional<AMP_NumTensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0f">:$beta,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                   OptionalAttr<TypeAttr>:$accumulate);
  let results = (outs AMP_NumTensor:$output);
}

def AMP_ConvOp : AMP_InferredOp<"conv", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>], 1> {
  let summary = "N-d convolution, NCHW layout (ONNX Conv)";
  let description = [{
    X is [N, C, D1..Dn], W is [M, C/group, k1..kn], the optional bias B is
    [M]. Missing `strides` / `dilations` are 1, missing `pads` 0 and
    `kernel_shape` comes from W. `auto_pad` is NOTSET, SAME_UPPER, SAME_LOWER
    or VALID.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$w,
                   Optional<AMP_FloatTensor>:$bias,
                   DefaultValuedAttr<AMP_AutoPadAttr, "::mlir::amp::AutoPad::NOTSET">:$auto_pad,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group,
                   OptionalAttr<DenseI64ArrayAttr>:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   OptionalAttr<DenseI64ArrayAttr>:$strides,
                   OptionalAttr<TypeAttr>:$accumulate);
  let results = (outs AMP_FloatTensor:$output);
}

def AMP_ConvTransposeOp : AMP_InferredOp<"conv_transpose", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>], 1> {
  let summary = "N-d transposed convolution, NCHW layout (ONNX ConvTranspose)";
  let description = [{
    X is [N, C, D1..Dn], W is [C, M/group, k1..kn], the optional bias B is
    [M]. The result is [N, M, O1..On] with
    `Oi = strides[i] * (Di - 1) + output_padding[i] + (ki - 1) * dilations[i] + 1
    - pads[i] - pads[n + i]`: the gradient of amp.conv with respect to its
    input (PyTorch's conv_transpose). Pads are explicit (the importer
    resolves ONNX's auto_pad and output_shape) and each output_padding is
    less than its stride. Missing `strides` / `dilations` are 1, missing
    `pads` / `output_padding` 0.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$w,
                   Optional<AMP_FloatTensor>:$bias,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group,
                   OptionalAttr<DenseI64ArrayAttr>:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$output_padding,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   OptionalAttr<DenseI64ArrayAttr>:$strides,
                   OptionalAttr<TypeAttr>:$accumulate);
  let results = (outs AMP_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Normalisation and pooling
//===----------------------------------------------------------------------===//

def AMP_BatchNormOp : AMP_InferredOp<"batch_norm", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Batch normalisation (ONNX BatchNormalization)";
  let description = [{
    X is [N, C, ...]; scale, bias, mean and var are [C]. In training mode the
    batch statistics normalise X and the results `running_mean` /
    `running_var` are `mean * momentum + batch_stat * (1 - momentum)`; in
    inference mode the given statistics normalise X and are returned
    unchanged.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$scale,
                   AMP_FloatTensor:$bias, AMP_FloatTensor:$mean,
                   AMP_FloatTensor:$var,
                   DefaultValuedAttr<F32Attr, "1.0e-5f">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.9f">:$momentum,
                   DefaultValuedAttr<BoolAttr, "false">:$training_mode);
  let results = (outs AMP_FloatTensor:$output, AMP_FloatTensor:$running_mean,
                 AMP_FloatTensor:$running_var);
}

def AMP_LayerNormOp : AMP_InferredOp<"layer_norm", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Layer normalisation over the dims from `axis` on";
  let description = [{
    ONNX LayerNormalization. Besides Y, returns the f32 statistics `mean` and
    `inv_std_dev` with shape X[:axis] + [1] * (rank - axis), which the
    backward pass reuses. Statistics are computed in f32 (stash_type 1).
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$scale,
                   Optional<AMP_FloatTensor>:$bias,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-5f">:$epsilon,
                   DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs AMP_FloatTensor:$output, AMP_FloatTensor:$mean,
                 AMP_FloatTensor:$inv_std_dev);
}

def AMP_MaxPoolOp : AMP_InferredOp<"max_pool", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Max pooling, NCHW layout (ONNX MaxPool)";
  let description = [{
    The second result is the flat index of each maximum (i64), as ONNX's
    optional Indices output computes it (row-major over the whole input;
    `storage_order` 1 means column-major); the backward pass uses it, and a
    lowering may skip computing it when it has no users.
  }];
  let arguments = (ins AMP_NumTensor:$x,
                   DefaultValuedAttr<AMP_AutoPadAttr, "::mlir::amp::AutoPad::NOTSET">:$auto_pad,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DenseI64ArrayAttr:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   DefaultValuedAttr<I64Attr, "0">:$storage_order,
                   OptionalAttr<DenseI64ArrayAttr>:$strides);
  let results = (outs AMP_NumTensor:$output, RankedTensorOf<[I64]>:$indices);
}

def AMP_AveragePoolOp : AMP_InferredOp<"average_pool", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Average pooling, NCHW layout (ONNX AveragePool)";
  let arguments = (ins AMP_FloatTensor:$x,
                   DefaultValuedAttr<AMP_AutoPadAttr, "::mlir::amp::AutoPad::NOTSET">:$auto_pad,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DenseI64ArrayAttr:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   OptionalAttr<DenseI64ArrayAttr>:$strides);
  let results = (outs AMP_FloatTensor:$output);
}

def AMP_GlobalAveragePoolOp : AMP_InferredOp<"global_average_pool", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Mean over all spatial dims: [N, C, ...] -> [N, C, 1, ...]";
  let arguments = (ins AMP_FloatTensor:$x);
  let results = (outs AMP_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def AMP_FlattenOp : AMP_InferredOp<"flatten", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Reshape to 2-D around `axis` (ONNX Flatten)";
  let arguments = (ins AMP_AnyTensor:$input,
                   DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_ReshapeOp : AMP_InferredOp<"reshape", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Reshape to a constant shape (ONNX Reshape)";
  let description = [{
    `shape` may hold one -1 (inferred from the element count) and, unless
    `allowzero` is set, zeros that copy the input's dimension.
  }];
  let arguments = (ins AMP_AnyTensor:$input, DenseI64ArrayAttr:$shape,
                   DefaultValuedAttr<BoolAttr, "false">:$allowzero);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_TransposeOp : AMP_InferredOp<"transpose", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Permute dims (ONNX Transpose); no `perm` reverses them";
  let arguments = (ins AMP_AnyTensor:$input,
                   OptionalAttr<DenseI64ArrayAttr>:$perm);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_ConcatOp : AMP_InferredOp<"concat", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Concatenate along `axis` (ONNX Concat)";
  let arguments = (ins Variadic<AMP_AnyTensor>:$inputs, I64Attr:$axis);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_SliceOp : AMP_InferredOp<"slice", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Strided slice with constant bounds (ONNX Slice)";
  let description = [{
    Bounds are clamped as ONNX does; negative starts / ends count from the
    end. Missing `axes` means [0, 1, ...], missing `steps` means 1.
  }];
  let arguments = (ins AMP_AnyTensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   OptionalAttr<DenseI64ArrayAttr>:$steps);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_SqueezeOp : AMP_InferredOp<"squeeze", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Remove size-1 dims (ONNX Squeeze); no `axes` removes all";
  let arguments = (ins AMP_AnyTensor:$input,
                   OptionalAttr<DenseI64ArrayAttr>:$axes);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_UnsqueezeOp : AMP_InferredOp<"unsqueeze", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Insert size-1 dims at `axes` of the result (ONNX Unsqueeze)";
  let arguments = (ins AMP_AnyTensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_GatherOp : AMP_InferredOp<"gather", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Take entries along `axis` (ONNX Gather)";
  let description = [{
    Result shape: data[:axis] + indices.shape + data[axis+1:]. Negative
    indices count from the end; an index out of range is a run-time error.
  }];
  let arguments = (ins AMP_AnyTensor:$data, AMP_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_GatherElementsOp : AMP_InferredOp<"gather_elements", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Take one entry per index along `axis` (ONNX GatherElements, torch.gather)";
  let description = [{
    indices has data's rank and, off `axis`, dims no larger than data's;
    the result has indices' shape: out[..., i, ...] = data[..., indices[...,
    i, ...], ...]. Negative indices count from the end; one out of range is
    a run-time error.
  }];
  let arguments = (ins AMP_AnyTensor:$data, AMP_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_ExpandOp : AMP_InferredOp<"expand", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Broadcast to a constant shape (ONNX Expand)";
  let arguments = (ins AMP_AnyTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_WhereOp : AMP_InferredOp<"where", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Select by a condition, broadcasting all three (ONNX Where)";
  let arguments = (ins AMP_BoolTensor:$condition, AMP_AnyTensor:$x,
                   AMP_AnyTensor:$y);
  let results = (outs AMP_AnyTensor:$output);
}

def AMP_IdentityOp : AMP_UnaryOp<"identity", AMP_AnyTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "The input, unchanged (ONNX Identity)";
}

def AMP_DropoutOp : AMP_InferredOp<"dropout", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Random zeroing with 1/(1-ratio) rescaling (ONNX Dropout)";
  let description = [{
    Outside training mode (or with ratio 0) the output is the input and the
    mask all true. Not pure in training mode: each execution draws a new mask
    from the runtime's generator (seeded by `seed` when given).
  }];
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.5f">:$ratio,
                   DefaultValuedAttr<BoolAttr, "false">:$training_mode,
                   OptionalAttr<I64Attr>:$seed);
  let results = (outs AMP_FloatTensor:$output, AMP_BoolTensor:$mask);
}

def AMP_RandomNormalOp : AMP_Op<"random_normal"> {
  let summary = "Normally distributed random numbers (ONNX RandomNormal, RandomNormalLike)";
  let description = [{
    `mean + scale * z`, z standard normal, of the result's (static) shape
    and type. Not pure: each execution draws new numbers from the runtime's
    generator (the one Dropout draws from; a training program's `--seed`
    seeds it, and checkpoints hold its state). `seed`, the ONNX node's, is
    kept for the record only. No operands, so no gradient.
  }];
  let arguments = (ins DefaultValuedAttr<F32Attr, "0.0f">:$mean,
                   DefaultValuedAttr<F32Attr, "1.0f">:$scale,
                   OptionalAttr<F32Attr>:$seed);
  let results = (outs AMP_FloatTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def AMP_RandomUniformOp : AMP_Op<"random_uniform"> {
  let summary = "Uniformly distributed random numbers in [low, high) (ONNX RandomUniform, RandomUniformLike)";
  let description = [{
    As `amp.random_normal`, with `low + (high - low) * u`, u uniform in
    [0, 1) (24 random bits).
  }];
  let arguments = (ins DefaultValuedAttr<F32Attr, "0.0f">:$low,
                   DefaultValuedAttr<F32Attr, "1.0f">:$high,
                   OptionalAttr<F32Attr>:$seed);
  let results = (outs AMP_FloatTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def AMP_BernoulliOp : AMP_InferredOp<"bernoulli", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "1 with probability p, else 0 (ONNX Bernoulli)";
  let description = [{
    Each element 1 with the probability the input gives there (which must
    lie in [0, 1]: else the run fails naming it), drawn from the runtime's
    generator as `amp.random_normal`. The gradient with respect to p is
    zero, as torch.bernoulli's.
  }];
  let arguments = (ins AMP_FloatTensor:$input, OptionalAttr<F32Attr>:$seed);
  let results = (outs AMP_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------===//

def AMP_AddOp : AMP_BinaryOp<"add", [Commutative, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> { let summary = "lhs + rhs"; }
def AMP_SubOp : AMP_BinaryOp<"sub", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> { let summary = "lhs - rhs"; }
def AMP_MulOp : AMP_BinaryOp<"mul", [Commutative, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> { let summary = "lhs * rhs"; }
def AMP_DivOp : AMP_BinaryOp<"div", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "lhs / rhs (integer division truncates)";
}
def AMP_PowOp : AMP_BinaryOp<"pow", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "lhs ^ rhs (ONNX Pow: the exponent may have another type)";
}
def AMP_ModOp : AMP_BinaryOp<"mod", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Remainder with the divisor's sign (ONNX Mod fmod = 0, torch.remainder)";
}
def AMP_FModOp : AMP_BinaryOp<"fmod", [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Remainder with the dividend's sign (ONNX Mod fmod = 1, C fmod, torch.fmod)";
}
def AMP_MaxOp : AMP_BinaryOp<"max", [Commutative, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "The larger of lhs and rhs (a NaN wins)";
  let description = [{
    ONNX Max of two inputs (the importer chains more). The gradient is
    PyTorch's torch.maximum's: all of it to the larger input, half to each
    on a tie.
  }];
}
def AMP_MinOp : AMP_BinaryOp<"min", [Commutative, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "The smaller of lhs and rhs (a NaN wins)";
  let description = [{
    ONNX Min of two inputs (the importer chains more; ONNX Clip is a max
    then a min). The gradient is PyTorch's torch.minimum's: all of it to the
    smaller input, half to each on a tie.
  }];
}

// Comparisons and logical ops: an i1 result, no gradient (their results
// only select; amp.where carries the gradient).
class AMP_CompareOp<string mnemonic, string what>
    : AMP_InferredOp<mnemonic, [Pure]> {
  let summary = what;
  let description = [{
    Multidirectional (numpy) broadcasting; lhs and rhs have one element
    type. Floats compare as IEEE does (a NaN is unequal to everything).
  }];
  let arguments = (ins AMP_AnyTensor:$lhs, AMP_AnyTensor:$rhs);
  let results = (outs AMP_BoolTensor:$output);
}
def AMP_EqualOp : AMP_CompareOp<"equal", "lhs == rhs (ONNX Equal)">;
def AMP_LessOp : AMP_CompareOp<"less", "lhs < rhs (ONNX Less)">;
def AMP_LessEqualOp : AMP_CompareOp<"less_equal", "lhs <= rhs (ONNX LessOrEqual)">;
def AMP_GreaterOp : AMP_CompareOp<"greater", "lhs > rhs (ONNX Greater)">;
def AMP_GreaterEqualOp : AMP_CompareOp<"greater_equal", "lhs >= rhs (ONNX GreaterOrEqual)">;
class AMP_LogicalOp<string mnemonic, string what>
    : AMP_InferredOp<mnemonic, [Pure, Commutative]> {
  let summary = what;
  let arguments = (ins AMP_BoolTensor:$lhs, AMP_BoolTensor:$rhs);
  let results = (outs AMP_BoolTensor:$output);
}
def AMP_AndOp : AMP_LogicalOp<"and", "lhs and rhs (ONNX And)">;
def AMP_OrOp : AMP_LogicalOp<"or", "lhs or rhs (ONNX Or)">;
def AMP_XorOp : AMP_LogicalOp<"xor", "lhs xor rhs (ONNX Xor; ONNX Not is xor with true)">;

def AMP_SqrtOp : AMP_UnaryFunctionOp<"sqrt"> { let summary = "Square root"; }
def AMP_ExpOp : AMP_UnaryFunctionOp<"exp"> { let summary = "e^x"; }
def AMP_LogOp : AMP_UnaryFunctionOp<"log"> { let summary = "Natural logarithm"; }
def AMP_ErfOp : AMP_UnaryFunctionOp<"erf"> { let summary = "Error function"; }
def AMP_TanhOp : AMP_UnaryFunctionOp<"tanh"> { let summary = "Hyperbolic tangent"; }
def AMP_SigmoidOp : AMP_UnaryFunctionOp<"sigmoid"> {
  let summary = "1 / (1 + e^-x)";
}
def AMP_AbsOp : AMP_UnaryFunctionOp<"abs"> {
  let summary = "|x| (the gradient is torch.abs's: sign(x), 0 at 0)";
}
def AMP_ReciprocalOp : AMP_UnaryFunctionOp<"reciprocal"> {
  let summary = "1 / x";
}
def AMP_SoftplusOp : AMP_UnaryFunctionOp<"softplus"> {
  let summary = "log(1 + e^x), without overflow for large x";
}
def AMP_ReluOp : AMP_UnaryFunctionOp<"relu", AMP_NumTensor, 0> { let summary = "max(x, 0)"; }

def AMP_LeakyReluOp : AMP_UnaryFunctionOp<"leaky_relu"> {
  let summary = "x if x >= 0 else alpha * x";
  let description = [{
    The gradient is torch's: 1 above 0, alpha at and below 0.
  }];
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.01f">:$alpha);
  let unaryParams = "getAlpha().convertToFloat()";
}

def AMP_EluOp : AMP_UnaryFunctionOp<"elu"> {
  let summary = "x if x > 0 else alpha * (e^x - 1) (ONNX Elu, torch.nn.ELU)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha);
  let unaryParams = "getAlpha().convertToFloat()";
}
def AMP_CeluOp : AMP_UnaryFunctionOp<"celu"> {
  let summary = "x if x > 0 else alpha * (e^(x / alpha) - 1) (ONNX Celu)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha);
  let hasVerifier = 1;
  let unaryParams = "getAlpha().convertToFloat()";
}
def AMP_SeluOp : AMP_UnaryFunctionOp<"selu"> {
  let summary = "gamma * (x if x > 0 else alpha * (e^x - 1)) (ONNX Selu)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.67326319217681884765625f">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.05070102214813232421875f">:$gamma);
  let unaryParams = "getAlpha().convertToFloat(), getGamma().convertToFloat()";
}
def AMP_HardSigmoidOp : AMP_UnaryFunctionOp<"hard_sigmoid"> {
  let summary = "max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid)";
  let description = [{
    torch.nn.Hardsigmoid exports as alpha 1/6, beta 1/2. The gradient is
    alpha strictly inside (0, 1) and 0 at and beyond the corners, as
    torch's.
  }];
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.2f">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.5f">:$beta);
  let unaryParams = "getAlpha().convertToFloat(), getBeta().convertToFloat()";
}
def AMP_HardSwishOp : AMP_UnaryFunctionOp<"hard_swish"> {
  let summary = "x * max(0, min(1, x / 6 + 1/2)) (ONNX HardSwish, torch.nn.Hardswish)";
  let description = [{
    The gradient is torch's (2.x): x / 3 + 1/2 strictly inside (-3, 3), 0 at
    and below -3, 1 at and above 3. (An input of exactly +-3 is common in
    fp16: 3 * b for every b that rounds to 1.)
  }];
}
def AMP_SoftsignOp : AMP_UnaryFunctionOp<"softsign"> {
  let summary = "x / (1 + |x|)";
}
def AMP_ThresholdedReluOp : AMP_UnaryFunctionOp<"thresholded_relu"> {
  let summary = "x if x > alpha else 0 (ONNX ThresholdedRelu; a NaN stays NaN)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha);
  let unaryParams = "getAlpha().convertToFloat()";
}
def AMP_ClipOp : AMP_UnaryFunctionOp<"clip"> {
  let summary = "min(max(x, min), max) with constant bounds (ONNX Clip, torch.clamp)";
  let description = [{
    The importer's form of an ONNX Clip whose bounds are constants (a
    missing bound is an infinity); a bound computed at run time goes
    through amp.max / amp.min. A NaN stays NaN. The gradient is
    torch.clamp's with scalar bounds (and torch.nn.Hardtanh's): all of dy
    where min < x < max, none at the bounds or beyond.
  }];
  let arguments = (ins AMP_FloatTensor:$input, F32Attr:$min, F32Attr:$max);
  let unaryParams = "getMin().convertToFloat(), getMax().convertToFloat()";
}
def AMP_SinOp : AMP_UnaryFunctionOp<"sin"> { let summary = "Sine"; }
def AMP_CosOp : AMP_UnaryFunctionOp<"cos"> { let summary = "Cosine"; }
def AMP_TanOp : AMP_UnaryFunctionOp<"tan"> { let summary = "Tangent"; }
def AMP_AsinOp : AMP_UnaryFunctionOp<"asin"> { let summary = "Arcsine (NaN outside [-1, 1])"; }
def AMP_AcosOp : AMP_UnaryFunctionOp<"acos"> { let summary = "Arccosine (NaN outside [-1, 1])"; }
def AMP_AtanOp : AMP_UnaryFunctionOp<"atan"> { let summary = "Arctangent"; }
def AMP_SinhOp : AMP_UnaryFunctionOp<"sinh"> { let summary = "Hyperbolic sine"; }
def AMP_CoshOp : AMP_UnaryFunctionOp<"cosh"> { let summary = "Hyperbolic cosine"; }
def AMP_AsinhOp : AMP_UnaryFunctionOp<"asinh"> { let summary = "Inverse hyperbolic sine"; }
def AMP_AcoshOp : AMP_UnaryFunctionOp<"acosh"> { let summary = "Inverse hyperbolic cosine (NaN below 1)"; }
def AMP_AtanhOp : AMP_UnaryFunctionOp<"atanh"> { let summary = "Inverse hyperbolic tangent (NaN outside [-1, 1])"; }
def AMP_FloorOp : AMP_UnaryFunctionOp<"floor"> {
  let summary = "Round toward -inf (gradient 0)";
}
def AMP_CeilOp : AMP_UnaryFunctionOp<"ceil"> {
  let summary = "Round toward +inf (gradient 0)";
}
def AMP_RoundOp : AMP_UnaryFunctionOp<"round"> {
  let summary = "Round to nearest, halves to even (gradient 0)";
}
def AMP_SignOp : AMP_UnaryFunctionOp<"sign"> {
  let summary = "-1, 0 or 1 (a NaN stays NaN; gradient 0)";
}

def AMP_MishOp : AMP_UnaryFunctionOp<"mish"> {
  let summary = "x * tanh(softplus(x)) (ONNX Mish, torch.nn.Mish)";
  let description = [{
    Computed in f32 with softplus as log(1 + e^x) without overflow; the
    gradient is torch's mish_backward: dy * (tanh(sp) + x sigmoid(x)
    (1 - tanh(sp)^2)).
  }];
}

def AMP_GeluOp : AMP_UnaryFunctionOp<"gelu"> {
  let summary = "x * Phi(x); `approximate` is none (erf) or tanh";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<AMP_GeluApproximationAttr, "::mlir::amp::GeluApproximation::none">:$approximate);
  let unaryKind = "getApproximate() == ::mlir::amp::GeluApproximation::tanh ? ::mlir::amp::UnaryKind::gelu_tanh : ::mlir::amp::UnaryKind::gelu";
}

def AMP_SoftmaxOp : AMP_UnaryOp<"softmax", AMP_FloatTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Softmax along one axis (ONNX Softmax, opset 13 semantics)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let hasVerifier = 1;
}

def AMP_LogSoftmaxOp : AMP_UnaryOp<"log_softmax", AMP_FloatTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Log of softmax along one axis (opset 13 semantics)";
  let arguments = (ins AMP_FloatTensor:$input,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def AMP_CumSumOp : AMP_Op<"cumsum", [Pure, SameOperandsAndResultType,
                                      DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Cumulative sum along `axis` (ONNX CumSum, torch.cumsum)";
  let description = [{
    `exclusive` leaves each element out of its own sum, `reverse` sums from
    the end. Floats accumulate in f32 and round each output once. The
    gradient is the cumulative sum of dy the other way round.
  }];
  let arguments = (ins AMP_NumTensor:$input, I64Attr:$axis,
                   DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                   DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs AMP_NumTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

class AMP_ArgReduceOp<string mnemonic, string what> : AMP_InferredOp<mnemonic, [Pure]> {
  let summary = what;
  let description = [{
    The index (int64) along `axis` of the extreme value: the first of equal
    ones, the last with `select_last_index`; a NaN counts as the extreme (as
    numpy and torch). `keepdims` keeps the axis as 1. No gradient.
  }];
  let arguments = (ins AMP_NumTensor:$input, DefaultValuedAttr<I64Attr, "0">:$axis,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims,
                   DefaultValuedAttr<BoolAttr, "false">:$select_last_index);
  let results = (outs RankedTensorOf<[I64]>:$output);
}
def AMP_GridSampleOp : AMP_InferredOp<"grid_sample", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Sample x [N, C, H, W] at grid [N, Ho, Wo, 2] (ONNX GridSample, torch grid_sample)";
  let description = [{
    `mode`: bilinear, nearest or bicubic; `padding_mode`: zeros, border or
    reflection; `align_corners` as torch. The result is [N, C, Ho, Wo]; the
    gradient (amp.grid_sample_grad) goes to x and to the grid (none from
    nearest).
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$grid,
                   DefaultValuedAttr<AMP_GridSampleModeAttr, "::mlir::amp::GridSampleMode::bilinear">:$mode,
                   DefaultValuedAttr<AMP_GridSamplePaddingAttr, "::mlir::amp::GridSamplePadding::zeros">:$padding_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$align_corners);
  let results = (outs AMP_FloatTensor:$output);
}

def AMP_GridSampleGradOp : AMP_InferredOp<"grid_sample_grad", [Pure]> {
  let summary = "Gradients of amp.grid_sample for x and the grid";
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$grid, AMP_FloatTensor:$dy,
                   DefaultValuedAttr<AMP_GridSampleModeAttr, "::mlir::amp::GridSampleMode::bilinear">:$mode,
                   DefaultValuedAttr<AMP_GridSamplePaddingAttr, "::mlir::amp::GridSamplePadding::zeros">:$padding_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$align_corners);
  let results = (outs AMP_FloatTensor:$dx, AMP_FloatTensor:$dgrid);
}

def AMP_TopKOp : AMP_InferredOp<"top_k", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "The k largest (or smallest) values along an axis and their indices (ONNX TopK)";
  let description = [{
    Sorted, equal values in index order, a NaN larger than any number
    (torch.topk's order). The values' gradient goes back to the positions
    the indices name (amp.gather_elements_grad).
  }];
  let arguments = (ins AMP_FloatTensor:$input, I64Attr:$k, DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<BoolAttr, "true">:$largest);
  let results = (outs AMP_FloatTensor:$values, RankedTensorOf<[I64]>:$indices);
}

def AMP_ArgMaxOp : AMP_ArgReduceOp<"arg_max", "Index of the largest value along an axis (ONNX ArgMax)">;
def AMP_ArgMinOp : AMP_ArgReduceOp<"arg_min", "Index of the smallest value along an axis (ONNX ArgMin)">;

class AMP_ReduceOp<string mnemonic, Type tensorType, list<Trait> traits = [], bit accumulatorResults = 0>
    : AMP_InferredOp<mnemonic, traits # [Pure], accumulatorResults> {
  let description = [{
    Reduces over `axes` (all dims when absent or empty, unless
    `noop_with_empty_axes`, which then returns the input); `keepdims` keeps
    reduced dims as 1.
  }];
  let arguments = (ins tensorType:$input,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims,
                   DefaultValuedAttr<BoolAttr, "false">:$noop_with_empty_axes);
  let results = (outs tensorType:$output);
}

def AMP_ReduceSumOp : AMP_ReduceOp<"reduce_sum", AMP_NumTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>], 1> {
  let summary = "Sum over axes";
}
def AMP_ReduceMeanOp : AMP_ReduceOp<"reduce_mean", AMP_FloatTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Mean over axes";
}
def AMP_ReduceProdOp : AMP_ReduceOp<"reduce_prod", AMP_NumTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Product over axes (torch.prod's gradient, zeros included)";
}
def AMP_ReduceMaxOp : AMP_ReduceOp<"reduce_max", AMP_NumTensor, [DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Maximum over axes";
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def AMP_SoftmaxCrossEntropyLossOp
    : AMP_InferredOp<"softmax_cross_entropy_loss", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Cross entropy of softmax(scores) against class labels";
  let description = [{
    ONNX SoftmaxCrossEntropyLoss. scores [N, C, D1..Dk], labels [N, D1..Dk],
    optional class weights [C]. `reduction` is mean (weighted mean over
    the labels not equal to `ignore_index`; `#amp.reduction<mean>`), sum or
    none. The second
    result is log_softmax(scores) along C.
  }];
  let arguments = (ins AMP_FloatTensor:$scores, AMP_IndexTensor:$labels,
                   Optional<AMP_FloatTensor>:$weights,
                   DefaultValuedAttr<AMP_ReductionAttr, "::mlir::amp::Reduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AMP_FloatTensor:$loss, AMP_FloatTensor:$log_prob);
}

def AMP_NLLLossOp : AMP_InferredOp<"nll_loss", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Negative log likelihood (ONNX NegativeLogLikelihoodLoss)";
  let arguments = (ins AMP_FloatTensor:$input, AMP_IndexTensor:$target,
                   Optional<AMP_FloatTensor>:$weight,
                   DefaultValuedAttr<AMP_ReductionAttr, "::mlir::amp::Reduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AMP_FloatTensor:$loss);
}

//===----------------------------------------------------------------------===//
// Backward ops (built by amp-autodiff)
//===----------------------------------------------------------------------===//

def AMP_UnaryGradOp : AMP_Op<"unary_grad", [Pure, AllTypesMatch<["x", "dy", "dx"]>]> {
  let summary = "dx = dy * f'(x) for an elementwise op f";
  let description = [{
    `kind` names f: relu, sqrt, exp, log, erf, tanh, sigmoid, gelu,
    gelu_tanh, leaky_relu (with `alpha`), abs, reciprocal, softplus, elu
    and celu (`alpha`), selu (`alpha`, `beta` = gamma), hard_sigmoid
    (`alpha`, `beta`), hard_swish, softsign, sin, cos, floor, ceil, round,
    sign, clip (`alpha` = min, `beta` = max), thresholded_relu (`alpha`),
    tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh.
    x is the forward input.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$dy, AMP_UnaryKindAttr:$kind,
                   DefaultValuedAttr<F32Attr, "0.0f">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.0f">:$beta);
  let results = (outs AMP_FloatTensor:$dx);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def AMP_SoftmaxGradOp : AMP_Op<"softmax_grad", [Pure, AllTypesMatch<["y", "dy", "dx"]>]> {
  let summary = "Gradient of softmax (or log_softmax) from its output y";
  let arguments = (ins AMP_FloatTensor:$y, AMP_FloatTensor:$dy, I64Attr:$axis,
                   DefaultValuedAttr<BoolAttr, "false">:$log);
  let results = (outs AMP_FloatTensor:$dx);
  let assemblyFormat = "$y `,` $dy attr-dict `:` type($y)";
}

def AMP_SoftmaxCrossEntropyLossGradOp
    : AMP_Op<"softmax_cross_entropy_loss_grad", [Pure, AllTypesMatch<["log_prob", "dscores"]>]> {
  let summary = "d loss / d scores of softmax_cross_entropy_loss";
  let description = [{
    (softmax(scores) - onehot(labels)) * weight(label) * dloss, divided by
    the summed weights for reduction mean; ignored labels give 0. dloss is
    a scalar for mean / sum and [N, D...] for none.
  }];
  let arguments = (ins AMP_FloatTensor:$log_prob, AMP_IndexTensor:$labels,
                   Optional<AMP_FloatTensor>:$weights, AMP_FloatTensor:$dloss,
                   DefaultValuedAttr<AMP_ReductionAttr, "::mlir::amp::Reduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AMP_FloatTensor:$dscores);
  let assemblyFormat = "$log_prob `,` $labels `,` $dloss (`weights` $weights^)? attr-dict `:` functional-type(operands, results)";
}

def AMP_ConvGradOp : AMP_InferredOp<"conv_grad", [Pure], 1> {
  let summary = "Gradients of amp.conv: dx, dw and db from x, w and dy";
  let description = [{
    Carries the forward convolution's attributes. db is [M]; results nobody
    uses are not computed by the runtime.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$w, AMP_FloatTensor:$dy,
                   DefaultValuedAttr<AMP_AutoPadAttr, "::mlir::amp::AutoPad::NOTSET">:$auto_pad,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group,
                   OptionalAttr<DenseI64ArrayAttr>:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   OptionalAttr<DenseI64ArrayAttr>:$strides,
                   OptionalAttr<TypeAttr>:$accumulate);
  let results = (outs AMP_FloatTensor:$dx, AMP_FloatTensor:$dw, AMP_FloatTensor:$db);
}

def AMP_LayerNormGradOp : AMP_InferredOp<"layer_norm_grad", [Pure]> {
  let summary = "Gradients of amp.layer_norm: dx, dscale, dbias";
  let description = [{
    From the forward input, scale and saved f32 statistics (mean,
    inv_std_dev) and dy. dscale / dbias have the scale's shape.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$scale,
                   AMP_FloatTensor:$mean, AMP_FloatTensor:$inv_std_dev,
                   AMP_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs AMP_FloatTensor:$dx, AMP_FloatTensor:$dscale, AMP_FloatTensor:$dbias);
}

def AMP_MaxPoolGradOp : AMP_InferredOp<"max_pool_grad", [Pure]> {
  let summary = "Gradient of amp.max_pool: dy scattered to the row-major indices";
  let description = [{
    x (the forward input) gives only the result's shape; dy goes to the
    positions `indices` names (ties: the first maximum, as PyTorch).
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$dy, RankedTensorOf<[I64]>:$indices);
  let results = (outs AMP_FloatTensor:$dx);
}

def AMP_AveragePoolGradOp : AMP_InferredOp<"average_pool_grad", [Pure]> {
  let summary = "Gradient of amp.average_pool (its attributes; x gives the shape)";
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$dy,
                   DefaultValuedAttr<AMP_AutoPadAttr, "::mlir::amp::AutoPad::NOTSET">:$auto_pad,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad,
                   OptionalAttr<DenseI64ArrayAttr>:$dilations,
                   DenseI64ArrayAttr:$kernel_shape,
                   OptionalAttr<DenseI64ArrayAttr>:$pads,
                   OptionalAttr<DenseI64ArrayAttr>:$strides);
  let results = (outs AMP_FloatTensor:$dx);
}

def AMP_BatchNormGradOp : AMP_InferredOp<"batch_norm_grad", [Pure]> {
  let summary = "Gradients of training-mode amp.batch_norm: dx, dscale, dbias";
  let description = [{
    The batch statistics are recomputed from x (biased variance, as the
    forward op normalises with them).
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$scale, AMP_FloatTensor:$dy,
                   DefaultValuedAttr<F32Attr, "1.0e-5f">:$epsilon);
  let results = (outs AMP_FloatTensor:$dx, AMP_FloatTensor:$dscale, AMP_FloatTensor:$dbias);
}

def AMP_NLLLossGradOp : AMP_Op<"nll_loss_grad", [Pure, AllTypesMatch<["input", "dinput"]>]> {
  let summary = "d loss / d input of nll_loss (input gives the shape)";
  let description = [{
    -weight(label) * dloss at each label position (divided by the summed
    weights for "mean"), 0 elsewhere and for ignored labels.
  }];
  let arguments = (ins AMP_FloatTensor:$input, AMP_IndexTensor:$target,
                   Optional<AMP_FloatTensor>:$weight, AMP_FloatTensor:$dloss,
                   DefaultValuedAttr<AMP_ReductionAttr, "::mlir::amp::Reduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AMP_FloatTensor:$dinput);
  let assemblyFormat = "$input `,` $target `,` $dloss (`weight` $weight^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Optimizer updates (built by amp-optimizer): functional, skipped by data
//===----------------------------------------------------------------------===//

def AMP_F32Tensor : RankedTensorOf<[F32]>;
def AMP_StepTensor : 0DTensorOf<[I64]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getIntegerType(64))">;
def AMP_FlagTensor : 0DTensorOf<[I1]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getI1Type())">;

def AMP_SGDUpdateOp : AMP_Op<"sgd_update", [Pure,
    AllTypesMatch<["param", "grad", "new_param"]>]> {
  let summary = "One PyTorch SGD step on an f32 parameter (no-op when found_inf)";
  let description = [{
    g = grad + weight_decay * param; with momentum: buf = g at step 0, else
    momentum * buf + (1 - dampening) * g; g = nesterov ? g + momentum * buf
    : buf; new_param = param - lr * g. When found_inf is true the results
    equal the inputs bit for bit. The momentum buffer is present exactly
    when momentum != 0.
  }];
  let arguments = (ins AMP_F32Tensor:$param, AMP_F32Tensor:$grad,
                   Optional<AMP_F32Tensor>:$momentum_buf, AMP_StepTensor:$step,
                   AMP_FlagTensor:$found_inf, F32Attr:$lr,
                   DefaultValuedAttr<F32Attr, "0.0f">:$momentum,
                   DefaultValuedAttr<F32Attr, "0.0f">:$dampening,
                   DefaultValuedAttr<F32Attr, "0.0f">:$weight_decay,
                   DefaultValuedAttr<BoolAttr, "false">:$nesterov);
  let results = (outs AMP_F32Tensor:$new_param, Optional<AMP_F32Tensor>:$new_momentum_buf);
  let assemblyFormat = [{
    $param `,` $grad (`momentum_buf` $momentum_buf^ `:` type($momentum_buf))? `step` $step
    `found_inf` $found_inf attr-dict `:` type($param) (`,` type($new_momentum_buf)^)?
  }];
  let hasVerifier = 1;
}

def AMP_AdamUpdateOp : AMP_Op<"adam_update", [Pure,
    AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq", "new_param", "new_exp_avg",
                   "new_exp_avg_sq"]>]> {
  let summary = "One PyTorch Adam / AdamW step on an f32 parameter (no-op when found_inf)";
  let description = [{
    t = step + 1; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
    param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
    Weight decay: `decoupled` (AdamW) multiplies param by 1 - lr * wd first,
    otherwise (Adam) g += wd * param. Skipped entirely when found_inf.
    `mode` "hf" is Hugging Face's AdamW (onnxruntime-training's adam_mode 1;
    decoupled only): param -= lr sqrt(1 - beta2^t) / (1 - beta1^t) * m /
    (sqrt(v) + eps), then param -= lr * wd * param.
  }];
  let arguments = (ins AMP_F32Tensor:$param, AMP_F32Tensor:$grad, AMP_F32Tensor:$exp_avg,
                   AMP_F32Tensor:$exp_avg_sq, AMP_StepTensor:$step, AMP_FlagTensor:$found_inf,
                   F32Attr:$lr, DefaultValuedAttr<F32Attr, "0.9f">:$beta1,
                   DefaultValuedAttr<F32Attr, "0.999f">:$beta2,
                   DefaultValuedAttr<F32Attr, "1.0e-8f">:$eps,
                   DefaultValuedAttr<F32Attr, "0.0f">:$weight_decay,
                   DefaultValuedAttr<BoolAttr, "false">:$decoupled,
                   DefaultValuedAttr<AMP_AdamModeAttr, "::mlir::amp::AdamMode::torch">:$mode);
  let results = (outs AMP_F32Tensor:$new_param, AMP_F32Tensor:$new_exp_avg,
                 AMP_F32Tensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `step` $step `found_inf` $found_inf
    attr-dict `:` type($param)
  }];
  let hasVerifier = 1;
}

def AMP_StepCountOp : AMP_Op<"step_count", [Pure]> {
  let summary = "step + 1, or step when found_inf (the applied-step counter)";
  let arguments = (ins AMP_StepTensor:$step, AMP_FlagTensor:$found_inf);
  let results = (outs AMP_StepTensor:$new_step);
  let assemblyFormat = "$step `found_inf` $found_inf attr-dict";
}

//===----------------------------------------------------------------------===//
// Loss scaling (built by amp-loss-scaling): docs/semantics.md section 3
//===----------------------------------------------------------------------===//

def AMP_ScaleTensor : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

def AMP_UnscaleAndCheckOp : AMP_Op<"unscale_and_check", [Pure]> {
  let summary = "All gradients times 1/scale in f32, and whether any is inf / NaN";
  let description = [{
    One fused pass over every gradient (PyTorch's
    _amp_foreach_non_finite_check_and_unscale_): result i = f32(grads[i]) *
    inv, where inv = f32(1.0 / f64(scale)); found_inf is true when any value
    of any gradient is inf or NaN.
  }];
  let arguments = (ins Variadic<AMP_FloatTensor>:$grads, AMP_ScaleTensor:$scale);
  let results = (outs Variadic<AMP_F32Tensor>:$unscaled, AMP_FlagTensor:$found_inf);
  let assemblyFormat = [{
    $grads `scale` $scale attr-dict `:` type($grads) `->` type($unscaled)
  }];
  let hasVerifier = 1;
}

def AMP_AllReduceOp : AMP_Op<"all_reduce"> {
  let summary = "Data parallel: every rank's tensors summed (or averaged) across the ranks";
  let description = [{
    Result i = the sum over the job's ranks of every rank's inputs[i] (with
    `mean`, divided by the number of ranks), computed in f32 and identical
    on every rank (a reduction to rank 0 and a broadcast: no rank sums in
    another order). amp-loss-scaling{data-parallel} puts one before
    unscale_and_check, so found_inf, the loss scale and the skip decision
    are the same on every rank. In a process that is not part of a job
    (one rank) the results are the inputs. Not pure: it communicates, and
    every rank must run it.
  }];
  let arguments = (ins Variadic<AMP_FloatTensor>:$inputs, UnitAttr:$mean);
  let results = (outs Variadic<AMP_FloatTensor>:$outputs);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($outputs)
  }];
  let hasVerifier = 1;
}

def AMP_ClipGradNormOp : AMP_Op<"clip_grad_norm", [Pure]> {
  let summary = "PyTorch clip_grad_norm_ over all (unscaled) gradients";
  let description = [{
    total_norm = the L2 norm of all gradients together (in f64); when it
    exceeds max_norm every gradient is multiplied by max_norm / (total_norm
    + 1e-6). Nothing is clipped when found_inf is set (the step is skipped).
  }];
  let arguments = (ins Variadic<AMP_F32Tensor>:$grads, AMP_FlagTensor:$found_inf,
                   F32Attr:$max_norm);
  let results = (outs Variadic<AMP_F32Tensor>:$clipped, AMP_ScaleTensor:$total_norm);
  let assemblyFormat = [{
    $grads `found_inf` $found_inf attr-dict `:` type($grads) `->` type($clipped)
  }];
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::ValueRange":$grads, "::mlir::Value":$found_inf,
                                 "float":$max_norm)>];
}

def AMP_UpdateScaleOp : AMP_Op<"update_scale", [Pure]> {
  let summary = "The dynamic loss scale after a step (PyTorch _amp_update_scale_)";
  let description = [{
    found_inf: hysteresis_left - 1 overflows are tolerated first (DeepSpeed's
    hysteresis; 1 = PyTorch); then scale = max(scale * backoff_factor,
    min_scale) and growth_tracker = 0. Otherwise growth_tracker + 1, and when
    it reaches growth_interval the scale grows by growth_factor if the result
    is finite and the tracker restarts. An overflow at min_scale is an error
    at run time (`on_min_scale = #amp.on_min_scale<error>`, the default) or
    a warning (`#amp.on_min_scale<warn>`).
  }];
  let arguments = (ins AMP_ScaleTensor:$scale, AMP_StepTensor:$growth_tracker,
                   AMP_StepTensor:$hysteresis_left, AMP_FlagTensor:$found_inf,
                   DefaultValuedAttr<F32Attr, "2.0f">:$growth_factor,
                   DefaultValuedAttr<F32Attr, "0.5f">:$backoff_factor,
                   DefaultValuedAttr<I64Attr, "2000">:$growth_interval,
                   DefaultValuedAttr<I64Attr, "1">:$hysteresis,
                   DefaultValuedAttr<F32Attr, "0.0f">:$min_scale,
                   DefaultValuedAttr<AMP_OnMinScaleAttr, "::mlir::amp::OnMinScale::error">:$on_min_scale);
  let results = (outs AMP_ScaleTensor:$new_scale, AMP_StepTensor:$new_growth_tracker,
                 AMP_StepTensor:$new_hysteresis_left);
  let assemblyFormat = [{
    $scale `tracker` $growth_tracker `hysteresis` $hysteresis_left `found_inf` $found_inf
    attr-dict
  }];
  let hasVerifier = 1;
}

def AMP_MicroStepOp : AMP_Op<"micro_step", [Pure]> {
  let summary = "Gradient accumulation's counter: whether this step applies the update";
  let description = [{
    apply = (micro_step + 1 == every); new_micro_step = apply ? 0 :
    micro_step + 1. With `every` micro-batches per update, the optimizer step,
    the unscale and the scale update take effect on the applying step only.
  }];
  let arguments = (ins AMP_StepTensor:$micro_step, I64Attr:$every);
  let results = (outs AMP_FlagTensor:$apply, AMP_StepTensor:$new_micro_step);
  let assemblyFormat = "$micro_step attr-dict";
  let hasVerifier = 1;
}

def AMP_SliceGradOp : AMP_InferredOp<"slice_grad", [Pure]> {
  let summary = "Gradient of amp.slice: dy written into zeros of the input's shape";
  let description = [{
    dx is dy's element type in the sliced input's `shape`; the elements the
    slice read (same starts / ends / axes / steps as the forward op) receive
    dy, the others 0.
  }];
  let arguments = (ins AMP_FloatTensor:$dy, DenseI64ArrayAttr:$shape, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends, OptionalAttr<DenseI64ArrayAttr>:$axes,
                   OptionalAttr<DenseI64ArrayAttr>:$steps);
  let results = (outs AMP_FloatTensor:$dx);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($dx)";
  let hasVerifier = 1;
}

def AMP_GatherGradOp : AMP_InferredOp<"gather_grad", [Pure]> {
  let summary = "Gradient of amp.gather for its data: dy added up at the gathered rows";
  let description = [{
    ddata (dy's element type in the data's `shape`) is zero except along `axis` at each index, where
    the dy slices that gathered it are summed (an index gathered twice gets
    both). Negative indices count from the end, as in the forward op.
  }];
  let arguments = (ins AMP_IndexTensor:$indices, AMP_FloatTensor:$dy,
                   DenseI64ArrayAttr:$shape, I64Attr:$axis);
  let results = (outs AMP_FloatTensor:$ddata);
  let assemblyFormat = "$indices `,` $dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def AMP_GatherElementsGradOp : AMP_InferredOp<"gather_elements_grad", [Pure, DeclareOpInterfaceMethods<AMP_GradientOpInterface>]> {
  let summary = "Gradient of amp.gather_elements for its data (a scatter-add)";
  let description = [{
    ddata (dy's element type in the data's `shape`) is zero except where an
    element was read, which gets the dy entries that read it, summed. Also
    ONNX ScatterElements / ScatterND's scatter (the importer composes them
    from it); its own gradient for dy is amp.gather_elements.
  }];
  let arguments = (ins AMP_IndexTensor:$indices, AMP_FloatTensor:$dy,
                   DenseI64ArrayAttr:$shape, I64Attr:$axis);
  let results = (outs AMP_FloatTensor:$ddata);
  let assemblyFormat = "$indices `,` $dy attr-dict `:` functional-type(operands, results)";
}

def AMP_ReduceMaxGradOp : AMP_Op<"reduce_max_grad", [Pure, AllTypesMatch<["x", "dx"]>]> {
  let summary = "Gradient of amp.reduce_max (torch.amax's: shared evenly among ties)";
  let description = [{
    y and dy are the maximum and its gradient with the reduced dims kept as
    1; dx = dy / count where x equals its slot's maximum (count: how many
    do), 0 elsewhere.
  }];
  let arguments = (ins AMP_FloatTensor:$x, AMP_FloatTensor:$y, AMP_FloatTensor:$dy);
  let results = (outs AMP_FloatTensor:$dx);
  let assemblyFormat = "$x `,` $y `,` $dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // AMP_DIALECT_AMP_IR_AMPOPS_TD
