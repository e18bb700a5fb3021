// RUN: zplan-opt --split-input-file --zplan-tp-propagate %s | FileCheck %s

// Tests that an MLP pair becomes column-parallel then row-parallel, and that
// the row-parallel result is a partial sum.
// CHECK-LABEL: func.func @mlp
// CHECK: zg.weight {{.*}}name = "fc1"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.weight {{.*}}name = "fc1.b"{{.*}}zd.result_shardings = [#zd.sharding<[tp]>]
// CHECK: zg.weight {{.*}}name = "fc2"{{.*}}zd.result_shardings = [#zd.sharding<[tp, _]>]
// CHECK: zg.weight {{.*}}name = "fc2.b", offset = 132096 : i64} :
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, _, tp]>]
// CHECK: zg.gelu {{.*}}zd.result_shardings = [#zd.sharding<[_, _, tp]>]
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, _, _], partial>]
// CHECK: zg.add
// CHECK-NOT: zd.
// CHECK: return
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @mlp(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 65536 : i64} : () -> tensor<64x256xf32>
  %b1 = zg.weight {name = "fc1.b", file = "m.data", offset = 65536 : i64, length = 1024 : i64} : () -> tensor<256xf32>
  %w2 = zg.weight {name = "fc2", file = "m.data", offset = 66560 : i64, length = 65536 : i64} : () -> tensor<256x64xf32>
  %b2 = zg.weight {name = "fc2.b", file = "m.data", offset = 132096 : i64, length = 256 : i64} : () -> tensor<64xf32>
  %h = zg.linear %x, %w1, %b1 : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
  %g = zg.gelu %h {approximate = "tanh"} : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %y = zg.linear %g, %w2, %b2 : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %r = zg.add %x, %y : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}
}

// -----

// Tests that GQA attention at tp = 4 splits the 4 query heads over tp and
// gives each of the 2 K/V heads to the 2 ranks whose query heads use it.
// CHECK-LABEL: func.func @gqa
// CHECK: name = "q"{{.*}}#zd.sharding<[tp, _]>
// CHECK: name = "k"{{.*}}#zd.sharding<[tp:2, _]>
// CHECK: name = "v"{{.*}}#zd.sharding<[tp:2, _]>
// CHECK: name = "o"{{.*}}#zd.sharding<[_, tp]>
// CHECK: zg.attention {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// CHECK: zg.linear {{.*}}trans_w = true{{.*}}#zd.sharding<[_, _, _], partial>
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @gqa(%x: tensor<1x8x64xf32>) -> tensor<1x8x64xf32> {
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
  %a = zg.attention %qt, %kt, %vt {scale = 0.25 : f64, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %at = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %a2 = zg.reshape %at : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
  %o = zg.linear %a2, %wo {trans_w = true} : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  return %o : tensor<1x8x64xf32>
}
}

// -----

// Tests that a fused QKV projection is split per q/k/v segment and that the
// split into q, k and v keeps each part tp-split.
// CHECK-LABEL: func.func @fused_qkv
// CHECK: name = "c_attn"{{.*}}#zd.sharding<[_, tp], segments = [64, 64, 64]>
// CHECK: zg.linear {{.*}}#zd.sharding<[_, tp], segments = [64, 64, 64]>
// CHECK: zg.split {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>, #zd.sharding<[_, tp]>, #zd.sharding<[_, tp]>]
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @fused_qkv(%x: tensor<16x64xf32>) -> (tensor<16x4x16xf32>, tensor<16x4x16xf32>, tensor<16x4x16xf32>) {
  %w = zg.weight {name = "c_attn", file = "m.data", offset = 0 : i64, length = 49152 : i64} : () -> tensor<64x192xf32>
  %qkv = zg.linear %x, %w : (tensor<16x64xf32>, tensor<64x192xf32>) -> tensor<16x192xf32>
  %q, %k, %v = zg.split %qkv {axis = 1 : i64} : (tensor<16x192xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>)
  %q4 = zg.reshape %q : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %k4 = zg.reshape %k : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  %v4 = zg.reshape %v : (tensor<16x64xf32>) -> tensor<16x4x16xf32>
  return %q4, %k4, %v4 : tensor<16x4x16xf32>, tensor<16x4x16xf32>, tensor<16x4x16xf32>
}
}

// -----

// Tests that a tied token embedding and LM head are vocabulary-parallel with
// one sharding of the shared weight, also when tp does not divide the
// vocabulary (10 rows over 4 ranks: padded).
// CHECK-LABEL: func.func @tied
// CHECK: name = "wte"{{.*}}zd.result_shardings = [#zd.sharding<[tp, _]>]
// CHECK: zg.embedding {{.*}}zd.result_shardings = [#zd.sharding<[_, _, _], partial>]
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, _, tp]>]
module attributes {zd.tp = 4 : i64, zd.dp = 1 : i64} {
func.func @tied(%ids: tensor<2x3xi64>) -> tensor<2x3x10xf32> {
  %w = zg.weight {name = "wte", file = "m.data", offset = 0 : i64, length = 320 : i64} : () -> tensor<10x8xf32>
  %e = zg.embedding %w, %ids : (tensor<10x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %l = zg.linear %e, %w {trans_w = true} : (tensor<2x3x8xf32>, tensor<10x8xf32>) -> tensor<2x3x10xf32>
  return %l : tensor<2x3x10xf32>
}
}

// -----

// Tests that nothing is annotated with one tp rank.
// CHECK-LABEL: func.func @tp1
// CHECK-NOT: zd.
// CHECK: return
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @tp1(%x: tensor<2x64xf32>) -> tensor<2x256xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 65536 : i64} : () -> tensor<64x256xf32>
  %h = zg.linear %x, %w1 : (tensor<2x64xf32>, tensor<64x256xf32>) -> tensor<2x256xf32>
  return %h : tensor<2x256xf32>
}
}

// -----

// Tests that a product of two activations (no weight to split) and a
// position lookup (ids not from an input) stay whole.
// CHECK-LABEL: func.func @no_weights
// CHECK-NOT: zd.result_shardings
// CHECK: return
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @no_weights(%x: tensor<2x64xf32>, %y: tensor<64x8xf32>) -> (tensor<2x8xf32>, tensor<4x8xf32>) {
  %m = zg.matmul %x, %y : (tensor<2x64xf32>, tensor<64x8xf32>) -> tensor<2x8xf32>
  %pos = zg.constant {value = dense<[0, 1, 2, 3]> : tensor<4xi64>} : () -> tensor<4xi64>
  %wpe = zg.weight {name = "wpe", file = "m.data", offset = 0 : i64, length = 512 : i64} : () -> tensor<16x8xf32>
  %p = zg.embedding %wpe, %pos : (tensor<16x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  return %m, %p : tensor<2x8xf32>, tensor<4x8xf32>
}
}

// -----

// Tests that attention left as matmul / softmax / matmul keeps its heads
// split through batched products without any reshard.
// CHECK-LABEL: func.func @decomposed
// CHECK-NOT: zd.operand_shardings
// CHECK: zg.matmul {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// CHECK: zg.softmax {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// CHECK: zg.matmul {{.*}}zd.result_shardings = [#zd.sharding<[_, tp, _, _]>]
// CHECK-NOT: zd.operand_shardings
// CHECK: zg.linear {{.*}}#zd.sharding<[_, _, _], partial>
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @decomposed(%x: tensor<1x8x64xf32>) -> tensor<1x8x64xf32> {
  %wq = zg.weight {name = "q", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %wk = zg.weight {name = "k", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %wv = zg.weight {name = "v", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %wo = zg.weight {name = "o", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %q = zg.linear %x, %wq : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  %k = zg.linear %x, %wk : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  %v = zg.linear %x, %wv : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  %q4 = zg.reshape %q : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %k4 = zg.reshape %k : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %v4 = zg.reshape %v : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = zg.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = zg.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x16x8xf32>
  %vt = zg.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %s = zg.matmul %qt, %kt : (tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x8x8xf32>
  %p = zg.softmax %s {axis = 3 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %a = zg.matmul %p, %vt : (tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %at = zg.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %a2 = zg.reshape %at : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
  %o = zg.linear %a2, %wo : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  return %o : tensor<1x8x64xf32>
}
}

// -----

// Tests that an op whose rule is to run whole (zg.argmax) asks for its split
// operand whole, so that partition gathers it.
// CHECK-LABEL: func.func @whole_rule
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.argmax {{.*}}zd.operand_shardings = [#zd.sharding<[_, _]>]
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @whole_rule(%x: tensor<2x64xf32>) -> tensor<2xi64> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 65536 : i64} : () -> tensor<64x256xf32>
  %h = zg.linear %x, %w : (tensor<2x64xf32>, tensor<64x256xf32>) -> tensor<2x256xf32>
  %i = zg.argmax %h : (tensor<2x256xf32>) -> tensor<2xi64>
  return %i : tensor<2xi64>
}
}

// -----

// Tests that an op with no tp rule (here func.call) that only whole values
// reach is left alone: it computes whole results, as without tp.
// CHECK-LABEL: func.func @no_rule_whole
// CHECK: call @ext(%{{.*}}) : (tensor<2x64xf32>) -> tensor<2x64xf32>
// CHECK-NOT: zd.
// CHECK: return
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func private @ext(tensor<2x64xf32>) -> tensor<2x64xf32>
func.func @no_rule_whole(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
  %y = func.call @ext(%x) : (tensor<2x64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}
}
