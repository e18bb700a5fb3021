// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-linear))' | FileCheck %s

// Tests that matmul by a [K, N] weight plus a [N] bias becomes one zg.linear.
// CHECK-LABEL: func.func @linear_bias
// CHECK-DAG: %[[W:.*]] = zg.weight {{.*}}name = "w"
// CHECK-DAG: %[[B:.*]] = zg.weight {{.*}}name = "b"
// CHECK: %[[L:.*]] = zg.linear %arg0, %[[W]], %[[B]] : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: return %[[L]]
func.func @linear_bias(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = zg.weight {file = "w.bin", length = 512 : i64, name = "w", offset = 0 : i64} : () -> tensor<8x16xf32>
  %b = zg.weight {file = "w.bin", length = 64 : i64, name = "b", offset = 512 : i64} : () -> tensor<16xf32>
  %m = zg.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %y = zg.add %b, %m : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// Tests that a transposed [N, K] weight gives trans_w and that a scalar
// factor becomes alpha.
// CHECK-LABEL: func.func @linear_transposed
// CHECK: %[[L:.*]] = zg.linear %arg0, %{{.*}} {alpha = 5.000000e-01 : f64, trans_w = true}
// CHECK-NEXT: return %[[L]]
func.func @linear_transposed(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %w = zg.weight {file = "w.bin", length = 512 : i64, name = "w", offset = 0 : i64} : () -> tensor<16x8xf32>
  %h = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %t = zg.transpose %w {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %m = zg.matmul %x, %t : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = zg.mul %m, %h : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests that the reshapes of the Gemm form around 3-D activations fold away.
// CHECK-LABEL: func.func @linear_gemm_reshapes
// CHECK-NOT: zg.reshape
// CHECK: %[[L:.*]] = zg.linear %arg0, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: return %[[L]]
func.func @linear_gemm_reshapes(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = zg.weight {file = "w.bin", length = 512 : i64, name = "w", offset = 0 : i64} : () -> tensor<8x16xf32>
  %f = zg.reshape %x : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %m = zg.matmul %f, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = zg.reshape %m : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// Tests that a product of two activations, and a bias after alpha, stay as
// they are.
// CHECK-LABEL: func.func @not_linear
// CHECK: zg.matmul %arg0, %arg1
// CHECK-NOT: zg.linear
func.func @not_linear(%x: tensor<4x8xf32>, %z: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %m = zg.matmul %x, %z : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %m : tensor<4x16xf32>
}
