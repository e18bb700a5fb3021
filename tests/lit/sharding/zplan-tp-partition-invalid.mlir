// RUN: zplan-opt --split-input-file --zplan-tp-partition --verify-diagnostics %s

// Tests that a whole activation cannot be cut into fewer blocks than ranks:
// zd.local_slice keeps one part per rank.
module attributes {zd.tp = 4 : i64} {
func.func @resplit(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{cannot keep one of 2 blocks of a whole value over tp = 4 ranks (blocks shared by several ranks)}}
  %n = zg.neg %x {zd.operand_shardings = [#zd.sharding<[_, tp:2]>]} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %n : tensor<2x8xf32>
}
}

// -----

// Tests that fused segments of different sizes cannot be gathered whole.
module attributes {zd.tp = 2 : i64} {
func.func @segments(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 256 : i64, zd.result_shardings = [#zd.sharding<[_, tp], segments = [4, 2, 2]>]} : () -> tensor<8x8xf32>
  %a = zg.linear %x, %w {zd.result_shardings = [#zd.sharding<[_, tp], segments = [4, 2, 2]>]} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  // expected-error @+1 {{cannot make a value of unequal fused segments whole (segments of different sizes)}}
  %b = zg.neg %a {zd.operand_shardings = [#zd.sharding<[_, _]>]} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %b : tensor<2x8xf32>
}
}
