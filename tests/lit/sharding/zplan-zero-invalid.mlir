// RUN: zplan-opt --split-input-file --zplan-zero="stage=3" --verify-diagnostics %s

// Tests that a global batch dp does not divide is an error naming both.
module attributes {zd.dp = 2 : i64} {
// expected-error @+1 {{the global batch 3 of input 'input_ids' does not divide over dp = 2 data-parallel ranks; pick --batch as a multiple of 2}}
func.func @batch(%x: tensor<3x4xf32> {zg.name = "input_ids"}) -> tensor<3x4xf32> {
  return %x : tensor<3x4xf32>
}
}

// -----

// Tests that an op that reduces over the batch cannot be split over dp.
module attributes {zd.dp = 2 : i64} {
func.func @reduce(%x: tensor<4x4xf32>, %w: tensor<16x16xf32>) -> tensor<1x4xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the batch dimension is reduced}}
  %r = zg.reduce_sum %x {axes = array<i64: 0>, keepdims = true} : (tensor<4x4xf32>) -> tensor<1x4xf32>
  return %r : tensor<1x4xf32>
}
}

// -----

// Tests that a concatenation along the batch cannot be split.
module attributes {zd.dp = 2 : i64} {
func.func @concat(%x: tensor<4x2xf32>) -> tensor<8x2xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the op works along the batch dimension}}
  %c = zg.concat %x, %x {axis = 0 : i64} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  return %c : tensor<8x2xf32>
}
}

// -----

// Tests that operands carrying the batch in different dimensions are refused.
module attributes {zd.dp = 2 : i64} {
func.func @mixed(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  // expected-error @+1 {{cannot split the batch over dp = 2: operands carry the batch in different dimensions}}
  %a = zg.add %x, %t : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}
}

// -----

// Tests that a linear over the batch dimension is refused.
module attributes {zd.dp = 2 : i64} {
func.func @linear(%x: tensor<4xf32>) -> tensor<8xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 128 : i64} : () -> tensor<4x8xf32>
  // expected-error @+1 {{cannot split the batch over dp = 2: the batch is not a leading dimension of the input}}
  %y = zg.linear %x, %w : (tensor<4xf32>, tensor<4x8xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}
}

// -----

// Tests that a product contracting the batch is refused.
module attributes {zd.dp = 2 : i64} {
func.func @contract(%x: tensor<4x4xf32>) -> tensor<3x4xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 48 : i64} : () -> tensor<3x4xf32>
  // expected-error @+1 {{cannot split the batch over dp = 2: the batch is in the contracted dimension}}
  %y = zg.matmul %w, %x : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}
}

// -----

// Tests that a 1-D matmul operand cannot carry the batch.
module attributes {zd.dp = 2 : i64} {
func.func @vector(%x: tensor<4xf32>, %w: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: a 1-D matmul operand}}
  %y = zg.matmul %x, %w : (tensor<4xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
}

// -----

// Tests that attention needs the batch in dimension 0 of q, k and v.
module attributes {zd.dp = 2 : i64} {
func.func @attention(%q: tensor<4x2x8x4xf32>) -> tensor<4x2x8x4xf32> {
  %k = zg.constant {value = dense<0.0> : tensor<4x2x8x4xf32>} : () -> tensor<4x2x8x4xf32>
  // expected-error @+1 {{cannot split the batch over dp = 2: q, k and v must carry the batch in dimension 0}}
  %a = zg.attention %q, %k, %k {scale = 1.0 : f64, causal = true} : (tensor<4x2x8x4xf32>, tensor<4x2x8x4xf32>, tensor<4x2x8x4xf32>) -> tensor<4x2x8x4xf32>
  return %a : tensor<4x2x8x4xf32>
}
}

// -----

// Tests that normalising over the batch is refused.
module attributes {zd.dp = 2 : i64} {
func.func @softmax(%x: tensor<4x2xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the batch dimension is normalised over}}
  %s = zg.softmax %x {axis = 0 : i64} : (tensor<4x2xf32>) -> tensor<4x2xf32>
  return %s : tensor<4x2xf32>
}
}

// -----

// Tests that a reshape that moves the batch out of an outermost dimension is
// refused.
module attributes {zd.dp = 2 : i64} {
func.func @reshape(%x: tensor<4x3xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the reshape moves the batch out of an outermost dimension}}
  %r = zg.reshape %x : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}
}

// -----

// Tests that a slice cannot take part of the batch.
module attributes {zd.dp = 2 : i64} {
func.func @slice(%x: tensor<4x2xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the slice takes part of the batch}}
  %s = zg.slice %x {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<4x2xf32>) -> tensor<2x2xf32>
  return %s : tensor<2x2xf32>
}
}

// -----

// Tests that a split cannot cut the batch dimension.
module attributes {zd.dp = 2 : i64} {
func.func @split(%x: tensor<4x2xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: the split cuts the batch dimension}}
  %a, %b = zg.split %x {axis = 0 : i64} : (tensor<4x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)
  return %a : tensor<2x2xf32>
}
}

// -----

// Tests that an embedding table cannot carry the batch.
// Tests the lookups that cannot keep the batch split.
module attributes {zd.dp = 2 : i64} {
func.func @table(%t: tensor<4x8xf32>) -> tensor<3x8xf32> {
  %ids = zg.constant {value = dense<[0, 1, 2]> : tensor<3xi64>} : () -> tensor<3xi64>
  // expected-error @+1 {{cannot split the batch over dp = 2: the embedding table carries the batch}}
  %e = zg.embedding %t, %ids : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return %e : tensor<3x8xf32>
}
}

// -----

// Tests that a gather cannot index the batch dimension.
module attributes {zd.dp = 2 : i64} {
func.func @gather_axis(%x: tensor<4x8xf32>) -> tensor<3x8xf32> {
  %ids = zg.constant {value = dense<[0, 1, 2]> : tensor<3xi64>} : () -> tensor<3xi64>
  // expected-error @+1 {{cannot split the batch over dp = 2: the gather indexes the batch dimension}}
  %g = zg.gather %x, %ids {axis = 0 : i64} : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return %g : tensor<3x8xf32>
}
}

// -----

// Tests that data and indices of a gather cannot both carry the batch.
module attributes {zd.dp = 2 : i64} {
func.func @gather_both(%x: tensor<4x8xf32>, %ids: tensor<4xi64>) -> tensor<4x4xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: both data and indices carry the batch}}
  %g = zg.gather %x, %ids {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}
}

// -----

// Tests that an op without a batch rule is refused, naming the op.
module attributes {zd.dp = 2 : i64, zd.tp = 1 : i64} {
func.func @unknown(%x: tensor<4x2xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{cannot split the batch over dp = 2: no batch rule for this op}}
  %r = zd.reduce_scatter %x {axis = "dp", dim = 1 : i64} : tensor<4x2xf32> -> tensor<4x1xf32>
  %s = zg.slice %r {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<4x1xf32>) -> tensor<2x1xf32>
  %t = zg.concat %s, %s {axis = 1 : i64} : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x2xf32>
  return %t : tensor<2x2xf32>
}
}

// -----

// Tests that a result must carry the batch in dimension 0.
module attributes {zd.dp = 2 : i64} {
func.func @result(%x: tensor<4x2xf32>) -> tensor<2x4xf32> {
  %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  // expected-error @+1 {{result 0 carries the batch in dimension 1, not 0}}
  return %t : tensor<2x4xf32>
}
}
