// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-attention))' | FileCheck %s

// Tests that softmax(scale * q k^T + causal mask) v becomes a causal
// zg.attention without a mask operand.
// CHECK-LABEL: func.func @causal
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64}
// CHECK-NEXT: return %[[A]]
func.func @causal(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %cm = zg.causal_mask {masked_value = -3.4028234663852886E+38 : f64} : () -> tensor<1x1x8x8xf32>
  %s = zg.constant {value = dense<0.125> : tensor<f32>} : () -> tensor<f32>
  %kt = zg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %qk = zg.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %sc = zg.mul %qk, %s : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %a = zg.add %sc, %cm : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = zg.softmax %a {axis = 3 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Tests grouped-query attention: K and V repeated from 2 to 4 heads by
// reshape / expand / reshape are taken from before the repetition; the
// scale is split over q and k (SDPA's export) and a general additive mask
// stays an operand.
// CHECK-LABEL: func.func @gqa
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2, %arg3 {causal = false, scale = 2.500000e-01 : f64}
// CHECK-SAME: (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: return %[[A]]
func.func @gqa(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32> {
  %s = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %k1 = zg.reshape %k : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %k2 = zg.expand %k1 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %k3 = zg.reshape %k2 : (tensor<2x2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %v1 = zg.reshape %v : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %v2 = zg.expand %v1 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %v3 = zg.reshape %v2 : (tensor<2x2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %qs = zg.mul %q, %s : (tensor<2x4x8x16xf32>, tensor<f32>) -> tensor<2x4x8x16xf32>
  %kt = zg.transpose %k3 {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %kts = zg.mul %kt, %s : (tensor<2x4x16x8xf32>, tensor<f32>) -> tensor<2x4x16x8xf32>
  %qk = zg.matmul %qs, %kts : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %a = zg.add %qk, %m : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = zg.softmax %a {axis = 3 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.matmul %p, %v3 : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Tests a boolean mask (where(keep, scores, -inf)), division by the scale,
// the NaN guard after softmax and a key transposed straight from
// [B, T, H, D].
// CHECK-LABEL: func.func @bool_mask
// CHECK: %[[KT:.*]] = zg.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK: %[[M:.*]] = zg.where %arg3, %{{.*}}, %{{.*}} : (tensor<2x1x8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x8x8xf32>
// CHECK: %[[A:.*]] = zg.attention %arg0, %[[KT]], %arg2, %[[M]] {causal = false, scale = 2.500000e-01 : f64}
// CHECK-NEXT: return %[[A]]
func.func @bool_mask(%q: tensor<2x4x8x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x4x8x16xf32>, %keep: tensor<2x1x8x8xi1>) -> tensor<2x4x8x16xf32> {
  %four = zg.constant {value = dense<4.0> : tensor<f32>} : () -> tensor<f32>
  %ninf = zg.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %zero = zg.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %kt = zg.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x16x8xf32>
  %qk = zg.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %sc = zg.div %qk, %four : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %w = zg.where %keep, %sc, %ninf : (tensor<2x1x8x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p0 = zg.softmax %w {axis = 3 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %nan = zg.is_nan %p0 : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %p = zg.where %nan, %zero, %p0 : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Tests transformers 4's GPT-2 masking: where(causal, scores, min) with a
// constant lower-triangular keep (its tril buffer, folded), then an additive
// padding mask: the keep becomes the causal flag and the padding the mask; a
// keep that is not causal (a window of 2) stays a mask, added to the padding.
// CHECK-LABEL: func.func @causal_keep_plus_padding
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2, %arg3 {causal = true, scale = 2.500000e-01 : f64}
// CHECK-NEXT: return %[[A]]
func.func @causal_keep_plus_padding(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>, %pad: tensor<1x1x1x3xf32>) -> tensor<1x2x3x4xf32> {
  %keep = zg.constant {value = dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %scale = zg.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %min = zg.constant {value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %kt = zg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %qk = zg.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %sc = zg.mul %qk, %scale : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %w = zg.where %keep, %sc, %min : (tensor<3x3xi1>, tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %m = zg.add %w, %pad : (tensor<1x2x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x2x3x3xf32>
  %p = zg.softmax %m {axis = 3 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = zg.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}
// CHECK-LABEL: func.func @causal_keep_alone
// CHECK: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f64}
func.func @causal_keep_alone(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %keep = zg.constant {value = dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %scale = zg.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %min = zg.constant {value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %kt = zg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %qk = zg.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %sc = zg.mul %qk, %scale : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %w = zg.where %keep, %sc, %min : (tensor<3x3xi1>, tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %p = zg.softmax %w {axis = 3 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = zg.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}
// CHECK-LABEL: func.func @window_keep_plus_padding
// CHECK: %[[W:.*]] = zg.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
// CHECK-NEXT: %[[M:.*]] = zg.add %[[W]], %arg3 : (tensor<3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x1x3x3xf32>
// CHECK-NEXT: %[[A:.*]] = zg.attention %arg0, %arg1, %arg2, %[[M]] {causal = false, scale = 2.500000e-01 : f64}
func.func @window_keep_plus_padding(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>, %pad: tensor<1x1x1x3xf32>) -> tensor<1x2x3x4xf32> {
  %keep = zg.constant {value = dense<[[true, false, false], [true, true, false], [false, true, true]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %scale = zg.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %min = zg.constant {value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %kt = zg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %qk = zg.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %sc = zg.mul %qk, %scale : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %w = zg.where %keep, %sc, %min : (tensor<3x3xi1>, tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %m = zg.add %w, %pad : (tensor<1x2x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x2x3x3xf32>
  %p = zg.softmax %m {axis = 3 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = zg.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Tests that a softmax over the query axis is not attention.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: zg.attention
// CHECK: zg.softmax
func.func @not_attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %kt = zg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %qk = zg.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %p = zg.softmax %qk {axis = 2 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = zg.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}
