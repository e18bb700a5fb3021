// RUN: zplan-opt --split-input-file --zplan-tp-propagate %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-tp-propagate --zplan-tp-partition %s | FileCheck %s --check-prefix=PART

// Tests that zg.rotary is local under tp: with the heads split (the query
// heads over 4 ranks, llama's 2 K/V heads one per pair of ranks), each rank
// rotates its own heads with the whole tables, and no collective is added
// before the attention.
// CHECK-LABEL: func.func @gqa_rotary
// CHECK: zg.rotary {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// CHECK: zg.rotary {{.*}}zd.result_shardings = [#zd.sharding<[_, tp:2, _, _]>]
// CHECK: zg.attention {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// PART-LABEL: func.func @gqa_rotary
// PART-NOT: zd.all_gather
// PART: zg.rotary %{{.*}}, %arg1, %arg2 : (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x1x8x16xf32>
// PART-NOT: zd.all_gather
// PART: zg.rotary %{{.*}}, %arg1, %arg2 : (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x1x8x16xf32>
// PART-NOT: zd.all_gather
// PART: zg.attention
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @gqa_rotary(%x: tensor<1x8x64xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<1x8x64xf32> {
  %wq = zg.weight {name = "q", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %wk = zg.weight {name = "k", file = "m.data", offset = 0 : i64, length = 8192 : i64} : () -> tensor<32x64xf32>
  %wv = zg.weight {name = "v", file = "m.data", offset = 0 : i64, length = 8192 : i64} : () -> tensor<32x64xf32>
  %wo = zg.weight {name = "o", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %q = zg.linear %x, %wq {trans_w = true} : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  %k = zg.linear %x, %wk {trans_w = true} : (tensor<1x8x64xf32>, tensor<32x64xf32>) -> tensor<1x8x32xf32>
  %v = zg.linear %x, %wv {trans_w = true} : (tensor<1x8x64xf32>, tensor<32x64xf32>) -> tensor<1x8x32xf32>
  %q4 = zg.reshape %q : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %k4 = zg.reshape %k : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %v4 = zg.reshape %v : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %qt = zg.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = zg.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %vt = zg.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %qr = zg.rotary %qt, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %kr = zg.rotary %kt, %cos, %sin : (tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32>
  %a = zg.attention %qr, %kr, %vt {scale = 0.25 : f64, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %at = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %a2 = zg.reshape %at : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
  %o = zg.linear %a2, %wo {trans_w = true} : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  return %o : tensor<1x8x64xf32>
}
}

// -----

// Tests that a rotary whose last dim is split (the rotated dim pairs
// elements of both halves) is computed whole: its operand is gathered.
// CHECK-LABEL: func.func @split_last_dim
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, _, tp]>]
// CHECK: zg.rotary
// CHECK-NOT: zd.result_shardings = [#zd.sharding<[_, _, tp]>]
// CHECK: return
// PART-LABEL: func.func @split_last_dim
// PART: zd.all_gather
// PART: zg.rotary %{{.*}} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @split_last_dim(%x: tensor<2x8x64xf32>, %cos: tensor<64xf32>, %sin: tensor<64xf32>) -> tensor<2x8x64xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %h = zg.linear %x, %w1 : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %r = zg.rotary %h, %cos, %sin : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return %r : tensor<2x8x64xf32>
}
}
