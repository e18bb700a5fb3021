// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-layer-norm))' | FileCheck %s

// Tests that the decomposed layer norm with scale and bias becomes one
// zg.layer_norm.
// CHECK-LABEL: func.func @layer_norm
// CHECK-DAG: %[[G:.*]] = zg.weight {{.*}}name = "g"
// CHECK-DAG: %[[B:.*]] = zg.weight {{.*}}name = "b"
// CHECK: %[[L:.*]] = zg.layer_norm %arg0, %[[G]], %[[B]] {axis = 1 : i64, epsilon = 9.99999974{{.*}}E-6 : f64}
// CHECK-NEXT: return %[[L]]
func.func @layer_norm(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %g = zg.weight {file = "w.bin", length = 32 : i64, name = "g", offset = 0 : i64} : () -> tensor<8xf32>
  %b = zg.weight {file = "w.bin", length = 32 : i64, name = "b", offset = 32 : i64} : () -> tensor<8xf32>
  %two = zg.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = zg.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %mu = zg.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = zg.sub %x, %mu : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %d2 = zg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = zg.reduce_mean %d2 {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = zg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %sd = zg.sqrt %ve : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = zg.div %d, %sd : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %ng = zg.mul %n, %g : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = zg.add %ng, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests the reciprocal form without scale and bias: the scale is a constant 1.
// CHECK-LABEL: func.func @layer_norm_plain
// CHECK: %[[ONE:.*]] = zg.constant {value = dense<1.000000e+00> : tensor<8xf32>}
// CHECK: zg.layer_norm %arg0, %[[ONE]] {axis = 1 : i64
func.func @layer_norm_plain(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %eps = zg.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %mu = zg.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = zg.sub %x, %mu : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %d2 = zg.mul %d, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %v = zg.reduce_mean %d2 {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = zg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %sd = zg.sqrt %ve : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = zg.reciprocal %sd : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %y = zg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a centring by another value's mean is not a layer norm.
// CHECK-LABEL: func.func @not_layer_norm
// CHECK-NOT: zg.layer_norm
func.func @not_layer_norm(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %eps = zg.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %mu = zg.reduce_mean %z {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = zg.sub %x, %mu : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %d2 = zg.mul %d, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %v = zg.reduce_mean %d2 {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = zg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %sd = zg.sqrt %ve : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %y = zg.div %d, %sd : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
