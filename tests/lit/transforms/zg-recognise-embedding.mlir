// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-embedding))' | FileCheck %s

// Tests that a gather of a 2-D weight along axis 0 becomes zg.embedding.
// CHECK-LABEL: func.func @embedding
// CHECK: %[[W:.*]] = zg.weight
// CHECK-NEXT: %[[E:.*]] = zg.embedding %[[W]], %arg0 : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[E]]
func.func @embedding(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
  %w = zg.weight {file = "w.bin", length = 1024 : i64, name = "E", offset = 0 : i64} : () -> tensor<32x8xf32>
  %e = zg.gather %w, %ids {axis = 0 : i64} : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// -----

// Tests that a gather along axis 1, or of an activation, stays a gather.
// CHECK-LABEL: func.func @not_embedding
// CHECK-NOT: zg.embedding
// CHECK: zg.gather
// CHECK: zg.gather
func.func @not_embedding(%ids: tensor<2xi64>, %x: tensor<32x8xf32>) -> (tensor<32x2xf32>, tensor<2x8xf32>) {
  %w = zg.weight {file = "w.bin", length = 1024 : i64, name = "E", offset = 0 : i64} : () -> tensor<32x8xf32>
  %a = zg.gather %w, %ids {axis = 1 : i64} : (tensor<32x8xf32>, tensor<2xi64>) -> tensor<32x2xf32>
  %b = zg.gather %x, %ids {axis = 0 : i64} : (tensor<32x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  return %a, %b : tensor<32x2xf32>, tensor<2x8xf32>
}
