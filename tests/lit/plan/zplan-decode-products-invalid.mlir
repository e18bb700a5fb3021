// RUN: zplan-opt %s --split-input-file --verify-diagnostics

// Tests the verifiers of the fused few-row products: linear_multi takes two
// to four weights, one result per weight, each result x's shape with the
// weight's N; linear_gated takes one of three activations and two weights of
// one shape.
func.func @one_weight(%x: tensor<1x8xf32>, %w: tensor<8x4xf32>) -> tensor<1x4xf32> {
  // expected-error @+1 {{takes two to four weights, got 1}}
  %r = zg.linear_multi %x, %w : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  return %r : tensor<1x4xf32>
}

// -----

func.func @bad_result(%x: tensor<1x8xf32>, %a: tensor<8x4xf32>, %b: tensor<8x2xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  // expected-error @+1 {{result shape should be [1x2]}}
  %r:2 = zg.linear_multi %x, %a, %b : (tensor<1x8xf32>, tensor<8x4xf32>, tensor<8x2xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  return %r#0, %r#1 : tensor<1x4xf32>, tensor<1x4xf32>
}

// -----

func.func @bad_k(%x: tensor<1x8xf32>, %a: tensor<8x4xf32>, %b: tensor<6x2xf32>) -> (tensor<1x4xf32>, tensor<1x2xf32>) {
  // expected-error @+1 {{input's last dim 8 does not match a weight's K = 6}}
  %r:2 = zg.linear_multi %x, %a, %b : (tensor<1x8xf32>, tensor<8x4xf32>, tensor<6x2xf32>) -> (tensor<1x4xf32>, tensor<1x2xf32>)
  return %r#0, %r#1 : tensor<1x4xf32>, tensor<1x2xf32>
}

// -----

func.func @bad_act(%x: tensor<1x8xf32>, %g: tensor<8x4xf32>, %u: tensor<8x4xf32>) -> tensor<1x4xf32> {
  // expected-error @+1 {{act must be silu, gelu_tanh or gelu_erf, got relu}}
  %r = zg.linear_gated %x, %g, %u {act = "relu"} : (tensor<1x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  return %r : tensor<1x4xf32>
}

// -----

func.func @bad_up(%x: tensor<1x8xf32>, %g: tensor<8x4xf32>, %u: tensor<8x2xf32>) -> tensor<1x4xf32> {
  // expected-error @+1 {{gate and up weights must have one shape}}
  %r = zg.linear_gated %x, %g, %u {act = "silu"} : (tensor<1x8xf32>, tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<1x4xf32>
  return %r : tensor<1x4xf32>
}
