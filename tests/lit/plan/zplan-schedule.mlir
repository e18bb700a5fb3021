// RUN: zplan-opt --split-input-file --zplan-schedule %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-schedule=dtype=bf16 %s | FileCheck %s --check-prefix=BF16

// Tests that compute-only graphs stay on the compute stream with no events,
// and that storage ops (weights, constants) run no instruction. The pass must
// not add any event here.
// CHECK-LABEL: module @compute_only
// CHECK: func.func @main
// CHECK-SAME: zplan.collective_hash = 14695981039346656037 : ui64
// CHECK-SAME: zplan.num_events = 0 : i64
// CHECK: zg.weight
// CHECK-NOT: zplan.stream
// CHECK-SAME: : () -> tensor<64x64xf32>
// CHECK: zg.linear
// CHECK-SAME: zplan.stream = "compute"
// CHECK-NOT: zplan.waits
// CHECK-NOT: zplan.signal
// CHECK: zg.gelu
// CHECK-SAME: zplan.stream = "compute"
// CHECK-NOT: zplan.waits
// CHECK: return
module @compute_only {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %w = zg.weight {file = "m.data", length = 16384 : i64, name = "w", offset = 0 : i64} : () -> tensor<64x64xf32>
    %y = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %z = zg.gelu %y {approximate = "tanh"} : (tensor<2x64xf32>) -> tensor<2x64xf32>
    return %z : tensor<2x64xf32>
  }
}

// -----

// Tests that a tp all_reduce runs on the comm stream, signals an event its
// compute consumer waits on, and waits itself on its compute producer; the
// collective hash is FNV-1a 64 over (u16 128, u8 axis 1, u8 dtype 0,
// u64 128 elements), computed independently in Python.
// CHECK-LABEL: module @all_reduce
// With --zplan-schedule=dtype=bf16 float tensors are stored as bf16, which
// enters the hash as dtype 1.
// BF16-LABEL: module @all_reduce
// BF16-SAME: zplan.dtype = "bf16"
// BF16: func.func @main
// BF16-SAME: zplan.collective_hash = 17549174094930542687 : ui64
// CHECK: func.func @main
// CHECK-SAME: zplan.collective_hash = 6550455462117092172 : ui64
// CHECK-SAME: zplan.num_events = 2 : i64
// CHECK: %[[A:.*]] = zg.neg
// CHECK-SAME: zplan.signal = 0 : i64, zplan.stream = "compute"
// CHECK: %[[R:.*]] = zd.all_reduce %[[A]]
// CHECK-SAME: zplan.signal = 1 : i64, zplan.stream = "comm", zplan.waits = array<i64: 0>
// CHECK: zg.add %[[R]], %[[A]]
// CHECK-SAME: zplan.stream = "compute", zplan.waits = array<i64: 1>
module @all_reduce attributes {zd.tp = 2 : i64} {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %a = zg.neg %x : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %r = zd.all_reduce %a {axis = "tp"} : tensor<2x64xf32>
    %s = zg.add %r, %a : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
    return %s : tensor<2x64xf32>
  }
}

// -----

// Tests the ZeRO-3 offload chain: the host shard's prefetch runs on the copy
// stream, the gather on comm waits for it, the linear on compute waits for the
// gather, and a second consumer of the same gather on compute does not wait
// again (stream order already covers it).
// CHECK-LABEL: module @offload_chain
// CHECK: func.func @main
// CHECK-SAME: zplan.collective_hash = 11979532569265775503 : ui64
// CHECK: zd.weight_shard
// CHECK-NOT: zplan.stream
// CHECK-SAME: tensor<2048xf32>
// CHECK: zd.prefetch
// CHECK-SAME: zplan.signal = 0 : i64, zplan.stream = "copy"
// CHECK: zd.gather_param
// CHECK-SAME: zplan.signal = 1 : i64, zplan.stream = "comm", zplan.waits = array<i64: 0>
// CHECK: zg.linear
// CHECK-SAME: zplan.stream = "compute", zplan.waits = array<i64: 1>
// CHECK: zg.linear
// CHECK-NOT: zplan.waits
// CHECK-SAME: tensor<2x64xf32>
// CHECK: zd.release
// CHECK-SAME: zplan.stream = "compute"
// CHECK-NOT: zplan.waits
module @offload_chain attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "host"} : tensor<2048xf32>
    %p = zd.prefetch %s : tensor<2048xf32>
    %w = zd.gather_param %p : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %z = zg.linear %y, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    zd.release %w : tensor<64x64xf32>
    return %z : tensor<2x64xf32>
  }
}
