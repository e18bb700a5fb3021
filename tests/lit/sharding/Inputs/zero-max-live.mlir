// Tests that a parameter larger than max-live-bytes is an error naming it.
module attributes {zd.dp = 2 : i64} {
func.func @live(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{parameter 'w' needs 1024 bytes gathered, more than --max-live-bytes = 512}}
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h = zg.linear %x, %w : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %h : tensor<2x16xf32>
}
}
