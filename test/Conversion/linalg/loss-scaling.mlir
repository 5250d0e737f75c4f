// amp-lower-to-linalg, loss scaling and optimizers: no control flow, a
// skipped step is a select on found_inf.
// RUN: amp-opt %s --amp-lower-to-linalg=state-init=false | FileCheck %s

// CHECK-LABEL: func.func @unscale
func.func @unscale(%g0: tensor<4x3xf16>, %g1: tensor<5xf32>, %s: tensor<f32>) -> (tensor<4x3xf32>, tensor<5xf32>, tensor<i1>) {
  // inv = f32(1 / f64(scale)).
  // CHECK: arith.extf %{{.+}} : f32 to f64
  // CHECK: arith.divf %{{.+}}, %{{.+}} : f64
  // CHECK: arith.truncf %{{.+}} : f64 to f32
  // Each gradient times inv, and whether any value is inf / NaN: |g| >= inf
  // unordered, or-reduced over every element.
  // CHECK: arith.mulf
  // CHECK: iterator_types = ["reduction", "reduction"]
  // CHECK: math.absf
  // CHECK: arith.cmpf uge
  // CHECK: arith.ori
  // CHECK: arith.ori
  %u:2, %f = amp.unscale_and_check %g0, %g1 scale %s : tensor<4x3xf16>, tensor<5xf32> -> tensor<4x3xf32>, tensor<5xf32>
  return %u#0, %u#1, %f : tensor<4x3xf32>, tensor<5xf32>, tensor<i1>
}

// CHECK-LABEL: func.func @update_scale
func.func @update_scale(%s: tensor<f32>, %t: tensor<i64>, %h: tensor<i64>, %f: tensor<i1>) -> (tensor<f32>, tensor<i64>, tensor<i64>) {
  // One 0-d generic: backoff (x 0.5) on found_inf, growth (x 2, if finite)
  // when the tracker reaches the interval (3), else tracker + 1.
  // CHECK: linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}, #{{.+}}, #{{.+}}, #{{.+}}, #{{.+}}, #{{.+}}], iterator_types = []}
  // CHECK-DAG: arith.cmpi eq, %{{.+}}, %c3_i64
  // CHECK-DAG: arith.mulf %{{.+}}, %cst{{.*}} : f32
  // CHECK: arith.select %{{.+}}, %{{.+}}, %{{.+}} : f32
  // CHECK: linalg.yield %{{.+}}, %{{.+}}, %{{.+}} : f32, i64, i64
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %h found_inf %f {growth_interval = 3 : i64}
  return %ns, %nt, %nh : tensor<f32>, tensor<i64>, tensor<i64>
}

// CHECK-LABEL: func.func @sgd
func.func @sgd(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %step: tensor<i64>, %f: tensor<i1>) -> (tensor<8xf32>, tensor<8xf32>, tensor<i64>) {
  // Momentum: buf = g at step 0, else m * buf + (1 - dampening) * g; the
  // parameter and the buffer kept bit for bit on found_inf.
  // CHECK: linalg.generic {{.+}} outs(%{{.+}}, %{{.+}} : tensor<8xf32>, tensor<8xf32>)
  // CHECK: ^bb0(%[[P:[a-z0-9_]+]]: f32, %[[G:[a-z0-9_]+]]: f32, %[[S:[a-z0-9_]+]]: i64, %[[F:[a-z0-9_]+]]: i1, %[[B:[a-z0-9_]+]]: f32,
  // CHECK: arith.cmpi eq, %[[S]]
  // CHECK: arith.select %[[F]], %[[P]], %{{.+}} : f32
  // CHECK: arith.select %[[F]], %[[B]], %{{.+}} : f32
  %np, %nb = amp.sgd_update %p, %g momentum_buf %b : tensor<8xf32> step %step found_inf %f {lr = 0.1 : f32, momentum = 0.9 : f32} : tensor<8xf32>, tensor<8xf32>
  // CHECK: arith.addi
  // CHECK: arith.select
  %ns = amp.step_count %step found_inf %f
  return %np, %nb, %ns : tensor<8xf32>, tensor<8xf32>, tensor<i64>
}

// CHECK-LABEL: func.func @adam
func.func @adam(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %step: tensor<i64>, %f: tensor<i1>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  // The bias corrections from the step counter in f64 (beta^t by squaring:
  // no libm), then the element-wise update.
  // CHECK: arith.andi %{{.+}}, %{{.+}} : i64
  // CHECK: arith.mulf %{{.+}}, %{{.+}} : f64
  // CHECK: math.sqrt %{{.+}} : f64
  // CHECK: linalg.generic
  // CHECK: math.sqrt %{{.+}} : f32
  // CHECK: linalg.yield %{{.+}}, %{{.+}}, %{{.+}} : f32, f32, f32
  %np, %nm, %nv = amp.adam_update %p, %g, %m, %v step %step found_inf %f {lr = 1.0e-03 : f32, weight_decay = 1.0e-02 : f32, decoupled = true} : tensor<8xf32>
  return %np, %nm, %nv : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// CHECK-LABEL: func.func @clip
func.func @clip(%g: tensor<8xf32>, %f: tensor<i1>) -> (tensor<8xf32>, tensor<f32>) {
  // CHECK: arith.mulf %{{.+}}, %{{.+}} : f64
  // CHECK: math.sqrt %{{.+}} : f64
  // CHECK: arith.select
  %c, %n = amp.clip_grad_norm %g found_inf %f {max_norm = 1.5 : f32} : tensor<8xf32> -> tensor<8xf32>
  return %c, %n : tensor<8xf32>, tensor<f32>
}
