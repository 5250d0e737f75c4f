//===- AMPEnums.td - the amp dialect's enum attributes -----*- tablegen -*-===//
//
// The string-valued ONNX attributes as enums: the verifier knows every
// value, and the ones the runtime reads are numbered like the runtime's own
// enums (amprt.h), so the lowering passes them through
// (lib/Conversion/AMPToRuntime/LowerOps.cpp checks the numbering).
// Printed as #amp.<name><value>: {auto_pad = #amp.auto_pad<SAME_UPPER>}.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_DIALECT_AMP_IR_AMPENUMS_TD
#define AMP_DIALECT_AMP_IR_AMPENUMS_TD

include "amp/Dialect/AMP/IR/AMPDialect.td"
include "mlir/IR/EnumAttr.td"

class AMP_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::mlir::amp";
  let genSpecializedAttr = 0;
}

class AMP_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<AMP_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

// ONNX auto_pad (Conv, ConvTranspose, the pools): the lowering resolves it
// to explicit pads.
def AMP_AutoPad : AMP_Enum<"AutoPad", "ONNX auto_pad: #amp.auto_pad<NOTSET | SAME_UPPER | SAME_LOWER | VALID>", [
  I32EnumAttrCase<"NOTSET", 0>, I32EnumAttrCase<"SAME_UPPER", 1>,
  I32EnumAttrCase<"SAME_LOWER", 2>, I32EnumAttrCase<"VALID", 3>]>;
def AMP_AutoPadAttr : AMP_EnumAttr<AMP_AutoPad, "auto_pad">;

// A loss's reduction: amprt_reduction.
def AMP_Reduction : AMP_Enum<"Reduction", "loss reduction: #amp.reduction<none | sum | mean>", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"sum", 1>, I32EnumAttrCase<"mean", 2>]>;
def AMP_ReductionAttr : AMP_EnumAttr<AMP_Reduction, "reduction">;

// Gelu's approximation.
def AMP_GeluApproximation : AMP_Enum<"GeluApproximation", "GELU approximation: #amp.approximate<none | tanh>", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"tanh", 1>]>;
def AMP_GeluApproximationAttr : AMP_EnumAttr<AMP_GeluApproximation, "approximate">;

// GridSample's interpolation and padding (the runtime's numbering).
def AMP_GridSampleMode : AMP_Enum<"GridSampleMode", "GridSample interpolation: #amp.grid_sample_mode<bilinear | nearest | bicubic>", [
  I32EnumAttrCase<"bilinear", 0>, I32EnumAttrCase<"nearest", 1>,
  I32EnumAttrCase<"bicubic", 2>]>;
def AMP_GridSampleModeAttr : AMP_EnumAttr<AMP_GridSampleMode, "grid_sample_mode">;
def AMP_GridSamplePadding : AMP_Enum<"GridSamplePadding", "GridSample padding: #amp.grid_sample_padding<zeros | border | reflection>", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"border", 1>,
  I32EnumAttrCase<"reflection", 2>]>;
def AMP_GridSamplePaddingAttr : AMP_EnumAttr<AMP_GridSamplePadding, "grid_sample_padding">;

// The element-wise function whose derivative amp.unary_grad applies:
// amprt_unary_op's numbering (clip is AMPRT_UNARY_CLAMP).
def AMP_UnaryKind : AMP_Enum<"UnaryKind", "element-wise function: #amp.unary<identity | relu | sqrt | exp | log | erf | tanh | sigmoid | gelu | gelu_tanh | leaky_relu | abs | reciprocal | softplus | elu | celu | selu | hard_sigmoid | hard_swish | softsign | sin | cos | floor | ceil | round | sign | clip | thresholded_relu | tan | asin | acos | atan | sinh | cosh | asinh | acosh | atanh | mish>", [
  I32EnumAttrCase<"identity", 0>, I32EnumAttrCase<"relu", 1>,
  I32EnumAttrCase<"sqrt", 2>, I32EnumAttrCase<"exp", 3>, I32EnumAttrCase<"log", 4>,
  I32EnumAttrCase<"erf", 5>, I32EnumAttrCase<"tanh", 6>,
  I32EnumAttrCase<"sigmoid", 7>, I32EnumAttrCase<"gelu", 8>,
  I32EnumAttrCase<"gelu_tanh", 9>, I32EnumAttrCase<"leaky_relu", 10>,
  I32EnumAttrCase<"abs", 11>, I32EnumAttrCase<"reciprocal", 12>,
  I32EnumAttrCase<"softplus", 13>, I32EnumAttrCase<"elu", 14>,
  I32EnumAttrCase<"celu", 15>, I32EnumAttrCase<"selu", 16>,
  I32EnumAttrCase<"hard_sigmoid", 17>, I32EnumAttrCase<"hard_swish", 18>,
  I32EnumAttrCase<"softsign", 19>, I32EnumAttrCase<"sin", 20>,
  I32EnumAttrCase<"cos", 21>, I32EnumAttrCase<"floor", 22>,
  I32EnumAttrCase<"ceil", 23>, I32EnumAttrCase<"round", 24>,
  I32EnumAttrCase<"sign", 25>, I32EnumAttrCase<"clip", 26>,
  I32EnumAttrCase<"thresholded_relu", 27>, I32EnumAttrCase<"tan", 28>,
  I32EnumAttrCase<"asin", 29>, I32EnumAttrCase<"acos", 30>,
  I32EnumAttrCase<"atan", 31>, I32EnumAttrCase<"sinh", 32>,
  I32EnumAttrCase<"cosh", 33>, I32EnumAttrCase<"asinh", 34>,
  I32EnumAttrCase<"acosh", 35>, I32EnumAttrCase<"atanh", 36>,
  I32EnumAttrCase<"mish", 37>]>;
def AMP_UnaryKindAttr : AMP_EnumAttr<AMP_UnaryKind, "unary">;

// Adam's flavour: PyTorch's Adam / AdamW, or Hugging Face's AdamW (eps
// added before the bias correction of v).
def AMP_AdamMode : AMP_Enum<"AdamMode", "Adam flavour: #amp.adam_mode<torch | hf>", [
  I32EnumAttrCase<"torch", 0>, I32EnumAttrCase<"hf", 1>]>;
def AMP_AdamModeAttr : AMP_EnumAttr<AMP_AdamMode, "adam_mode">;

// What update_scale does when the scale would fall below min_scale.
def AMP_OnMinScale : AMP_Enum<"OnMinScale", "at the scale floor: #amp.on_min_scale<error | warn>", [
  I32EnumAttrCase<"error", 0>, I32EnumAttrCase<"warn", 1>]>;
def AMP_OnMinScaleAttr : AMP_EnumAttr<AMP_OnMinScale, "on_min_scale">;

#endif // AMP_DIALECT_AMP_IR_AMPENUMS_TD
