// RUN: zplan-opt --split-input-file --zplan-tp-propagate --verify-diagnostics %s

// Tests that a tp that does not divide the query heads is an error naming
// the heads dimension.
module attributes {zd.tp = 3 : i64} {
func.func @heads(%x: tensor<1x8x64xf32>, %k: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %wq = zg.weight {name = "q", file = "m.data", offset = 0 : i64, length = 16384 : i64} : () -> tensor<64x64xf32>
  %q = zg.linear %x, %wq : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
  // expected-error @+1 {{tp = 3 does not divide the 4 query heads (dimension 2 of 'tensor<1x8x4x16xf32>')}}
  %q4 = zg.reshape %q : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = zg.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %a = zg.attention %qt, %k, %k {scale = 0.25 : f64, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %a : tensor<1x4x8x16xf32>
}
}

// -----

// Tests that K/V heads that tp neither divides nor is a multiple of are an
// error.
module attributes {zd.tp = 2 : i64} {
func.func @kv_heads(%x: tensor<1x8x64xf32>, %q: tensor<1x6x8x16xf32>) -> tensor<1x6x8x16xf32> {
  %wk = zg.weight {name = "k", file = "m.data", offset = 0 : i64, length = 12288 : i64} : () -> tensor<64x48xf32>
  %k = zg.linear %x, %wk : (tensor<1x8x64xf32>, tensor<64x48xf32>) -> tensor<1x8x48xf32>
  // expected-error @+1 {{tp = 2 does not divide the 3 key/value heads (dimension 2 of 'tensor<1x8x3x16xf32>'); tp must divide them or be a multiple of them}}
  %k4 = zg.reshape %k : (tensor<1x8x48xf32>) -> tensor<1x8x3x16xf32>
  %kt = zg.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x3x16xf32>) -> tensor<1x3x8x16xf32>
  %a = zg.attention %q, %kt, %kt {scale = 0.25 : f64, causal = true} : (tensor<1x6x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x3x8x16xf32>) -> tensor<1x6x8x16xf32>
  return %a : tensor<1x6x8x16xf32>
}
}

// -----

// Tests that a tp that does not divide the hidden (output feature) size of a
// column-parallel linear is an error naming the dimension.
module attributes {zd.tp = 4 : i64} {
func.func @hidden(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 1536 : i64} : () -> tensor<64x6xf32>
  %w2 = zg.weight {name = "fc2", file = "m.data", offset = 0 : i64, length = 1536 : i64} : () -> tensor<6x64xf32>
  // expected-error @+1 {{tp = 4 does not divide the hidden size 6 (output features, dimension 1 of weight 'tensor<64x6xf32>')}}
  %h = zg.linear %x, %w1 : (tensor<2x64xf32>, tensor<64x6xf32>) -> tensor<2x6xf32>
  %y = zg.linear %h, %w2 : (tensor<2x6xf32>, tensor<6x64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}
}

// -----

// Tests that a fused projection whose query heads split over tp while its
// K/V heads must be replicated is refused.
module attributes {zd.tp = 4 : i64} {
func.func @fused_gqa(%x: tensor<8x64xf32>) -> tensor<1x4x8x16xf32> {
  %w = zg.weight {name = "qkv", file = "m.data", offset = 0 : i64, length = 32768 : i64} : () -> tensor<64x128xf32>
  // expected-error @+1 {{fused projection mixes query heads split over tp = 4 with key/value heads replicated over 2 ranks}}
  %qkv = zg.linear %x, %w : (tensor<8x64xf32>, tensor<64x128xf32>) -> tensor<8x128xf32>
  %q, %k, %v = zg.split %qkv {axis = 1 : i64} : (tensor<8x128xf32>) -> (tensor<8x64xf32>, tensor<8x32xf32>, tensor<8x32xf32>)
  %q4 = zg.reshape %q : (tensor<8x64xf32>) -> tensor<8x4x16xf32>
  %k4 = zg.reshape %k : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
  %v4 = zg.reshape %v : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
  %qt = zg.transpose %q4 {perm = array<i64: 1, 0, 2>} : (tensor<8x4x16xf32>) -> tensor<4x8x16xf32>
  %kt = zg.transpose %k4 {perm = array<i64: 1, 0, 2>} : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
  %vt = zg.transpose %v4 {perm = array<i64: 1, 0, 2>} : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
  %q1 = zg.reshape %qt : (tensor<4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %k1 = zg.reshape %kt : (tensor<2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %v1 = zg.reshape %vt : (tensor<2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %a = zg.attention %q1, %k1, %v1 {scale = 0.25 : f64, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %a : tensor<1x4x8x16xf32>
}
}

// -----

// Tests that a mesh with a tp size below 1 is refused.
// expected-error @+1 {{zd.tp must be at least 1, got 0}}
module attributes {zd.tp = 0 : i64} {
}

// -----

// Tests that a matmul by a weight follows the linear rules, errors included.
module attributes {zd.tp = 4 : i64} {
func.func @matmul_hidden(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
  %w1 = zg.weight {name = "fc1", file = "m.data", offset = 0 : i64, length = 1536 : i64} : () -> tensor<64x6xf32>
  %w2 = zg.weight {name = "fc2", file = "m.data", offset = 0 : i64, length = 1536 : i64} : () -> tensor<6x64xf32>
  // expected-error @+1 {{tp = 4 does not divide the hidden size 6 (output features, dimension 1 of weight 'tensor<64x6xf32>')}}
  %h = zg.matmul %x, %w1 : (tensor<2x64xf32>, tensor<64x6xf32>) -> tensor<2x6xf32>
  %y = zg.matmul %h, %w2 : (tensor<2x6xf32>, tensor<6x64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}
}

// -----

// Tests that a split operand reaching an op with no tp rule (here func.call)
// is refused, naming the op and the split, instead of passing through as if
// the op could take it.
module attributes {zd.tp = 2 : i64} {
func.func private @ext(tensor<2x256xf32>) -> tensor<2x256xf32>
func.func @no_rule(%x: tensor<2x64xf32>) -> tensor<2x256xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 65536 : i64} : () -> tensor<64x256xf32>
  %h = zg.linear %x, %w : (tensor<2x64xf32>, tensor<64x256xf32>) -> tensor<2x256xf32>
  // expected-error @+1 {{'func.call' op has no tensor-parallel rule, but its operand 0 arrives split as #zd.sharding<[_, tp]> at tp = 2; give the op a rule (TpShardingOpInterface), or keep the value whole before it}}
  %y = func.call @ext(%h) : (tensor<2x256xf32>) -> tensor<2x256xf32>
  return %y : tensor<2x256xf32>
}
}
