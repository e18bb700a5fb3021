// RUN: zplan-opt %s --split-input-file --zplan-decode-products="decode-layer=true" | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="decode-layer=true decode-layer-kernel=true" | FileCheck %s --check-prefix=KERNEL

// Tests that decode-layer turns a decoder layer of the decode step (here in
// the forms the other fusions leave at rows the norm fusion does not take: a
// residual_norm before the q/k/v linear_multi, an add and rms_norm before the
// gated product) into one zg.decode_layer at the down product, whose results
// replace the down product's and the residual sum after the attention; the
// layers' barrier counts are one zero-initialised i32 state. The GPU kernel
// takes head dims 64 and 128 only: with decode-layer-kernel the layer stays.
// CHECK-LABEL: func.func @decode
// CHECK-NEXT: %[[SYNC:.*]] = zg.state {init = "zeros", kind = "scalar", name = "decode_layer.sync"} : () -> tensor<{{[0-9]+}}xi32>
// CHECK-NEXT: %[[KC:.*]] = zg.state {{.*}}"kv_cache.0.k"
// CHECK-NEXT: %[[VC:.*]] = zg.state {{.*}}"kv_cache.0.v"
// CHECK-NEXT: %[[Y:[a-z_0-9]+]], %[[R:[a-z_0-9]+]] = zg.decode_layer %arg0, %[[KC]], %[[VC]], %[[SYNC]], %arg13, %arg11, %arg12, %arg2, %arg4, %arg5, %arg6, %arg7, %arg3, %arg8, %arg9, %arg10, %arg1 {act = "silu", epsilon = 9.9999999999999995E-7 : f64, scale = 0.35355339059327379 : f64}
// CHECK-NEXT: return %[[Y]], %[[R]] :
// KERNEL-LABEL: func.func @decode
// KERNEL-NOT: zg.decode_layer
// KERNEL-NOT: decode_layer.sync
func.func @decode(%x: tensor<2x1x16xf32>, %r: tensor<2x1x16xf32>, %g1: tensor<16xf32>, %g2: tensor<16xf32>, %wq: tensor<16x32xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<32x16xf32>, %wg: tensor<16x24xf32>, %wu: tensor<16x24xf32>, %wd: tensor<24x16xf32>, %cos: tensor<1x1x1x8xf32>, %sin: tensor<1x1x1x8xf32>, %pos: tensor<2xi64>) -> (tensor<2x1x16xf32>, tensor<2x1x16xf32>) {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
  %s, %n = zg.residual_norm %x, %r, %g1 {kind = "rms", epsilon = 1.0e-6 : f64} : (tensor<2x1x16xf32>, tensor<2x1x16xf32>, tensor<16xf32>) -> (tensor<2x1x16xf32>, tensor<2x1x16xf32>)
  %p:3 = zg.linear_multi %n, %wq, %wk, %wv : (tensor<2x1x16xf32>, tensor<16x32xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> (tensor<2x1x32xf32>, tensor<2x1x16xf32>, tensor<2x1x16xf32>)
  %q = zg.reshape %p#0 : (tensor<2x1x32xf32>) -> tensor<2x4x1x8xf32>
  %k = zg.reshape %p#1 : (tensor<2x1x16xf32>) -> tensor<2x2x1x8xf32>
  %v = zg.reshape %p#2 : (tensor<2x1x16xf32>) -> tensor<2x2x1x8xf32>
  %qr = zg.rope_kv_write %q, %k, %v, %cos, %sin, %kc, %vc, %pos : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  %a = zg.cached_attention %qr, %kc, %vc, %pos {scale = 0.35355339059327379 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  %a2 = zg.reshape %a : (tensor<2x4x1x8xf32>) -> tensor<2x1x32xf32>
  %o = zg.linear %a2, %wo : (tensor<2x1x32xf32>, tensor<32x16xf32>) -> tensor<2x1x16xf32>
  %s2 = zg.add %s, %o : (tensor<2x1x16xf32>, tensor<2x1x16xf32>) -> tensor<2x1x16xf32>
  %n2 = zg.rms_norm %s2, %g2 {epsilon = 1.0e-6 : f64} : (tensor<2x1x16xf32>, tensor<16xf32>) -> tensor<2x1x16xf32>
  %h = zg.linear_gated %n2, %wg, %wu {act = "silu"} : (tensor<2x1x16xf32>, tensor<16x24xf32>, tensor<16x24xf32>) -> tensor<2x1x24xf32>
  %y = zg.linear %h, %wd : (tensor<2x1x24xf32>, tensor<24x16xf32>) -> tensor<2x1x16xf32>
  return %y, %s2 : tensor<2x1x16xf32>, tensor<2x1x16xf32>
}

// -----

// Tests that a layer whose q product has another reader (returned here) keeps
// its ops: the fused op would have to produce q too.
// CHECK-LABEL: func.func @decode
// CHECK-NOT: zg.decode_layer
// CHECK-NOT: decode_layer.sync
// CHECK: zg.rope_kv_write
// CHECK: zg.cached_attention
// CHECK: zg.linear_gated
func.func @decode(%x: tensor<2x1x16xf32>, %r: tensor<2x1x16xf32>, %g1: tensor<16xf32>, %g2: tensor<16xf32>, %wq: tensor<16x32xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<32x16xf32>, %wg: tensor<16x24xf32>, %wu: tensor<16x24xf32>, %wd: tensor<24x16xf32>, %cos: tensor<1x1x1x8xf32>, %sin: tensor<1x1x1x8xf32>, %pos: tensor<2xi64>) -> (tensor<2x1x16xf32>, tensor<2x1x16xf32>, tensor<2x1x32xf32>) {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
  %s, %n = zg.residual_norm %x, %r, %g1 {kind = "rms", epsilon = 1.0e-6 : f64} : (tensor<2x1x16xf32>, tensor<2x1x16xf32>, tensor<16xf32>) -> (tensor<2x1x16xf32>, tensor<2x1x16xf32>)
  %p:3 = zg.linear_multi %n, %wq, %wk, %wv : (tensor<2x1x16xf32>, tensor<16x32xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> (tensor<2x1x32xf32>, tensor<2x1x16xf32>, tensor<2x1x16xf32>)
  %q = zg.reshape %p#0 : (tensor<2x1x32xf32>) -> tensor<2x4x1x8xf32>
  %k = zg.reshape %p#1 : (tensor<2x1x16xf32>) -> tensor<2x2x1x8xf32>
  %v = zg.reshape %p#2 : (tensor<2x1x16xf32>) -> tensor<2x2x1x8xf32>
  %qr = zg.rope_kv_write %q, %k, %v, %cos, %sin, %kc, %vc, %pos : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  %a = zg.cached_attention %qr, %kc, %vc, %pos {scale = 0.35355339059327379 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
  %a2 = zg.reshape %a : (tensor<2x4x1x8xf32>) -> tensor<2x1x32xf32>
  %o = zg.linear %a2, %wo : (tensor<2x1x32xf32>, tensor<32x16xf32>) -> tensor<2x1x16xf32>
  %s2 = zg.add %s, %o : (tensor<2x1x16xf32>, tensor<2x1x16xf32>) -> tensor<2x1x16xf32>
  %n2 = zg.rms_norm %s2, %g2 {epsilon = 1.0e-6 : f64} : (tensor<2x1x16xf32>, tensor<16xf32>) -> tensor<2x1x16xf32>
  %h = zg.linear_gated %n2, %wg, %wu {act = "silu"} : (tensor<2x1x16xf32>, tensor<16x24xf32>, tensor<16x24xf32>) -> tensor<2x1x24xf32>
  %y = zg.linear %h, %wd : (tensor<2x1x24xf32>, tensor<24x16xf32>) -> tensor<2x1x16xf32>
  return %y, %s2, %p#0 : tensor<2x1x16xf32>, tensor<2x1x16xf32>, tensor<2x1x32xf32>
}
