// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-softmax))' | FileCheck %s

// Tests that exp(x - max) / sum(exp(x - max)) becomes zg.softmax.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT: %[[S:.*]] = zg.softmax %arg0 {axis = 1 : i64}
// CHECK-NEXT: return %[[S]]
func.func @softmax(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %m = zg.reduce_max %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = zg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %e = zg.exp %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = zg.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %y = zg.div %e, %s : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that the form without the max subtraction matches too.
// CHECK-LABEL: func.func @softmax_plain
// CHECK-NEXT: zg.softmax %arg0 {axis = 0 : i64}
func.func @softmax_plain(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %e = zg.exp %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = zg.reduce_sum %e {axes = array<i64: 0>, keepdims = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %y = zg.div %e, %s : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a sum over another value's exponential is not a softmax.
// CHECK-LABEL: func.func @not_softmax
// CHECK-NOT: zg.softmax
func.func @not_softmax(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %e = zg.exp %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %e2 = zg.exp %z : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = zg.reduce_sum %e2 {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %y = zg.div %e, %s : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
