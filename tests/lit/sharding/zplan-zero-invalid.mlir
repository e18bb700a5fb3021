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
