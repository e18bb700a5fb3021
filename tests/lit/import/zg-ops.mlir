// RUN: zplan-opt %s --split-input-file | zplan-opt --split-input-file | FileCheck %s

// Tests that every kind of zg op parses, verifies and prints back.
// CHECK-LABEL: func.func @ops
// CHECK: zg.weight {file = "w.bin", length = 512 : i64, name = "w", offset = 0 : i64}
// CHECK: zg.linear {{.*}}trans_w = true
// CHECK: zg.layer_norm
// CHECK: zg.rms_norm
// CHECK: zg.gelu {{.*}}"tanh"
// CHECK: zg.attention {{.*}}causal = true
// CHECK: zg.split
// CHECK: zg.slice
// CHECK: zg.gather
// CHECK: zg.reduce_mean
func.func @ops(%x: tensor<2x4x8xf32>, %ids: tensor<2x4xi64>, %q: tensor<1x4x4x2xf32>, %kv: tensor<1x2x4x2xf32>) -> tensor<2x4x16xf32> {
  %w = zg.weight {file = "w.bin", length = 512 : i64, name = "w", offset = 0 : i64} : () -> tensor<16x8xf32>
  %g = zg.weight {file = "", length = 32 : i64, name = "g", offset = 0 : i64, value = dense<1.0> : tensor<8xf32>} : () -> tensor<8xf32>
  %l = zg.linear %x, %w {trans_w = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %n = zg.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %r = zg.rms_norm %n, %g {epsilon = 1.0e-6 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %ge = zg.gelu %r {approximate = "tanh"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %a = zg.attention %q, %kv, %kv {causal = true, scale = 0.5 : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> tensor<1x4x4x2xf32>
  %s:2 = zg.split %ge {axis = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x5xf32>)
  %sl = zg.slice %ge {starts = array<i64: 1, 0, 7>, steps = array<i64: 1, 2, -1>} : (tensor<2x4x8xf32>) -> tensor<1x2x8xf32>
  %ga = zg.gather %ge, %ids {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<2x2x4x8xf32>
  %m = zg.reduce_mean %ge {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x4x8xf32>) -> tensor<4xf32>
  return %l : tensor<2x4x16xf32>
}
