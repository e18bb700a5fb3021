// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-silu))' | FileCheck %s

// Tests that x * sigmoid(x) becomes zg.silu, in either operand order.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[R:.*]] = zg.silu %arg0
// CHECK-NEXT: %[[R2:.*]] = zg.silu %arg0
// CHECK-NEXT: return %[[R]], %[[R2]]
func.func @silu(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = zg.sigmoid %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = zg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y2 = zg.mul %s, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %y2 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that the pass does not fire when the sigmoid is of another value.
// CHECK-LABEL: func.func @not_silu
// CHECK: zg.sigmoid %arg1
// CHECK: zg.mul
// CHECK-NOT: zg.silu
func.func @not_silu(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = zg.sigmoid %z : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = zg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
