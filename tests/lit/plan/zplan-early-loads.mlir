// RUN: zplan-opt --split-input-file --zplan-schedule --zplan-early-loads %s | FileCheck %s

// --zplan-early-loads (plan 2.18): a step's kernel may load its weights (or
// rope_attention's caches and positions) before it waits for the previous
// kernel on its stream only where no step writes them meanwhile.

// Tests that the few-row products of inference weights that no program
// writes are marked (a linear the decode pass gave a few-row kernel, the
// fused linear_multi, linear_gated and norm_products, through a view of the
// weight too), and that the products must not be marked where cuBLASLt runs
// them (no zd.kernel) or where the weight is an activation (matmul's b).
// CHECK-LABEL: func.func @decode
// CHECK: zg.linear %arg0, %[[W:[0-9a-z]+]] {zd.kernel = "few_rows_stream", zplan.early, zplan.stream = "compute"}
// CHECK: zg.linear %{{.*}}, %{{.*}} {zd.kernel = "few_rows", zplan.early, zplan.stream = "compute"}
// CHECK: zg.linear %{{.*}}, %[[W]] {zplan.stream = "compute"}
// CHECK: zg.matmul %{{.*}} {zd.kernel = "few_rows", zplan.stream = "compute"}
// CHECK: zg.linear_multi {{.*}} {zplan.early, zplan.stream = "compute"}
// CHECK: zg.linear_gated {{.*}} {act = "silu", zplan.early, zplan.stream = "compute"}
// CHECK: zg.norm_products {{.*}} zplan.early, zplan.stream = "compute"
func.func @decode(%x: tensor<1x64xf32>, %r: tensor<1x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>) {
  %w = zg.weight {file = "w.bin", length = 16384 : i64, name = "w", offset = 0 : i64} : () -> tensor<64x64xf32>
  %v = zg.weight {file = "w.bin", length = 16384 : i64, name = "v", offset = 16384 : i64} : () -> tensor<4096xf32>
  %g = zg.weight {file = "w.bin", length = 256 : i64, name = "g", offset = 32768 : i64} : () -> tensor<64xf32>
  %vw = zg.reshape %v : (tensor<4096xf32>) -> tensor<64x64xf32>
  %a = zg.linear %x, %w {zd.kernel = "few_rows_stream"} : (tensor<1x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
  %b = zg.linear %a, %vw {zd.kernel = "few_rows"} : (tensor<1x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
  %c = zg.linear %b, %w : (tensor<1x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
  %ct = zg.reshape %c : (tensor<1x64xf32>) -> tensor<64x1xf32>
  %m = zg.matmul %ct, %a {zd.kernel = "few_rows"} : (tensor<64x1xf32>, tensor<1x64xf32>) -> tensor<64x64xf32>
  %p:2 = zg.linear_multi %b, %w, %vw : (tensor<1x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>)
  %h = zg.linear_gated %p#0, %w, %vw {act = "silu"} : (tensor<1x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
  %s, %n = zg.norm_products %h, %r, %g, %w {epsilon = 1.0e-6 : f64} : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<64xf32>, tensor<64x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>)
  %m0 = zg.slice %m {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<64x64xf32>) -> tensor<1x64xf32>
  return %c, %m0, %p#1, %h, %s, %n : tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// Tests that a weight some program writes is never loaded early, in any
// program: the training step's optimizer updates the parameter that the
// decode program's few-row product reads.
// CHECK-LABEL: func.func @decode
// CHECK: zg.linear %arg0, %{{.*}} {zd.kernel = "few_rows_stream", zplan.stream = "compute"}
// CHECK-LABEL: func.func @train_step
module {
  func.func @decode(%x: tensor<1x64xf32>) -> tensor<1x32xf32> {
    %w = zg.weight {file = "w.bin", length = 8192 : i64, name = "w", offset = 0 : i64} : () -> tensor<64x32xf32>
    %y = zg.linear %x, %w {zd.kernel = "few_rows_stream"} : (tensor<1x64xf32>, tensor<64x32xf32>) -> tensor<1x32xf32>
    return %y : tensor<1x32xf32>
  }
  func.func @train_step(%g: tensor<64x32xf32>, %lr: tensor<f32>, %step: tensor<i64>, %gs: tensor<f32>) {
    %w = zg.weight {file = "w.bin", length = 8192 : i64, name = "w", offset = 0 : i64} : () -> tensor<64x32xf32>
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<64x32xf32>
    %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<64x32xf32>
    zg.adamw %w, %g, %m, %v, %lr, %step, %gs {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
    return
  }
}

// -----

// Tests that a weight a step fetches must not be loaded early: the ZeRO-3
// gather writes the gathered copy (comm stream), the offload copy the device
// copy of a host parameter (copy stream), each while the compute stream may
// still run the kernel before the product.
// CHECK-LABEL: func.func @decode
// CHECK: zd.gather_param
// CHECK: zg.linear %arg0, %{{.*}} {zd.kernel = "few_rows_stream", zplan.stream = "compute", zplan.waits = array<i64: 0>}
// CHECK: zd.prefetch
// CHECK: zg.linear_multi %{{.*}} {zplan.stream = "compute", zplan.waits = array<i64: 1>}
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
  func.func @decode(%x: tensor<1x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "device"} : tensor<2048xf32>
    %w = zd.gather_param %s : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.linear %x, %w {zd.kernel = "few_rows_stream"} : (tensor<1x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
    %h = zg.weight {file = "m.data", length = 16384 : i64, name = "h", offset = 16384 : i64, zd.space = "host"} : () -> tensor<64x64xf32>
    %d = zd.prefetch %h : tensor<64x64xf32>
    %p:2 = zg.linear_multi %y, %d, %w : (tensor<1x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>)
    return %p#0, %p#1 : tensor<1x64xf32>, tensor<1x64xf32>
  }
}

// -----

// Tests that a rope_attention whose caches and positions no other step of
// its program writes, and whose previous instruction (views aside) is a
// compute step of its program, is marked; and that it must not be marked
// where it is its program's first instruction (the kernel before it would be
// another program's), where another step of the program writes a cache or
// computes the positions, or where a collective comes right before it.
// CHECK-LABEL: func.func @decode
// CHECK: zg.neg
// CHECK: zg.rope_attention {{.*}} {scale = 3.500000e-01 : f64, zplan.early, zplan.stream = "compute"}
// CHECK-LABEL: func.func @first
// CHECK: zg.rope_attention {{.*}} {scale = 3.500000e-01 : f64, zplan.stream = "compute"}
// CHECK-LABEL: func.func @cache_written
// CHECK: zg.rope_attention {{.*}} {scale = 3.500000e-01 : f64, zplan.stream = "compute"}
// CHECK-LABEL: func.func @positions_computed
// CHECK: zg.rope_attention {{.*}} {scale = 3.500000e-01 : f64, zplan.stream = "compute"}
// CHECK-LABEL: func.func @after_collective
// CHECK: zd.all_reduce
// CHECK: zg.rope_attention {{.*}} {scale = 3.500000e-01 : f64, zplan.stream = "compute", zplan.waits = array<i64: 1>}
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
  func.func @decode(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> tensor<2x4x1x8xf32> {
    %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
    %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
    %qn = zg.neg %q : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x8xf32>
    %qv = zg.reshape %qn : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x8xf32>
    %a = zg.rope_attention %qv, %k, %v, %cos, %sin, %kc, %vc, %pos {scale = 0.35 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
    return %a : tensor<2x4x1x8xf32>
  }
  func.func @first(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> tensor<2x4x1x8xf32> {
    %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
    %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
    %a = zg.rope_attention %q, %k, %v, %cos, %sin, %kc, %vc, %pos {scale = 0.35 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
    return %a : tensor<2x4x1x8xf32>
  }
  func.func @cache_written(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> tensor<2x4x1x8xf32> {
    %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
    %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
    zg.kv_write %vc, %v, %pos : (tensor<2x2x16x8xf32>, tensor<2x2x1x8xf32>, tensor<2xi64>) -> ()
    %qn = zg.neg %q : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x8xf32>
    %a = zg.rope_attention %qn, %k, %v, %cos, %sin, %kc, %vc, %pos {scale = 0.35 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
    return %a : tensor<2x4x1x8xf32>
  }
  func.func @positions_computed(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> tensor<2x4x1x8xf32> {
    %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
    %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
    %p = zg.neg %pos : (tensor<2xi64>) -> tensor<2xi64>
    %a = zg.rope_attention %q, %k, %v, %cos, %sin, %kc, %vc, %p {scale = 0.35 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
    return %a : tensor<2x4x1x8xf32>
  }
  func.func @after_collective(%q: tensor<2x4x1x8xf32>, %k: tensor<2x2x1x8xf32>, %v: tensor<2x2x1x8xf32>, %cos: tensor<2x1x1x8xf32>, %sin: tensor<2x1x1x8xf32>, %pos: tensor<2xi64>) -> tensor<2x4x1x8xf32> {
    %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x16x8xf32>
    %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<2x2x16x8xf32>
    %qn = zg.neg %q : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x8xf32>
    %qr = zd.all_reduce %qn {axis = "tp"} : tensor<2x4x1x8xf32>
    %a = zg.rope_attention %qr, %k, %v, %cos, %sin, %kc, %vc, %pos {scale = 0.35 : f64} : (tensor<2x4x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x1x1x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2xi64>) -> tensor<2x4x1x8xf32>
    return %a : tensor<2x4x1x8xf32>
  }
}
