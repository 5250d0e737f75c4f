// Every verifier rule of the amp dialect, one per split: the error names the op
// and the broken rule. Rules checked by shape inference also report the
// interface's generic "failed to infer returned types" after the reason.
// RUN: amp-opt %s -split-input-file -verify-diagnostics
func.func @case0(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{shapes of 'lhs' [2, 3] and 'rhs' [4] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}


// -----

func.func @case1(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @+2 {{element types of 'lhs' ('f32') and 'rhs' ('f16') must be equal}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.sub %a, %b : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x3xf32>
  return
}


// -----

func.func @case2(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.mul %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}


// -----

func.func @case3(%a: tensor<5xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{shapes of 'lhs' [5] and 'rhs' [4] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.div %a, %b : (tensor<5xf32>, tensor<4xf32>) -> tensor<5xf32>
  return
}


// -----

func.func @case4(%a: tensor<3xf32>, %b: tensor<2xi64>) {
  // expected-error @+2 {{shapes of 'lhs' [3] and 'rhs' [2] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.pow %a, %b : (tensor<3xf32>, tensor<2xi64>) -> tensor<3xf32>
  return
}


// -----

func.func @case5(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{contracted dims differ: lhs [4, 3] has K = 3, rhs [4, 5] has K = 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.matmul %a, %b : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  return
}


// -----

func.func @case6(%a: tensor<f32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{operands must have rank >= 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.matmul %a, %b : (tensor<f32>, tensor<4x5xf32>) -> tensor<5xf32>
  return
}


// -----

func.func @case7(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) {
  // expected-error @+2 {{shapes of 'lhs batch' [2] and 'rhs batch' [3] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x5xf32>) -> tensor<2x4x5xf32>
  return
}


// -----

func.func @case8(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+2 {{contracted dims differ: op(a) is [3, 4], op(b) is [3, 5] (trans_a = 1, trans_b = 0)}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.gemm %a, %b {trans_a = true} : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  return
}


// -----

func.func @case9(%a: tensor<2x4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+2 {{a and b must be 2-D}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.gemm %a, %b : (tensor<2x4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  return
}


// -----

func.func @case10(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>, %c: tensor<4x3xf32>) {
  // expected-error @+2 {{c [4, 3] cannot be broadcast to the result [4, 5]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.gemm %a, %b, %c : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x3xf32>) -> tensor<4x5xf32>
  return
}


// -----

func.func @case11(%x: tensor<1x3x8x8xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+2 {{input channels 3 must equal w's dim 1 (4) times group (1)}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w : (tensor<1x3x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x6x6xf32>
  return
}


// -----

func.func @case12(%x: tensor<1x4x8x8xf32>, %w: tensor<6x1x3x3xf32>) {
  // expected-error @+2 {{output channels 6 must be divisible by group 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w {group = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<6x1x3x3xf32>) -> tensor<1x6x6x6xf32>
  return
}


// -----

func.func @case13(%x: tensor<1x3x8x8xf32>, %w: tensor<6x3x3x3xf32>) {
  // expected-error @+2 {{strides has 1 entries, expected 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w {strides = array<i64: 2>} : (tensor<1x3x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<1x6x3x3xf32>
  return
}


// -----

func.func @case14(%x: tensor<1x3x8x8xf32>, %w: tensor<6x3x3x3xf32>) {
  // expected-error @+1 {{attribute 'auto_pad' failed to satisfy constraint: ONNX auto_pad}}
  %r = amp.conv %x, %w {auto_pad = "SAME"} : (tensor<1x3x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<1x6x8x8xf32>
  return
}


// -----

func.func @case15(%x: tensor<1x3x2x8xf32>, %w: tensor<6x3x3x3xf32>) {
  // expected-error @+2 {{spatial dim 0 (2, 2 with padding) is smaller than the window (3)}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w : (tensor<1x3x2x8xf32>, tensor<6x3x3x3xf32>) -> tensor<1x6x1x6xf32>
  return
}


// -----

func.func @case16(%x: tensor<1x3x8x8xf32>, %w: tensor<6x3x3x3xf32>, %b: tensor<5xf32>) {
  // expected-error @+2 {{bias must be [M] = [6], got [5]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w, %b : (tensor<1x3x8x8xf32>, tensor<6x3x3x3xf32>, tensor<5xf32>) -> tensor<1x6x6x6xf32>
  return
}


// -----

func.func @case17(%x: tensor<1x3x8x8xf32>, %w: tensor<6x3x3x3xf32>) {
  // expected-error @+2 {{kernel_shape [5, 5] does not match w's spatial dims [3, 3]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv %x, %w {kernel_shape = array<i64: 5, 5>} : (tensor<1x3x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<1x6x6x6xf32>
  return
}


// -----

func.func @case18(%x: tensor<2x4x3xf32>, %s: tensor<4xf32>, %v: tensor<5xf32>) {
  // expected-error @+2 {{var must be [C] = [4], got [5]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:3 = amp.batch_norm %x, %s, %s, %s, %v : (tensor<2x4x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<5xf32>) -> (tensor<2x4x3xf32>, tensor<4xf32>, tensor<5xf32>)
  return
}


// -----

func.func @case19(%x: tensor<2x4x3xf32>, %s: tensor<4xf32>) {
  // expected-error @+2 {{momentum must be in [0, 1], got 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:3 = amp.batch_norm %x, %s, %s, %s, %s {momentum = 2.0 : f32} : (tensor<2x4x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}


// -----

func.func @case20(%x: tensor<2x64xf32>, %g: tensor<32xf32>) {
  // expected-error @+2 {{scale [32] does not broadcast to the normalized shape [64]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:3 = amp.layer_norm %x, %g : (tensor<2x64xf32>, tensor<32xf32>) -> (tensor<2x64xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}


// -----

func.func @case21(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2 (valid: [-2, 1])}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:3 = amp.layer_norm %x, %g {axis = 2 : i64} : (tensor<2x64xf32>, tensor<64xf32>) -> (tensor<2x64xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}


// -----

func.func @case22(%x: tensor<2x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+2 {{stash_type 0 is not supported}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:3 = amp.layer_norm %x, %g {stash_type = 0 : i64} : (tensor<2x64xf32>, tensor<64xf32>) -> (tensor<2x64xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}


// -----

func.func @case23(%x: tensor<1x3x8x8xf32>) {
  // expected-error @+2 {{kernel_shape has 1 entries but the input has 2 spatial dims}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:2 = amp.max_pool %x {kernel_shape = array<i64: 2>} : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
  return
}


// -----

func.func @case24(%x: tensor<1x3x8x8xf32>) {
  // expected-error @+2 {{storage_order must be 0 or 1, got 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:2 = amp.max_pool %x {kernel_shape = array<i64: 2, 2>, storage_order = 2 : i64} : (tensor<1x3x8x8xf32>) -> (tensor<1x3x7x7xf32>, tensor<1x3x7x7xi64>)
  return
}


// -----

func.func @case25(%x: tensor<1x3x8x8xf32>) {
  // expected-error @+2 {{pads must not be given with auto_pad SAME_UPPER}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.average_pool %x {kernel_shape = array<i64: 2, 2>, auto_pad = #amp.auto_pad<SAME_UPPER>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  return
}


// -----

func.func @case26(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{x must be [N, C, D1, ...] with at least one spatial dim, got [3, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.average_pool %x {kernel_shape = array<i64: 2>} : (tensor<3x8xf32>) -> tensor<3x4xf32>
  return
}


// -----

func.func @case27(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{x must be [N, C, D1, ...], got [3, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.global_average_pool %x : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return
}


// -----

func.func @case28(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{axis 3 is out of range for rank 2 (valid: [-2, 2])}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.flatten %x {axis = 3 : i64} : (tensor<3x8xf32>) -> tensor<24x1xf32>
  return
}


// -----

func.func @case29(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{cannot reshape [3, 8] (24 elements) to [5, -1]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.reshape %x {shape = array<i64: 5, -1>} : (tensor<3x8xf32>) -> tensor<5x5xf32>
  return
}


// -----

func.func @case30(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{shape [-1, -1] has more than one -1}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.reshape %x {shape = array<i64: -1, -1>} : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return
}


// -----

func.func @case31(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{perm [0, 0] is not a permutation of the 2 dims of [3, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.transpose %x {perm = array<i64: 0, 0>} : (tensor<3x8xf32>) -> tensor<3x3xf32>
  return
}


// -----

func.func @case32(%x: tensor<3x8xf32>, %y: tensor<3x9xf32>) {
  // expected-error @+2 {{input 1 [3, 9] differs from [3, 8] in dim 1, which is not the concat axis 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.concat %x, %y {axis = 0 : i64} : (tensor<3x8xf32>, tensor<3x9xf32>) -> tensor<6x8xf32>
  return
}


// -----

func.func @case33(%x: tensor<3x8xf32>, %y: tensor<3x8xf16>) {
  // expected-error @+2 {{input 1 has element type 'f16', input 0 has 'f32'}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.concat %x, %y {axis = 0 : i64} : (tensor<3x8xf32>, tensor<3x8xf16>) -> tensor<6x8xf32>
  return
}


// -----

func.func @case34(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{steps must not be 0 (axis 1)}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.slice %x {starts = array<i64: 0>, ends = array<i64: 4>, axes = array<i64: 1>, steps = array<i64: 0>} : (tensor<3x8xf32>) -> tensor<3x4xf32>
  return
}


// -----

func.func @case35(%x: tensor<3x8xf32>) {
  // expected-error @+2 {{axes name axis 1 more than once}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 4, 4>, axes = array<i64: 1, -1>} : (tensor<3x8xf32>) -> tensor<3x4xf32>
  return
}


// -----

func.func @case36(%x: tensor<1x8xf32>) {
  // expected-error @+2 {{cannot squeeze dim 1 of size 8 in [1, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.squeeze %x {axes = array<i64: 1>} : (tensor<1x8xf32>) -> tensor<1xf32>
  return
}


// -----

func.func @case37(%x: tensor<1x8xf32>) {
  // expected-error @+2 {{axes 3 is out of range for rank 3 (valid: [-3, 2])}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.unsqueeze %x {axes = array<i64: 3>} : (tensor<1x8xf32>) -> tensor<1x8x1xf32>
  return
}


// -----

func.func @case38(%x: tensor<10x8xf32>, %i: tensor<4xi64>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2 (valid: [-2, 1])}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.gather %x, %i {axis = 2 : i64} : (tensor<10x8xf32>, tensor<4xi64>) -> tensor<10x8x4xf32>
  return
}


// -----

func.func @case39(%x: tensor<3xf32>) {
  // expected-error @+2 {{shapes of 'input' [3] and 'shape' [2, 2] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.expand %x {shape = array<i64: 2, 2>} : (tensor<3xf32>) -> tensor<2x3xf32>
  return
}


// -----

func.func @case40(%c: tensor<3xi1>, %x: tensor<3xf32>, %y: tensor<3xf16>) {
  // expected-error @+2 {{element types of 'x' ('f32') and 'y' ('f16') must be equal}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.where %c, %x, %y : (tensor<3xi1>, tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}


// -----

func.func @case41(%x: tensor<3xf32>) {
  // expected-error @+2 {{ratio must be in [0, 1), got 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:2 = amp.dropout %x {ratio = 1.0 : f32} : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi1>)
  return
}


// -----

func.func @case42(%x: tensor<3x4xf32>) {
  // expected-error @+2 {{axes 2 is out of range for rank 2 (valid: [-2, 1])}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.reduce_sum %x {axes = array<i64: 2>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return
}


// -----

func.func @case43(%x: tensor<3x4xf32>) {
  // expected-error @+2 {{axes name axis 0 more than once}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.reduce_mean %x {axes = array<i64: 0, -2>} : (tensor<3x4xf32>) -> tensor<1x4xf32>
  return
}


// -----

func.func @case44(%x: tensor<3x4xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<3x1xf32>' are incompatible with return type(s) of operation 'tensor<3x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.reduce_max %x {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return
}


// -----

func.func @case45(%s: tensor<8x10xf32>, %y: tensor<8x1xi64>) {
  // expected-error @+2 {{'labels' must have rank 1 ([N, D...] for 'scores' [8, 10]), got [8, 1]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r:2 = amp.softmax_cross_entropy_loss %s, %y : (tensor<8x10xf32>, tensor<8x1xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  return
}


// -----

func.func @case46(%s: tensor<8x10xf32>, %y: tensor<8xi64>) {
  // expected-error @+2 {{expected ::mlir::amp::Reduction to be one of: none, sum, mean}}
  // expected-error @+1 {{failed to parse AMP_ReductionAttr parameter 'value'}}
  %r:2 = amp.softmax_cross_entropy_loss %s, %y {reduction = #amp.reduction<avg>} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  return
}


// -----

func.func @case47(%s: tensor<8x10xf32>, %y: tensor<8xi64>, %w: tensor<9xf32>) {
  // expected-error @+2 {{class weights must be [C] = [10], got 'tensor<9xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.nll_loss %s, %y, %w : (tensor<8x10xf32>, tensor<8xi64>, tensor<9xf32>) -> tensor<f32>
  return
}


// -----

func.func @case48(%s: tensor<8x10xf32>, %y: tensor<7xi64>) {
  // expected-error @+2 {{'target' shape [7] does not match [8] of 'input'}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.nll_loss %s, %y : (tensor<8x10xf32>, tensor<7xi64>) -> tensor<f32>
  return
}


// -----

func.func @unary_type(%y: tensor<3xi32>) {
  // expected-error @+1 {{'amp.exp' op operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<3xi32>'}}
  %r = "amp.exp"(%y) : (tensor<3xi32>) -> tensor<3xi32>
  return
}


// -----

func.func @unary_same_type(%x: tensor<3xf32>) {
  // expected-error @+1 {{'amp.relu' op requires the same type for all operands and results}}
  %r = "amp.relu"(%x) : (tensor<3xf32>) -> tensor<3xf16>
  return
}


// -----

func.func @softmax_axis(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'amp.softmax' op axis 2 is out of range for rank 2 (valid: [-2, 1])}}
  %r = amp.softmax %x {axis = 2 : i64} : tensor<3x4xf32>
  return
}


// -----

func.func @log_softmax_axis(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'amp.log_softmax' op axis -3 is out of range for rank 2 (valid: [-2, 1])}}
  %r = amp.log_softmax %x {axis = -3 : i64} : tensor<3x4xf32>
  return
}


// -----

func.func @gelu_mode(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'amp.gelu' op attribute 'approximate' failed to satisfy constraint: GELU approximation}}
  %r = amp.gelu %x {approximate = "fast"} : tensor<3x4xf32>
  return
}


// -----

func.func @cast_shape(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'amp.cast' op changes the shape: 'tensor<3x4xf32>' to 'tensor<4x3xf16>' (a cast changes only the element type)}}
  %r = amp.cast %x : tensor<3x4xf32> to tensor<4x3xf16>
  return
}


// -----

func.func @cast_type(%x: tensor<3x4xf64>) {
  // expected-error @+1 {{'amp.cast' op operand #0 must be ranked tensor of}}
  %r = amp.cast %x : tensor<3x4xf64> to tensor<3x4xf16>
  return
}


// -----

func.func @unranked(%x: tensor<*xf32>) {
  // expected-error @+1 {{'amp.sigmoid' op operand #0 must be ranked tensor}}
  %r = "amp.sigmoid"(%x) : (tensor<*xf32>) -> tensor<*xf32>
  return
}


// -----

func.func @identity_type(%x: tensor<3xf64>) {
  // expected-error @+1 {{'amp.identity' op operand #0 must be ranked tensor of}}
  %r = amp.identity %x : tensor<3xf64>
  return
}

// -----

func.func @sqrt_int(%x: tensor<3xi32>) {
  // expected-error @+1 {{'amp.sqrt' op operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<3xi32>'}}
  %r = "amp.sqrt"(%x) : (tensor<3xi32>) -> tensor<3xi32>
  return
}

// -----

func.func @log_result_type(%x: tensor<3xf32>) {
  // expected-error @+1 {{'amp.log' op requires the same type for all operands and results}}
  %r = "amp.log"(%x) : (tensor<3xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @erf_bool(%x: tensor<3xi1>) {
  // expected-error @+1 {{'amp.erf' op operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<3xi1>'}}
  %r = "amp.erf"(%x) : (tensor<3xi1>) -> tensor<3xi1>
  return
}

// -----

func.func @tanh_result_type(%x: tensor<3xbf16>) {
  // expected-error @+1 {{'amp.tanh' op requires the same type for all operands and results}}
  %r = "amp.tanh"(%x) : (tensor<3xbf16>) -> tensor<3xf16>
  return
}

// -----

func.func @leaky_relu_alpha_type(%x: tensor<3xf32>) {
  // expected-error @+1 {{'amp.leaky_relu' op attribute 'alpha' failed to satisfy constraint: 32-bit float attribute}}
  %r = "amp.leaky_relu"(%x) {alpha = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @gather_grad_rank(%i: tensor<4xi64>, %g: tensor<4x3x5xf32>) -> tensor<7x5xf32> {
  // expected-error @+1 {{do not agree for axis 0}}
  %0 = amp.gather_grad %i, %g {axis = 0 : i64, shape = array<i64: 7, 5>} : (tensor<4xi64>, tensor<4x3x5xf32>) -> tensor<7x5xf32>
  return %0 : tensor<7x5xf32>
}

// -----

func.func @reduce_max_grad_shape(%x: tensor<4x6xf32>, %y: tensor<4x2xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{y's dim 1 must be 1 or x's}}
  %0 = amp.reduce_max_grad %x, %y, %y : (tensor<4x6xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

func.func @micro_step_every(%m: tensor<i64>) -> tensor<i1> {
  // expected-error @+1 {{every must be >= 1}}
  %a, %n = amp.micro_step %m {every = 0 : i64}
  return %a : tensor<i1>
}


// -----

func.func @conv_transpose_channels(%x: tensor<1x3x4x4xf32>, %w: tensor<2x3x3x3xf32>) {
  // expected-error @+2 {{input channels 3 must equal w's dim 0 (2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv_transpose %x, %w : (tensor<1x3x4x4xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x6x6xf32>
  return
}


// -----

func.func @conv_transpose_output_padding(%x: tensor<1x2x4x4xf32>, %w: tensor<2x3x3x3xf32>) {
  // expected-error @+2 {{output_padding [1, 0] must be >= 0 and less than the stride [1, 1]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv_transpose %x, %w {output_padding = array<i64: 1, 0>} : (tensor<1x2x4x4xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x7x6xf32>
  return
}


// -----

func.func @conv_transpose_bias(%x: tensor<1x2x4x4xf32>, %w: tensor<2x3x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{bias must be [M] = [6], got [3]}}
  // expected-error @+1 {{failed to infer returned types}}
  %r = amp.conv_transpose %x, %w, %b {group = 2 : i64} : (tensor<1x2x4x4xf32>, tensor<2x3x3x3xf32>, tensor<3xf32>) -> tensor<1x6x6x6xf32>
  return
}
