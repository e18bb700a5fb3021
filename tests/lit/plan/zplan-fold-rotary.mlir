// RUN: zplan-opt %s --split-input-file --zplan-fold-transpose | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zplan-fold-transpose=rotary=false | FileCheck %s --check-prefix=OFF

// Tests llama's layer (grouped kv heads): the head split transposes of q and
// k fold through their rotary embeddings, which read and write [B, S, H, D]
// (seq_major, the tables still [1, 1, S, D]), and with v's transpose and the
// merge the attention gets every seq_major bit. No transpose is left.
// CHECK-LABEL: func.func @rotary_folds
// CHECK-NOT: zg.transpose
// CHECK: %[[QR:.*]] = zg.rotary %arg0, %arg3, %arg4 {seq_major = true} : (tensor<2x16x4x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK: %[[KR:.*]] = zg.rotary %arg1, %arg3, %arg4 {seq_major = true} : (tensor<2x16x2x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x16x2x8xf32>
// CHECK: %[[A:.*]] = zg.attention %[[QR]], %[[KR]], %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = 15 : i64} : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-NOT: zg.transpose
// CHECK: return %[[A]]
// Without the option (the cuda target's default for now), only v and the
// merge fold, as before.
// OFF-LABEL: func.func @rotary_folds
// OFF: %[[QT:.*]] = zg.transpose %arg0
// OFF: %[[KT:.*]] = zg.transpose %arg1
// OFF: %[[QR:.*]] = zg.rotary %[[QT]], %arg3, %arg4 :
// OFF: %[[KR:.*]] = zg.rotary %[[KT]], %arg3, %arg4 :
// OFF: zg.attention %[[QR]], %[[KR]], %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = 12 : i64}
// OFF-NOT: seq_major = true
func.func @rotary_folds(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>, %v: tensor<2x16x2x8xf32>, %c: tensor<1x1x16x8xf32>, %s: tensor<1x1x16x8xf32>) -> tensor<2x16x4x8xf32> {
  %qt = zg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = zg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %vt = zg.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %qr = zg.rotary %qt, %c, %s : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %kr = zg.rotary %kt, %c, %s : (tensor<2x2x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x2x16x8xf32>
  %a = zg.attention %qr, %kr, %vt {causal = true, scale = 0.125 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>) -> tensor<2x4x16x8xf32>
  %m = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %m : tensor<2x16x4x8xf32>
}

// -----

// Tests what stays head-major: the training forward (an lse: the gradient
// ops read the rotary's head-major result), a rotary with a second reader
// (read three times), a transpose with a second reader (v's, which the
// rotary of q also reads); and that an inverse rotary keeps its flag when
// it folds (per-sequence tables [B, 1, S, D]).
// CHECK-LABEL: func.func @rotary_not_folded
// CHECK: %[[QT:.*]] = zg.transpose %arg0 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[QR:.*]] = zg.rotary %[[QT]], %arg1, %arg1 :
// CHECK: %result, %lse = zg.attention %[[QR]], %[[QR]], %[[QR]] {causal = true, scale = 1.250000e-01 : f64} :
// CHECK: %[[KT:.*]] = zg.transpose %arg0 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[KR:.*]] = zg.rotary %[[KT]], %arg1, %arg1 :
// CHECK: %[[B:.*]] = zg.attention %[[KR]], %[[KR]], %[[KR]] {causal = false, scale = 1.250000e-01 : f64} :
// CHECK: %[[VT:.*]] = zg.transpose %arg0 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[VR:.*]] = zg.rotary %[[VT]], %arg1, %arg1 :
// CHECK: %[[IR:.*]] = zg.rotary %arg0, %arg2, %arg2 {inverse = true, seq_major = true} : (tensor<2x8x8x8xf32>, tensor<2x1x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x8x8x8xf32>
// CHECK: zg.attention %[[VR]], %[[IR]], %[[VT]] {causal = false, scale = 1.250000e-01 : f64, seq_major = 2 : i64} :
func.func @rotary_not_folded(%x: tensor<2x8x8x8xf32>, %c: tensor<1x1x8x8xf32>, %cb: tensor<2x1x8x8xf32>)
    -> (tensor<2x8x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) {
  %qt = zg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %qr = zg.rotary %qt, %c, %c : (tensor<2x8x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x8x8x8xf32>
  %a:2 = zg.attention %qr, %qr, %qr {causal = true, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8xf32>)
  %kt = zg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %kr = zg.rotary %kt, %c, %c : (tensor<2x8x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x8x8x8xf32>
  %b = zg.attention %kr, %kr, %kr {causal = false, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %vt = zg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %vr = zg.rotary %vt, %c, %c : (tensor<2x8x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x8x8x8xf32>
  %it = zg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %ir = zg.rotary %it, %cb, %cb {inverse = true} : (tensor<2x8x8x8xf32>, tensor<2x1x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x8x8x8xf32>
  %c2 = zg.attention %vr, %ir, %vt {causal = false, scale = 0.125 : f64} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %a#0, %a#1, %b, %c2 : tensor<2x8x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>
}
