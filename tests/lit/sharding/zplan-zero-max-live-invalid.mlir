// RUN: zplan-opt --split-input-file --zplan-zero="stage=3 max-live-bytes=1536" --verify-diagnostics %s

// Tests that a parameter larger than max-live-bytes is an error naming it.
module attributes {zd.dp = 2 : i64} {
func.func @live(%x: tensor<2x32xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{parameter 'w' needs 2048 bytes gathered, more than --max-live-bytes = 1536}}
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 2048 : i64} : () -> tensor<32x16xf32>
  %h = zg.linear %x, %w : (tensor<2x32xf32>, tensor<32x16xf32>) -> tensor<2x16xf32>
  return %h : tensor<2x16xf32>
}
}

// -----

// Tests that two parameters alive together beyond max-live-bytes are an
// error naming the one that does not fit.
module attributes {zd.dp = 2 : i64} {
func.func @pair(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %a = zg.weight {name = "a", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  // expected-error @+1 {{gathered parameters exceed --max-live-bytes = 1536 when 'b' is gathered (1024 bytes); raise the cap or lower --persist-threshold}}
  %b = zg.weight {name = "b", file = "m.data", offset = 1024 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h = zg.linear %x, %a : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %k = zg.linear %h, %b : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %y = zg.linear %k, %a : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}
}
