// RUN: zplan-opt --split-input-file --zplan-schedule --zplan-memory-plan %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-schedule --zplan-memory-plan=gpu-mem=1048576 %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-schedule=dtype=bf16 --zplan-memory-plan=dtype=bf16 %s | FileCheck %s --check-prefix=BF16

// Tests that a chain of activations reuses two slots: inputs and outputs are
// stacked for the whole run (x at 0, the output at 512), the intermediate
// values alternate between two slots above them. With bf16 every float tensor
// takes half the bytes.
// CHECK-LABEL: module @chain
// CHECK-SAME: zplan.arena_bytes = array<i64: 2048, 0>
// CHECK-SAME: zplan.peak_live_bytes = array<i64: 2048, 0>
// CHECK: zplan.offset = 0 : i64
// CHECK: zg.neg {{.*}}zplan.offsets = array<i64: 1024>
// CHECK: zg.neg {{.*}}zplan.offsets = array<i64: 1536>
// CHECK: zg.neg {{.*}}zplan.offsets = array<i64: 1024>
// CHECK: zg.neg {{.*}}zplan.offsets = array<i64: 512>
// BF16-LABEL: module @chain
// BF16-SAME: zplan.arena_bytes = array<i64: 1024, 0>
module @chain {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %a = zg.neg %x : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %b = zg.neg %a : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %c = zg.neg %b : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %d = zg.neg %c : (tensor<2x64xf32>) -> tensor<2x64xf32>
    return %d : tensor<2x64xf32>
  }
}

// -----

// Tests that a reshape shares its operand's storage and keeps it alive until
// the reshape's own last use, and that int64 ids keep 8 bytes per element in
// any plan dtype.
// CHECK-LABEL: module @reshape_alias
// CHECK: %[[A:.*]] = zg.neg {{.*}}zplan.offsets = array<i64: [[OFF:[0-9]+]]>
// CHECK: zg.reshape %[[A]] {{.*}}zplan.offsets = array<i64: [[OFF]]>
// BF16-LABEL: module @reshape_alias
// BF16-SAME: zplan.arena_bytes = array<i64: 1536, 0>
module @reshape_alias {
  func.func @main(%x: tensor<2x32xi64>) -> tensor<64xi64> {
    %a = zg.neg %x : (tensor<2x32xi64>) -> tensor<2x32xi64>
    %r = zg.reshape %a : (tensor<2x32xi64>) -> tensor<64xi64>
    %b = zg.neg %r : (tensor<64xi64>) -> tensor<64xi64>
    return %b : tensor<64xi64>
  }
}

// -----

// Tests that a gathered parameter's storage is free after its zd.release: the
// second gather reuses the first one's bytes. Host shards go to the host arena
// (stacked for the whole run), device shards to the device arena.
// CHECK-LABEL: module @release_reuse
// CHECK-SAME: zplan.arena_bytes = array<i64: 17920, 16384>
// CHECK: zd.weight_shard {{.*}}space = "host", zplan.offsets = array<i64: 0>
// CHECK: zd.weight_shard {{.*}}space = "host", zplan.offsets = array<i64: 8192>
// CHECK: zd.gather_param {{.*}}zplan.offsets = array<i64: [[G:[0-9]+]]>
// CHECK: zd.release
// CHECK: zd.gather_param {{.*}}zplan.offsets = array<i64: [[G]]>
module @release_reuse attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %s1 = zd.weight_shard {name = "w1", file = "m.data", offset = 0 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "host"} : tensor<2048xf32>
    %s2 = zd.weight_shard {name = "w2", file = "m.data", offset = 16384 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "host"} : tensor<2048xf32>
    %w1 = zd.gather_param %s1 : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.linear %x, %w1 {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    zd.release %w1 : tensor<64x64xf32>
    %w2 = zd.gather_param %s2 : tensor<2048xf32> -> tensor<64x64xf32>
    %z = zg.linear %y, %w2 {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    zd.release %w2 : tensor<64x64xf32>
    return %z : tensor<2x64xf32>
  }
}

// -----

// Tests that a gather on the comm stream that reuses bytes last read on the
// compute stream waits for that compute op (event 1, signalled by the second
// neg), so that concurrent streams never overwrite live data.
// CHECK-LABEL: module @cross_stream_reuse
// CHECK: zg.neg {{.*}}zplan.offsets = array<i64: [[A:[0-9]+]]>
// CHECK: zg.neg {{.*}}zplan.signal = 1 : i64
// CHECK: zd.gather_param {{.*}}zplan.offsets = array<i64: [[A]]>, zplan.signal = 0 : i64, zplan.stream = "comm", zplan.waits = array<i64: 1>
module @cross_stream_reuse attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "device"} : tensor<2048xf32>
    %a = zg.neg %x : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %b = zg.neg %a : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %w = zd.gather_param %s : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.matmul %b, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    zd.release %w : tensor<64x64xf32>
    return %y : tensor<64x64xf32>
  }
}

// -----

// Tests that a plan within its budget compiles: with gpu-mem = 1 MiB (second
// RUN line) the budget check must not fire for any case of this file.
// CHECK-LABEL: module @fits
// CHECK-SAME: zplan.arena_bytes = array<i64: 1024, 0>
module @fits {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %a = zg.neg %x : (tensor<2x64xf32>) -> tensor<2x64xf32>
    return %a : tensor<2x64xf32>
  }
}
