// RUN: zplan-opt --split-input-file --zplan-tp-partition %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-tp-partition=keep-logits-sharded %s | FileCheck %s --check-prefix=KEEP

// Tests that a column/row pair becomes rank-local: weights get their pieces,
// the row-parallel sum is all-reduced and its bias added once after it.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[W1:.*]] = zg.weight {{.*}}name = "fc1"{{.*}}zd.pieces = {{\[\[}}{dst_start = array<i64: 0, 0>, size = array<i64: 64, 128>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 64, 128>, src_start = array<i64: 0, 128>}]], zd.source_shape = array<i64: 64, 256>} : () -> tensor<64x128xf32>
// CHECK: %[[W2:.*]] = zg.weight {{.*}}name = "fc2"{{.*}}zd.source_shape = array<i64: 256, 64>} : () -> tensor<128x64xf32>
// CHECK: %[[B2:.*]] = zg.weight {{.*}}name = "fc2.b"
// CHECK: %[[H:.*]] = zg.linear %{{.*}}, %[[W1]] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
// CHECK: %[[P:.*]] = zg.linear %[[H]], %[[W2]] : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
// CHECK: %[[S:.*]] = zd.all_reduce %[[P]] {axis = "tp"} : tensor<2x64xf32>
// CHECK: %[[Y:.*]] = zg.add %[[S]], %[[B2]]
// CHECK: return %[[Y]]
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @mlp(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 65536 : i64, zd.result_shardings = [#zd.sharding<[_, tp]>]} : () -> tensor<64x256xf32>
  %w2 = zg.weight {name = "fc2", file = "m.data", offset = 65536 : i64, length = 65536 : i64, zd.result_shardings = [#zd.sharding<[tp, _]>]} : () -> tensor<256x64xf32>
  %b2 = zg.weight {name = "fc2.b", file = "m.data", offset = 131072 : i64, length = 256 : i64} : () -> tensor<64xf32>
  %h = zg.linear %x, %w1 {zd.result_shardings = [#zd.sharding<[_, tp]>]} : (tensor<2x64xf32>, tensor<64x256xf32>) -> tensor<2x256xf32>
  %y = zg.linear %h, %w2, %b2 {zd.result_shardings = [#zd.sharding<[_, _], partial>]} : (tensor<2x256xf32>, tensor<256x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}
}

// -----

// Tests that a vocabulary tp does not divide is padded: the last rank's rows
// are padding, the logits are gathered and the padding sliced off; the
// token embedding gets its vocab stride and an all_reduce. With
// keep-logits-sharded the function returns this rank's part.
// CHECK-LABEL: func.func @vocab
// CHECK: %[[W:.*]] = zg.weight {{.*}}zd.pieces = {{\[\[}}{dst_start = array<i64: 0, 0>, size = array<i64: 3, 8>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 3, 8>, src_start = array<i64: 3, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 3, 8>, src_start = array<i64: 6, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 1, 8>, src_start = array<i64: 9, 0>}]], zd.source_shape = array<i64: 10, 8>} : () -> tensor<3x8xf32>
// CHECK: %[[E:.*]] = zg.embedding %[[W]], %{{.*}} {zd.vocab_stride = 3 : i64}
// CHECK: %[[ER:.*]] = zd.all_reduce %[[E]] {axis = "tp"} : tensor<2x3x8xf32>
// CHECK: %[[L:.*]] = zg.linear %[[ER]], %[[W]] {trans_w = true} : (tensor<2x3x8xf32>, tensor<3x8xf32>) -> tensor<2x3x3xf32>
// CHECK: %[[G:.*]] = zd.all_gather %[[L]] {axis = "tp", dim = 2 : i64} : tensor<2x3x3xf32> -> tensor<2x3x12xf32>
// CHECK: %[[S:.*]] = zg.slice %[[G]] {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x3x12xf32>) -> tensor<2x3x10xf32>
// CHECK: return %[[S]] : tensor<2x3x10xf32>
// KEEP-LABEL: func.func @vocab
// KEEP-SAME: -> tensor<2x3x3xf32>
// KEEP-NOT: zd.all_gather
// KEEP: return %{{.*}} : tensor<2x3x3xf32>
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @vocab(%ids: tensor<2x3xi64>) -> tensor<2x3x10xf32> {
  %w = zg.weight {name = "wte", file = "m.data", offset = 0 : i64, length = 320 : i64, zd.result_shardings = [#zd.sharding<[tp, _]>]} : () -> tensor<10x8xf32>
  %e = zg.embedding %w, %ids {zd.result_shardings = [#zd.sharding<[_, _, _], partial>]} : (tensor<10x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %l = zg.linear %e, %w {trans_w = true, zd.result_shardings = [#zd.sharding<[_, _, tp]>]} : (tensor<2x3x8xf32>, tensor<10x8xf32>) -> tensor<2x3x10xf32>
  return %l : tensor<2x3x10xf32>
}
}

// -----

// Tests that K/V heads replicated over pairs of ranks (tp:2 at tp = 4) give
// ranks 0-1 the first head and ranks 2-3 the second.
// CHECK-LABEL: func.func @gqa_weight
// CHECK: zg.weight {{.*}}zd.pieces = {{\[\[}}{dst_start = array<i64: 0, 0>, size = array<i64: 64, 16>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 64, 16>, src_start = array<i64: 0, 0>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 64, 16>, src_start = array<i64: 0, 16>}], [{dst_start = array<i64: 0, 0>, size = array<i64: 64, 16>, src_start = array<i64: 0, 16>}]]{{.*}} -> tensor<64x16xf32>
// CHECK: zg.linear {{.*}} -> tensor<1x8x16xf32>
// CHECK: zg.reshape {{.*}} -> tensor<1x8x1x16xf32>
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @gqa_weight(%x: tensor<1x8x64xf32>) -> tensor<1x8x2x16xf32> {
  %wk = zg.weight {name = "k", file = "m.data", offset = 0 : i64, length = 8192 : i64, zd.result_shardings = [#zd.sharding<[_, tp:2]>]} : () -> tensor<64x32xf32>
  %k = zg.linear %x, %wk {zd.result_shardings = [#zd.sharding<[_, _, tp:2]>]} : (tensor<1x8x64xf32>, tensor<64x32xf32>) -> tensor<1x8x32xf32>
  %k4 = zg.reshape %k {zd.result_shardings = [#zd.sharding<[_, _, tp:2, _]>]} : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  return %k4 : tensor<1x8x2x16xf32>
}
}

// -----

// Tests that a value split into fused segments that a consumer needs whole is
// gathered and put back in segment order.
// CHECK-LABEL: func.func @regather_segments
// CHECK: %[[G:.*]] = zd.all_gather %{{.*}} {axis = "tp", dim = 1 : i64} : tensor<4x6xf32> -> tensor<4x12xf32>
// CHECK: %[[R:.*]] = zg.reshape %[[G]] : (tensor<4x12xf32>) -> tensor<4x2x3x2xf32>
// CHECK: %[[T:.*]] = zg.transpose %[[R]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x2x3x2xf32>) -> tensor<4x3x2x2xf32>
// CHECK: %[[W:.*]] = zg.reshape %[[T]] : (tensor<4x3x2x2xf32>) -> tensor<4x12xf32>
// CHECK: zg.neg %[[W]]
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @regather_segments(%x: tensor<4x4xf32>) -> tensor<4x12xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 192 : i64, zd.result_shardings = [#zd.sharding<[_, tp], segments = [4, 4, 4]>]} : () -> tensor<4x12xf32>
  %a = zg.linear %x, %w {zd.result_shardings = [#zd.sharding<[_, tp], segments = [4, 4, 4]>]} : (tensor<4x4xf32>, tensor<4x12xf32>) -> tensor<4x12xf32>
  %b = zg.neg %a {zd.operand_shardings = [#zd.sharding<[_, _]>]} : (tensor<4x12xf32>) -> tensor<4x12xf32>
  return %b : tensor<4x12xf32>
}
}

// -----

// Tests that a value cut into fewer blocks than ranks is gathered keeping one
// copy of each block.
// CHECK-LABEL: func.func @regather_blocks
// CHECK: %[[G:.*]] = zd.all_gather %{{.*}} {axis = "tp", dim = 1 : i64} : tensor<4x2xf32> -> tensor<4x8xf32>
// CHECK: %[[R:.*]] = zg.reshape %[[G]] : (tensor<4x8xf32>) -> tensor<4x2x2x2xf32>
// CHECK: %[[S:.*]] = zg.slice %[[R]] {{.*}} -> tensor<4x2x1x2xf32>
// CHECK: zg.reshape %[[S]] : (tensor<4x2x1x2xf32>) -> tensor<4x4xf32>
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @regather_blocks(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 64 : i64, zd.result_shardings = [#zd.sharding<[_, tp:2]>]} : () -> tensor<4x4xf32>
  %a = zg.linear %x, %w {zd.result_shardings = [#zd.sharding<[_, tp:2]>]} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %b = zg.neg %a {zd.operand_shardings = [#zd.sharding<[_, _]>]} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %b : tensor<4x4xf32>
}
}

// -----

// Tests that a weight two consumers need in different shardings is loaded
// twice, each copy sliced its own way, and that a graph without annotations
// is left alone.
// CHECK-LABEL: func.func @two_uses
// CHECK-DAG: zg.weight {file = "", length = 0 : i64, name = "b", offset = 0 : i64, value = dense<0.000000e+00> : tensor<8xf32>} : () -> tensor<8xf32>
// CHECK-DAG: zg.weight {{.*}}name = "b"{{.*}}zd.source_shape = array<i64: 8>} : () -> tensor<4xf32>
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: zd.
// CHECK: return
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @two_uses(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %b = zg.weight {name = "b", file = "", offset = 0 : i64, length = 0 : i64, value = dense<0.0> : tensor<8xf32>, zd.result_shardings = [#zd.sharding<[tp]>]} : () -> tensor<8xf32>
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 256 : i64, zd.result_shardings = [#zd.sharding<[_, tp]>]} : () -> tensor<8x8xf32>
  %h = zg.linear %x, %w, %b {zd.result_shardings = [#zd.sharding<[_, tp]>]} : (tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %z = zg.add %y, %b {zd.operand_shardings = [#zd.sharding<[_, _]>, #zd.sharding<[_]>]} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %h, %z : tensor<2x8xf32>, tensor<2x8xf32>
}
func.func @untouched(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %n = zg.neg %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %n : tensor<2x8xf32>
}
}
