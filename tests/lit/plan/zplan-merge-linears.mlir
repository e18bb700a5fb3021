// RUN: zplan-opt --split-input-file --zplan-merge-linears %s | FileCheck %s

// Tests that llama's q / k / v projections (one input, [K, N] weights)
// become one product over a [64, 128] weight whose parts sit at columns 0,
// 64 and 96, followed by one slice per former result.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[W:.*]] = zg.weight {file = "m.data", length = 32768 : i64, name = "q+k+v", offset = 0 : i64,
// CHECK-SAME: zd.parts = [{file = "m.data", length = 16384 : i64, name = "q", offset = 0 : i64, pieces = {{\[\[}}{dst_start = array<i64: 0, 0>, size = array<i64: 64, 64>, src_start = array<i64: 0, 0>}]], source_shape = array<i64: 64, 64>},
// CHECK-SAME: {file = "m.data", length = 8192 : i64, name = "k", offset = 16384 : i64, pieces = {{\[\[}}{dst_start = array<i64: 0, 64>, size = array<i64: 64, 32>, src_start = array<i64: 0, 0>}]], source_shape = array<i64: 64, 32>},
// CHECK-SAME: {file = "m.data", length = 8192 : i64, name = "v", offset = 24576 : i64, pieces = {{\[\[}}{dst_start = array<i64: 0, 96>, size = array<i64: 64, 32>, src_start = array<i64: 0, 0>}]], source_shape = array<i64: 64, 32>}]} : () -> tensor<64x128xf32>
// CHECK-NOT: zg.weight
// CHECK: %[[Y:.*]] = zg.linear %arg0, %[[W]] : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
// CHECK-NEXT: %[[Q:.*]] = zg.slice %[[Y]] {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x128xf32>) -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[K:.*]] = zg.slice %[[Y]] {starts = array<i64: 0, 0, 64>, {{.*}} -> tensor<2x8x32xf32>
// CHECK-NEXT: %[[V:.*]] = zg.slice %[[Y]] {starts = array<i64: 0, 0, 96>, {{.*}} -> tensor<2x8x32xf32>
// CHECK-NOT: zg.linear
// CHECK: return %[[Q]], %[[K]], %[[V]]
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @qkv(%x: tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %wq = zg.weight {name = "q", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %wk = zg.weight {name = "k", file = "m.data", offset = 16384 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %wv = zg.weight {name = "v", file = "m.data", offset = 24576 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %q = zg.linear %x, %wq : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %k = zg.linear %x, %wk : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
  %v = zg.linear %x, %wv : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
  return %q, %k, %v : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
}
}

// -----

// Tests the merge of tp-local weights ([N, K] layout, trans_w): each rank's
// merged weight is [its gate rows | its up rows]; every rank's pieces of the
// up projection move down by the gate's 86 local rows.
// CHECK-LABEL: func.func @gate_up_tp2
// CHECK: zg.weight {file = "m.data", length = 44032 : i64, name = "gate+up", offset = 0 : i64,
// CHECK-SAME: name = "gate", offset = 0 : i64, pieces = {{\[\[}}{dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>, src_start = array<i64: 86, 0>}]], source_shape = array<i64: 172, 64>}
// CHECK-SAME: name = "up", offset = 44032 : i64, pieces = {{\[\[}}{dst_start = array<i64: 86, 0>, size = array<i64: 86, 64>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 86, 0>, size = array<i64: 86, 64>, src_start = array<i64: 86, 0>}]], source_shape = array<i64: 172, 64>}]} : () -> tensor<172x64xf32>
// CHECK: zg.linear %arg0, %{{.*}} {trans_w = true} : (tensor<4x64xf32>, tensor<172x64xf32>) -> tensor<4x172xf32>
// CHECK: zg.slice {{.*}} -> tensor<4x86xf32>
// CHECK: zg.slice {{.*}} -> tensor<4x86xf32>
// CHECK: zg.silu
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @gate_up_tp2(%x: tensor<4x64xf32>) -> tensor<4x86xf32> {
  %wg = zg.weight {name = "gate", file = "m.data", offset = 0 : i64, length = 44032 : i64, zd.source_shape = array<i64: 172, 64>, zd.pieces = [[{src_start = array<i64: 0, 0>, dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>}], [{src_start = array<i64: 86, 0>, dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>}]]} : () -> tensor<86x64xf32>
  %wu = zg.weight {name = "up", file = "m.data", offset = 44032 : i64, length = 44032 : i64, zd.source_shape = array<i64: 172, 64>, zd.pieces = [[{src_start = array<i64: 0, 0>, dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>}], [{src_start = array<i64: 86, 0>, dst_start = array<i64: 0, 0>, size = array<i64: 86, 64>}]]} : () -> tensor<86x64xf32>
  %g = zg.linear %x, %wg {trans_w = true} : (tensor<4x64xf32>, tensor<86x64xf32>) -> tensor<4x86xf32>
  %u = zg.linear %x, %wu {trans_w = true} : (tensor<4x64xf32>, tensor<86x64xf32>) -> tensor<4x86xf32>
  %s = zg.silu %g : (tensor<4x86xf32>) -> tensor<4x86xf32>
  %y = zg.mul %s, %u : (tensor<4x86xf32>, tensor<4x86xf32>) -> tensor<4x86xf32>
  return %y : tensor<4x86xf32>
}
}

// -----

// Tests that the pass does not fire for linears of different inputs, a
// linear with a bias, a weight with another user, different trans_w, or
// an inline weight.
// CHECK-LABEL: func.func @not_merged
// CHECK-NOT: zd.parts
// CHECK-COUNT-6: zg.linear
// CHECK-NOT: zg.slice
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @not_merged(%x: tensor<2x64xf32>, %z: tensor<2x64xf32>) -> (tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<64x32xf32>) {
  %w1 = zg.weight {name = "a", file = "m.data", offset = 0 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %w2 = zg.weight {name = "b", file = "m.data", offset = 8192 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %w3 = zg.weight {name = "c", file = "m.data", offset = 16384 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %b3 = zg.weight {name = "c.b", file = "m.data", offset = 24576 : i64, length = 128 : i64} : () -> tensor<32xf32>
  %w4 = zg.weight {name = "d", file = "m.data", offset = 32768 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %w5 = zg.weight {name = "e", file = "m.data", offset = 40960 : i64, length = 8192 : i64} : () -> tensor<32x64xf32>
  %w6 = zg.weight {name = "f", file = "", offset = 0 : i64, length = 8192 : i64, value = dense<1.0> : tensor<64x32xf32>} : () -> tensor<64x32xf32>
  %y1 = zg.linear %x, %w1 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  %y2 = zg.linear %z, %w2 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  %y3 = zg.linear %z, %w3, %b3 : (tensor<2x64xf32>, tensor<64x32xf32>, tensor<32xf32>) -> tensor<2x32xf32>
  %y4 = zg.linear %x, %w4 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  %y5 = zg.linear %z, %w5 {trans_w = true} : (tensor<2x64xf32>, tensor<32x64xf32>) -> tensor<2x32xf32>
  %y6 = zg.linear %z, %w6 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  return %y1, %y2, %y3, %y4, %y5, %y6, %w4 : tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, tensor<64x32xf32>
}
}

// -----

// Tests that a training module keeps one tensor per parameter.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: zd.parts
// CHECK-COUNT-2: zg.linear
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @train_step(%x: tensor<2x64xf32>, %lr: tensor<f32>, %step: tensor<i64>, %gs: tensor<f32>) -> (tensor<2x32xf32>, tensor<2x32xf32>) {
  %w1 = zg.weight {name = "a", file = "m.data", offset = 0 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %w2 = zg.weight {name = "b", file = "m.data", offset = 8192 : i64, length = 8192 : i64} : () -> tensor<64x32xf32>
  %m = zg.state {name = "a.exp_avg", kind = "moment1", of = "a", init = "zeros"} : () -> tensor<64x32xf32>
  %v = zg.state {name = "a.exp_avg_sq", kind = "moment2", of = "a", init = "zeros"} : () -> tensor<64x32xf32>
  %y1 = zg.linear %x, %w1 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  %y2 = zg.linear %x, %w2 : (tensor<2x64xf32>, tensor<64x32xf32>) -> tensor<2x32xf32>
  zg.adamw %w1, %m, %m, %v, %lr, %step, %gs {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %y1, %y2 : tensor<2x32xf32>, tensor<2x32xf32>
}
}
