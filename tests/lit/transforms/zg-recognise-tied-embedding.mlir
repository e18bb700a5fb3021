// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-tied-embedding))' | FileCheck %s

// Tests that a weight used as embedding table and as linear weight is marked
// zg.tied.
// CHECK-LABEL: func.func @tied
// CHECK: zg.weight {{.*}}zg.tied
func.func @tied(%ids: tensor<2x4xi64>) -> tensor<2x4x32xf32> {
  %w = zg.weight {file = "w.bin", length = 1024 : i64, name = "E", offset = 0 : i64} : () -> tensor<32x8xf32>
  %e = zg.embedding %w, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = zg.linear %e, %w {trans_w = true} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  return %l : tensor<2x4x32xf32>
}

// -----

// Tests that separate embedding and head weights are not marked.
// CHECK-LABEL: func.func @untied
// CHECK-NOT: zg.tied
func.func @untied(%ids: tensor<2x4xi64>) -> tensor<2x4x32xf32> {
  %w = zg.weight {file = "w.bin", length = 1024 : i64, name = "E", offset = 0 : i64} : () -> tensor<32x8xf32>
  %h = zg.weight {file = "w.bin", length = 1024 : i64, name = "H", offset = 1024 : i64} : () -> tensor<32x8xf32>
  %e = zg.embedding %w, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = zg.linear %e, %h {trans_w = true} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  return %l : tensor<2x4x32xf32>
}
