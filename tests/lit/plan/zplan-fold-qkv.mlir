// RUN: zplan-opt %s --split-input-file --zplan-fold-transpose | FileCheck %s

// Tests that a fused q/k/v projection's last-dim split, each piece reshaped
// [B, S, H * D] -> [B, S, H, D] and head-transposed for a forward attention,
// becomes the attention's packed operands: the attention reads the [B, S, 3HD]
// tensor at element offsets 0, 32 and 64 with a row stride of 96, and the
// split, reshapes and transposes go.
// CHECK-LABEL: func.func @fused_qkv
// CHECK-NOT: zg.split
// CHECK-NOT: zg.reshape
// CHECK-NOT: zg.transpose
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg0, %arg0 {causal = true, packed = array<i64: 0, 96, 4, 32, 96, 4, 64, 96, 4>, scale = 2.500000e-01 : f64, seq_major = 15 : i64} : (tensor<2x8x96xf32>, tensor<2x8x96xf32>, tensor<2x8x96xf32>) -> tensor<2x8x4x8xf32>
// CHECK: return %[[A]]
func.func @fused_qkv(%x: tensor<2x8x96xf32>) -> tensor<2x8x4x8xf32> {
  %s:3 = zg.split %x {axis = 2 : i64} : (tensor<2x8x96xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>)
  %kr = zg.reshape %s#1 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k = zg.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %vr = zg.reshape %s#2 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %v = zg.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %qr = zg.reshape %s#0 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %q = zg.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %a = zg.attention %q, %k, %v {causal = true, scale = 0.25 : f64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
  return %o : tensor<2x8x4x8xf32>
}

// -----

// Tests unit-step last-dim slices (the other export spelling) and grouped kv
// heads: q has 4 heads, k and v 2, packed at offsets 0, 32 and 48 of rows of
// 64.
// CHECK-LABEL: func.func @sliced_gqa
// CHECK-NOT: zg.slice
// CHECK: zg.attention %arg0, %arg0, %arg0 {causal = false, packed = array<i64: 0, 64, 4, 32, 64, 2, 48, 64, 2>, scale = 1.000000e+00 : f64, seq_major = 7 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x4x8x8xf32>
func.func @sliced_gqa(%x: tensor<1x8x64xf32>) -> tensor<1x4x8x8xf32> {
  %qs = zg.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<1x8x64xf32>) -> tensor<1x8x32xf32>
  %ks = zg.slice %x {starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : (tensor<1x8x64xf32>) -> tensor<1x8x16xf32>
  %vs = zg.slice %x {starts = array<i64: 0, 0, 48>, steps = array<i64: 1, 1, 1>} : (tensor<1x8x64xf32>) -> tensor<1x8x16xf32>
  %qr = zg.reshape %qs : (tensor<1x8x32xf32>) -> tensor<1x8x4x8xf32>
  %kr = zg.reshape %ks : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
  %vr = zg.reshape %vs : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
  %q = zg.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x8xf32>) -> tensor<1x4x8x8xf32>
  %k = zg.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
  %v = zg.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
  %a = zg.attention %q, %k, %v {causal = false, scale = 1.0 : f64} : (tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %a : tensor<1x4x8x8xf32>
}

// -----

// Tests that a piece with another reader stays a copy: k's piece is also
// returned, so k reads its reshape of the split while q and v are packed, and
// the split stays for k's piece.
// CHECK-LABEL: func.func @other_reader
// CHECK: %[[S:.*]]:3 = zg.split %arg0
// CHECK: %[[K:.*]] = zg.reshape %[[S]]#1
// CHECK: zg.attention %arg0, %[[K]], %arg0 {{.*}}packed = array<i64: 0, 96, 4, 0, 0, 0, 64, 96, 4>, scale = 2.500000e-01 : f64, seq_major = 15 : i64}
// CHECK: return {{.*}}, %[[S]]#1
func.func @other_reader(%x: tensor<2x8x96xf32>) -> (tensor<2x8x4x8xf32>, tensor<2x8x32xf32>) {
  %s:3 = zg.split %x {axis = 2 : i64} : (tensor<2x8x96xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>)
  %qr = zg.reshape %s#0 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %q = zg.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kr = zg.reshape %s#1 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k = zg.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %vr = zg.reshape %s#2 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %v = zg.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %a = zg.attention %q, %k, %v {causal = true, scale = 0.25 : f64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
  return %o, %s#1 : tensor<2x8x4x8xf32>, tensor<2x8x32xf32>
}

// -----

// Tests that a split along a dim other than the last stays: the pieces are
// [B, S / 2, W] halves, not columns of each row, so q and k keep their
// (sequence-major) reshapes and no packed attribute appears.
// CHECK-LABEL: func.func @seq_split
// CHECK: zg.split %arg0 {axis = 1 : i64}
// CHECK-NOT: packed =
// CHECK: return
func.func @seq_split(%x: tensor<2x16x32xf32>) -> tensor<2x4x8x8xf32> {
  %s:2 = zg.split %x {axis = 1 : i64} : (tensor<2x16x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>)
  %qr = zg.reshape %s#0 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %q = zg.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kr = zg.reshape %s#1 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k = zg.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %a = zg.attention %q, %k, %k {causal = false, scale = 1.0 : f64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %a : tensor<2x4x8x8xf32>
}

// -----

// Tests that the training forward (with an lse) keeps its operands: its
// gradient op reads them.
// CHECK-LABEL: func.func @training
// CHECK: zg.split
// CHECK-NOT: packed =
// CHECK: return
func.func @training(%x: tensor<2x8x64xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8xf32>) {
  %s:2 = zg.split %x {axis = 2 : i64} : (tensor<2x8x64xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>)
  %qr = zg.reshape %s#0 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %q = zg.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kr = zg.reshape %s#1 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k = zg.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %a, %l = zg.attention %q, %k, %k {causal = true, scale = 1.0 : f64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8xf32>)
  return %a, %l : tensor<2x4x8x8xf32>, tensor<2x4x8xf32>
}
