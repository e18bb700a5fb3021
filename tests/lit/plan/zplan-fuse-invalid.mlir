// RUN: zplan-opt %s --split-input-file --verify-diagnostics

// Tests the verifier of zg.linear_residual, the op --zplan-fuse writes: the
// residual has the result's type, the bias is [N] of the input's element
// type, and the product is zg.linear's.
func.func @residual_type(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %r: tensor<4x5xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{residual and result must have one type}}
  %y = zg.linear_residual %x, %w, %r : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<4x5xf32>) -> tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}

// -----

func.func @bias_shape(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %r: tensor<4x6xf32>, %b: tensor<5xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{bias must be [6] of the input's element type}}
  %y = zg.linear_residual %x, %w, %r, %b : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<4x6xf32>, tensor<5xf32>) -> tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}

// -----

func.func @bad_k(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{input's last dim 8 does not match a weight's K = 6}}
  %y = zg.linear_residual %x, %w, %r : (tensor<4x8xf32>, tensor<6x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
