// RUN: zplan-opt %s --split-input-file --zplan-fold-transpose | FileCheck %s

// Tests that transposes of the last two dims of either operand become the
// product's trans_a / trans_b, and the transposes, now unused, go.
// CHECK-LABEL: func.func @operands
// CHECK-NOT: zg.transpose
// CHECK: %[[W:.*]] = zg.matmul %arg0, %arg1 {trans_a = true} : (tensor<8x4xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
// CHECK: %[[D:.*]] = zg.matmul %arg1, %arg2 {trans_b = true} : (tensor<8x6xbf16>, tensor<3x6xbf16>) -> tensor<8x3xbf16>
// CHECK-NOT: zg.transpose
// CHECK: return %[[W]], %[[D]]
func.func @operands(%x: tensor<8x4xbf16>, %g: tensor<8x6xbf16>, %v: tensor<3x6xbf16>) -> (tensor<4x6xbf16>, tensor<8x3xbf16>) {
  %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xbf16>) -> tensor<4x8xbf16>
  %w = zg.matmul %t, %g : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
  %u = zg.transpose %v {perm = array<i64: 1, 0>} : (tensor<3x6xbf16>) -> tensor<6x3xbf16>
  %d = zg.matmul %g, %u : (tensor<8x6xbf16>, tensor<6x3xbf16>) -> tensor<8x3xbf16>
  return %w, %d : tensor<4x6xbf16>, tensor<8x3xbf16>
}

// -----

// Tests that a transpose of a product's result that is its only reader
// becomes the product of the swapped operands, both flags flipped:
// (A^T B)^T = B^T A.
// CHECK-LABEL: func.func @result
// CHECK: %[[P:.*]] = zg.matmul %arg1, %arg0 {trans_a = true} : (tensor<8x6xf32>, tensor<8x4xf32>) -> tensor<6x4xf32>
// CHECK-NOT: zg.transpose
// CHECK: return %[[P]]
func.func @result(%x: tensor<8x4xf32>, %g: tensor<8x6xf32>) -> tensor<6x4xf32> {
  %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %w = zg.matmul %t, %g : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %r = zg.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  return %r : tensor<6x4xf32>
}

// -----

// Tests that the pass leaves alone: a transpose with another reader (kept
// for it, while the product still reads through it), a permutation that
// moves a batch dim, a product whose result has a second reader, and a
// rank-1 operand.
// CHECK-LABEL: func.func @not_folded
// CHECK: %[[T:.*]] = zg.transpose %arg0
// CHECK: zg.matmul %arg0, %arg1 {trans_a = true}
// CHECK: %[[B:.*]] = zg.transpose %arg2 {perm = array<i64: 1, 0, 2>}
// CHECK: zg.matmul %[[B]], %arg3 :
// CHECK: %[[M:.*]] = zg.matmul %arg1, %arg4 :
// CHECK: zg.transpose %[[M]]
// CHECK: zg.matmul %arg5, %arg1 :
func.func @not_folded(%x: tensor<8x4xf32>, %g: tensor<8x6xf32>, %b: tensor<2x3x4xf32>, %c: tensor<4x5xf32>, %h: tensor<6x2xf32>, %vec: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x6xf32>, tensor<3x2x5xf32>, tensor<8x2xf32>, tensor<2x8xf32>, tensor<6xf32>) {
  %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %w = zg.matmul %t, %g : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %bt = zg.transpose %b {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %bm = zg.matmul %bt, %c : (tensor<3x2x4xf32>, tensor<4x5xf32>) -> tensor<3x2x5xf32>
  %m = zg.matmul %g, %h : (tensor<8x6xf32>, tensor<6x2xf32>) -> tensor<8x2xf32>
  %mt = zg.transpose %m {perm = array<i64: 1, 0>} : (tensor<8x2xf32>) -> tensor<2x8xf32>
  %v = zg.matmul %vec, %g : (tensor<8xf32>, tensor<8x6xf32>) -> tensor<6xf32>
  return %t, %w, %bm, %m, %mt, %v : tensor<4x8xf32>, tensor<4x6xf32>, tensor<3x2x5xf32>, tensor<8x2xf32>, tensor<2x8xf32>, tensor<6xf32>
}

