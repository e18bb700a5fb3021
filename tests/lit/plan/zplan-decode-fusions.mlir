// RUN: zplan-opt %s --split-input-file --zplan-decode-products="rope-kv=true" | FileCheck %s --check-prefix=ROPE
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="norm-max-rows=1" | FileCheck %s --check-prefix=NORM
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="rope-kv=true rope-attention=true" | FileCheck %s --check-prefix=RATT

// Tests that rope-kv turns a decode layer's rotary of q and of k and its two
// cache writes into one zg.rope_kv_write right before the attention, which
// then reads its result; the attention whose q has another reader keeps its
// ops (second layer).
// ROPE-LABEL: func.func @decode
// ROPE: %[[KC:.*]] = zg.state {{.*}}"kv_cache.0.k"
// ROPE: %[[VC:.*]] = zg.state {{.*}}"kv_cache.0.v"
// ROPE-NOT: zg.rotary
// ROPE-NOT: zg.kv_write
// ROPE: %[[Q:.*]] = zg.rope_kv_write %arg0, %arg1, %arg2, %arg3, %arg4, %[[KC]], %[[VC]], %arg5 : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
// ROPE-NEXT: zg.cached_attention %[[Q]], %[[KC]], %[[VC]], %arg5
// ROPE: zg.rotary
// ROPE: zg.rotary
// ROPE: zg.kv_write
// ROPE: zg.kv_write
// ROPE: zg.cached_attention
// ROPE-NOT: zg.rope_kv_write
// Tests that rope-attention folds the fused step into the attention that
// reads its rotated q: the first layer becomes one zg.rope_attention with the
// attention's scale, which the function returns; the second layer (q has
// another reader) keeps its five ops.
// RATT-LABEL: func.func @decode
// RATT: %[[KC:.*]] = zg.state {{.*}}"kv_cache.0.k"
// RATT: %[[VC:.*]] = zg.state {{.*}}"kv_cache.0.v"
// RATT-NOT: zg.rope_kv_write
// RATT-NOT: zg.cached_attention
// RATT: %[[A:.*]] = zg.rope_attention %arg0, %arg1, %arg2, %arg3, %arg4, %[[KC]], %[[VC]], %arg5 {scale = 0.35355339059327379 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
// RATT: zg.rotary %[[A]]
// RATT: zg.kv_write
// RATT: zg.kv_write
// RATT: zg.cached_attention
// RATT-NOT: zg.rope_attention
// RATT: return %[[A]],
func.func @decode(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> (tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>) {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
  %qr = zg.rotary %q, %cos, %sin : (tensor<2x4x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x1x8xf32>
  %kr = zg.rotary %k, %cos, %sin : (tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x2x1x8xf32>
  zg.kv_write %kc, %kr, %pos : (tensor<2x2x16x8xf32>, tensor<2x2x1x8xf32>, tensor<2xi64>) -> ()
  zg.kv_write %vc, %v, %pos : (tensor<2x2x16x8xf32>, tensor<2x2x1x8xf32>, tensor<2xi64>) -> ()
  %a = zg.cached_attention %qr, %kc, %vc, %pos {scale = 0.35355339059327379 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  %kc1 = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.1.k"} : () -> tensor<2x2x16x8xf32>
  %vc1 = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.1.v"} : () -> tensor<2x2x16x8xf32>
  %qr1 = zg.rotary %a, %cos, %sin : (tensor<2x4x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x1x8xf32>
  %kr1 = zg.rotary %k, %cos, %sin : (tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x2x1x8xf32>
  zg.kv_write %kc1, %kr1, %pos : (tensor<2x2x16x8xf32>, tensor<2x2x1x8xf32>, tensor<2xi64>) -> ()
  zg.kv_write %vc1, %v, %pos : (tensor<2x2x16x8xf32>, tensor<2x2x1x8xf32>, tensor<2xi64>) -> ()
  %a1 = zg.cached_attention %qr1, %kc1, %vc1, %pos {scale = 0.35355339059327379 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  return %a, %a1, %qr1 : tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>
}

// -----

// Tests that norm-max-rows folds a residual_norm (rms) before a linear_multi,
// and an add + rms_norm before a linear_gated, into zg.norm_products, whose
// sum replaces the former sum; a norm whose normed rows have another reader,
// and a product with a weight of N not a multiple of 8, keep their ops.
// NORM-LABEL: func.func @decode(%arg0: tensor<1x1x64xf32>
// NORM-NEXT: %[[S:[a-z0-9_]+]], %[[P:[a-z0-9_]+]]:2 = zg.norm_products %arg0, %arg1, %arg2, %arg3, %arg4 {epsilon = 9.9999999999999995E-7 : f64} : (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x16xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<1x1x16xf32>)
// NORM-NEXT: %[[S2:[a-z0-9_]+]], %[[G:[a-z0-9_]+]] = zg.norm_products %[[S]], %[[P]]#0, %arg2, %arg5, %arg6 {act = "silu", epsilon = 9.9999999999999995E-7 : f64} : (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<64xf32>, tensor<64x32xf32>, tensor<64x32xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x32xf32>)
// NORM-NEXT: zg.residual_norm
// NORM-NEXT: zg.linear_multi
// NORM-NEXT: zg.residual_norm
// NORM-NEXT: zg.linear_multi
// NORM-NEXT: return %[[S2]], %[[P]]#1, %[[G]],
func.func @decode(%x: tensor<1x1x64xf32>, %r: tensor<1x1x64xf32>, %g: tensor<64xf32>, %wq: tensor<64x64xf32>, %wk: tensor<64x16xf32>, %wu: tensor<64x32xf32>, %wd: tensor<64x32xf32>, %wo: tensor<64x12xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x16xf32>, tensor<1x1x32xf32>, tensor<1x1x64xf32>, tensor<1x1x12xf32>, tensor<1x1x64xf32>) {
  %s, %n = zg.residual_norm %x, %r, %g {kind = "rms", epsilon = 1.0e-6 : f64} : (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<64xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>)
  %q:2 = zg.linear_multi %n, %wq, %wk : (tensor<1x1x64xf32>, tensor<64x64xf32>, tensor<64x16xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x16xf32>)
  %s2 = zg.add %s, %q#0 : (tensor<1x1x64xf32>, tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
  %n2 = zg.rms_norm %s2, %g {epsilon = 1.0e-6 : f64} : (tensor<1x1x64xf32>, tensor<64xf32>) -> tensor<1x1x64xf32>
  %m = zg.linear_gated %n2, %wu, %wd {act = "silu"} : (tensor<1x1x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<1x1x32xf32>
  %s3, %n3 = zg.residual_norm %x, %r, %g {kind = "rms", epsilon = 1.0e-6 : f64} : (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<64xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>)
  %p:2 = zg.linear_multi %n3, %wq, %wk : (tensor<1x1x64xf32>, tensor<64x64xf32>, tensor<64x16xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x16xf32>)
  %s4, %n4 = zg.residual_norm %x, %r, %g {kind = "rms", epsilon = 1.0e-6 : f64} : (tensor<1x1x64xf32>, tensor<1x1x64xf32>, tensor<64xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>)
  %o:2 = zg.linear_multi %n4, %wq, %wo : (tensor<1x1x64xf32>, tensor<64x64xf32>, tensor<64x12xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x12xf32>)
  return %s2, %q#1, %m, %n3, %o#1, %s4 : tensor<1x1x64xf32>, tensor<1x1x16xf32>, tensor<1x1x32xf32>, tensor<1x1x64xf32>, tensor<1x1x12xf32>, tensor<1x1x64xf32>
}
