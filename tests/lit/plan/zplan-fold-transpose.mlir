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


// -----

// Tests that the head split transposes of q, k and v and the merge transpose
// of the result fold into the attention's seq_major bits (gpt2's layer): the
// attention reads the [B, S, H, D] projections and writes [B, S, H, D], and
// no transpose is left.
// CHECK-LABEL: func.func @attention_all
// CHECK-NOT: zg.transpose
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = 15 : i64} : (tensor<2x16x4x8xbf16>, tensor<2x16x4x8xbf16>, tensor<2x16x4x8xbf16>) -> tensor<2x16x4x8xbf16>
// CHECK-NOT: zg.transpose
// CHECK: %[[R:.*]] = zg.reshape %[[A]] : (tensor<2x16x4x8xbf16>) -> tensor<2x16x32xbf16>
// CHECK: return %[[R]]
func.func @attention_all(%q: tensor<2x16x4x8xbf16>, %k: tensor<2x16x4x8xbf16>, %v: tensor<2x16x4x8xbf16>) -> tensor<2x16x32xbf16> {
  %qt = zg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xbf16>) -> tensor<2x4x16x8xbf16>
  %kt = zg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xbf16>) -> tensor<2x4x16x8xbf16>
  %vt = zg.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xbf16>) -> tensor<2x4x16x8xbf16>
  %a = zg.attention %qt, %kt, %vt {causal = true, scale = 0.125 : f64} : (tensor<2x4x16x8xbf16>, tensor<2x4x16x8xbf16>, tensor<2x4x16x8xbf16>) -> tensor<2x4x16x8xbf16>
  %m = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xbf16>) -> tensor<2x16x4x8xbf16>
  %r = zg.reshape %m : (tensor<2x16x4x8xbf16>) -> tensor<2x16x32xbf16>
  return %r : tensor<2x16x32xbf16>
}

// -----

// Tests llama's layer (grouped kv heads): q and k pass through the rotary
// embedding after their transposes, so only v's transpose and the merge fold
// (bits 4 and 8); the q and k transposes stay for the rotary ops.
// CHECK-LABEL: func.func @attention_rotary
// CHECK: %[[QT:.*]] = zg.transpose %arg0
// CHECK: %[[KT:.*]] = zg.transpose %arg1
// CHECK: %[[QR:.*]] = zg.mul %[[QT]], %arg3
// CHECK: %[[KR:.*]] = zg.mul %[[KT]], %arg4
// CHECK: %[[A:.*]] = zg.attention %[[QR]], %[[KR]], %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = 12 : i64} : (tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x16x2x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-NOT: zg.transpose
// CHECK: return %[[A]]
func.func @attention_rotary(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>, %v: tensor<2x16x2x8xf32>, %cq: tensor<1x1x16x8xf32>, %ck: tensor<1x1x16x8xf32>) -> tensor<2x16x4x8xf32> {
  %qt = zg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = zg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %vt = zg.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %qr = zg.mul %qt, %cq : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %kr = zg.mul %kt, %ck : (tensor<2x2x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x2x16x8xf32>
  %a = zg.attention %qr, %kr, %vt {causal = true, scale = 0.125 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>) -> tensor<2x4x16x8xf32>
  %m = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %m : tensor<2x16x4x8xf32>
}

// -----

// Tests what stays: the training forward's attention (with an lse, which
// zg.attention_grad pairs with head-major operands), a transpose with a
// second reader, a result with a second reader, and a permutation that is
// not the head swap.
// CHECK-LABEL: func.func @attention_not_folded
// CHECK: %[[QT:.*]] = zg.transpose %arg0 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %result, %lse = zg.attention %[[QT]], %[[QT]], %[[QT]] {causal = true, scale = 1.250000e-01 : f64} :
// CHECK: %[[B:.*]] = zg.attention %[[QT]], %[[QT]], %[[QT]] {causal = false, scale = 1.250000e-01 : f64} :
// CHECK: zg.transpose %[[B]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[P:.*]] = zg.transpose %arg0 {perm = array<i64: 0, 3, 1, 2>}
// CHECK: zg.attention %[[P]], %arg0, %arg0 {causal = false, scale = 1.250000e-01 : f64} :
func.func @attention_not_folded(%q: tensor<2x8x8x8xf32>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) {
  %qt = zg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %a:2 = zg.attention %qt, %qt, %qt {causal = true, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8xf32>)
  %b = zg.attention %qt, %qt, %qt {causal = false, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %bt = zg.transpose %b {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %p = zg.transpose %q {perm = array<i64: 0, 3, 1, 2>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %c = zg.attention %p, %q, %q {causal = false, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %a#0, %a#1, %b, %bt, %c : tensor<2x8x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>
}
