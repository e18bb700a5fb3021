// RUN: zplan-opt --split-input-file --zplan-zero="stage=3" %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-zero="stage=3 prefetch-bytes=1024" %s | FileCheck %s --check-prefix=PREFETCH
// RUN: zplan-opt --split-input-file --zplan-zero="stage=3 persist-threshold=1024" %s | FileCheck %s --check-prefix=PERSIST
// RUN: zplan-opt --split-input-file --zplan-zero="stage=3 prefetch-bytes=4096 max-live-bytes=2048" %s | FileCheck %s --check-prefix=CAP

// Tests that stage 3 over dp = 2 splits the batch, replaces each parameter by
// its flat shard, gathers it right before its first use and releases it
// after its last use. A tied weight is gathered once.
// CHECK-LABEL: func.func @zero3
// CHECK-SAME: (%[[X:.*]]: tensor<1x16xf32> {zd.batch_split}) -> (tensor<1x16xf32> {zd.batch_split})
// CHECK: %[[S1:.*]] = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w1", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
// CHECK: %[[S2:.*]] = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 36 : i64, local_shape = array<i64: 9>, name = "b", offset = 1024 : i64, source_shape = array<i64: 9>, space = "device"} : tensor<5xf32>
// CHECK: %[[G1:.*]] = zd.gather_param %[[S1]] {zd.bucket = 0 : i64} : tensor<128xf32> -> tensor<16x16xf32>
// CHECK: %[[H:.*]] = zg.linear %[[X]], %[[G1]] : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
// CHECK: %[[G2:.*]] = zd.gather_param %[[S2]] {zd.bucket = 1 : i64} : tensor<5xf32> -> tensor<9xf32>
// CHECK: zg.slice %[[G2]]
// CHECK: zd.release %[[G2]] : tensor<9xf32>
// CHECK: %[[Y:.*]] = zg.linear %[[H]], %[[G1]]
// CHECK: zd.release %[[G1]] : tensor<16x16xf32>
// CHECK: return %[[Y]] : tensor<1x16xf32>
// PREFETCH-LABEL: func.func @zero3
// PREFETCH: %[[G1:.*]] = zd.gather_param
// PREFETCH-NEXT: %[[G2:.*]] = zd.gather_param
// PREFETCH-NEXT: zg.linear
// PERSIST-LABEL: func.func @zero3
// PERSIST: zd.weight_shard {{.*}}name = "w1"
// PERSIST-NEXT: zg.weight {{.*}}name = "b"
// PERSIST-NOT: zd.weight_shard
// PERSIST: return
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @zero3(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w1 = zg.weight {name = "w1", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b = zg.weight {name = "b", file = "m.data", offset = 1024 : i64, length = 36 : i64} : () -> tensor<9xf32>
  %h = zg.linear %x, %w1 : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %s = zg.slice %b {starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<9xf32>) -> tensor<1xf32>
  %y = zg.linear %h, %w1 : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %z = zg.add %y, %s : (tensor<2x16xf32>, tensor<1xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}
}

// -----

// Tests that the batch is followed through reshapes, transposes and
// attention, and that a constant carrying the full batch is cut to this dp
// group's rows.
// CHECK-LABEL: func.func @batch
// CHECK: zg.reshape %{{.*}} : (tensor<2x8x4xf32>) -> tensor<2x8x2x2xf32>
// CHECK: zg.transpose {{.*}} -> tensor<2x2x8x2xf32>
// CHECK: %[[M:.*]] = zg.slice %{{.*}} {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<4x1x8x8xf32>) -> tensor<2x1x8x8xf32>
// CHECK: zg.attention {{.*}}, %[[M]] {{.*}} -> tensor<2x2x8x2xf32>
// CHECK: zg.reshape {{.*}} : (tensor<2x2x8x2xf32>) -> tensor<16x4xf32>
// CHECK: return {{.*}} : tensor<16x4xf32>
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @batch(%x: tensor<4x8x4xf32>) -> tensor<32x4xf32> {
  %mask = zg.constant {value = dense<0.0> : tensor<4x1x8x8xf32>} : () -> tensor<4x1x8x8xf32>
  %r = zg.reshape %x : (tensor<4x8x4xf32>) -> tensor<4x8x2x2xf32>
  %t = zg.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x2xf32>) -> tensor<4x2x8x2xf32>
  %a = zg.attention %t, %t, %t, %mask {scale = 1.0 : f64, causal = false} : (tensor<4x2x8x2xf32>, tensor<4x2x8x2xf32>, tensor<4x2x8x2xf32>, tensor<4x1x8x8xf32>) -> tensor<4x2x8x2xf32>
  %o = zg.reshape %a : (tensor<4x2x8x2xf32>) -> tensor<32x4xf32>
  return %o : tensor<32x4xf32>
}
}

// -----

// Tests that stage 3 with dp = 1 changes nothing (a remark says so).
// CHECK-LABEL: func.func @nothing
// CHECK-NOT: zd.
// CHECK: zg.weight
// CHECK-NOT: zd.
// CHECK: return
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @nothing(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w1 = zg.weight {name = "w1", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h = zg.linear %x, %w1 : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %h : tensor<2x16xf32>
}
}

// -----

// Tests that the prefetch window moves gathers ahead of their use only while
// the gathered bytes alive stay under max-live-bytes: with a window of all
// three parameters and room for two, c is gathered once a is released.
// CAP-LABEL: func.func @window
// CAP: %[[GA:.*]] = zd.gather_param %{{.*}} {zd.bucket = 0 : i64}
// CAP-NEXT: %[[GB:.*]] = zd.gather_param %{{.*}} {zd.bucket = 1 : i64}
// CAP-NEXT: zg.linear %{{.*}}, %[[GA]]
// CAP-NEXT: zd.release %[[GA]]
// CAP-NEXT: %[[GC:.*]] = zd.gather_param %{{.*}} {zd.bucket = 2 : i64}
// CAP-NEXT: zg.linear %{{.*}}, %[[GB]]
// CHECK-LABEL: func.func @window
// CHECK: zg.linear
// CHECK-NEXT: zd.release
// CHECK-NEXT: zd.gather_param
// CHECK-NEXT: zg.linear
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @window(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %a = zg.weight {name = "a", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b = zg.weight {name = "b", file = "m.data", offset = 1024 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %c = zg.weight {name = "c", file = "m.data", offset = 2048 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h1 = zg.linear %x, %a : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %h2 = zg.linear %h1, %b : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %h3 = zg.linear %h2, %c : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %h3 : tensor<2x16xf32>
}
}
