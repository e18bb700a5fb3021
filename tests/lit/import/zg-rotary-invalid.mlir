// RUN: zplan-opt %s --split-input-file -verify-diagnostics

// Tests that zg.rotary needs an even last dim.
func.func @odd(%x: tensor<2x5xf32>, %c: tensor<5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{input must have rank >= 1 and an even last dim, got [2x5]}}
  %0 = zg.rotary %x, %c, %c : (tensor<2x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// Tests that cos and sin must have one type.
func.func @tables_differ(%x: tensor<2x4xf32>, %c: tensor<4xf32>, %s: tensor<1x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{cos 'tensor<4xf32>' and sin 'tensor<1x4xf32>' differ in type}}
  %0 = zg.rotary %x, %c, %s : (tensor<2x4xf32>, tensor<4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests that the tables must broadcast to the input with its last dim.
func.func @table_dim(%x: tensor<2x4xf32>, %c: tensor<2x1xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{cos and sin [2x1] must broadcast to the input [2x4] with the same last dim}}
  %0 = zg.rotary %x, %c, %c : (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests that tables larger than the input are refused.
func.func @table_larger(%x: tensor<2x4xf32>, %c: tensor<3x2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{cos and sin [3x2x4] must broadcast to the input [2x4] with the same last dim}}
  %0 = zg.rotary %x, %c, %c : (tensor<2x4xf32>, tensor<3x2x4xf32>, tensor<3x2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests that the result has the input's type.
func.func @result(%x: tensor<2x4xf32>, %c: tensor<4xf32>) -> tensor<2x4xf16> {
  // expected-error @+1 {{result type must equal the input type}}
  %0 = zg.rotary %x, %c, %c : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf16>
  return %0 : tensor<2x4xf16>
}

// -----

// Tests that integer tensors are refused.
func.func @ints(%x: tensor<2x4xi64>, %c: tensor<4xf32>) -> tensor<2x4xi64> {
  // expected-error @+1 {{input, cos and sin must be float tensors}}
  %0 = zg.rotary %x, %c, %c : (tensor<2x4xi64>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xi64>
  return %0 : tensor<2x4xi64>
}
