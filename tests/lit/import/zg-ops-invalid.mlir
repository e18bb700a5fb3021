// RUN: zplan-opt %s --split-input-file -verify-diagnostics

// Tests that binary ops check broadcasting.
func.func @bad_broadcast(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{operand shapes [2x3] and [2x4] do not broadcast}}
  %0 = zg.add %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests that binary ops check the result shape.
func.func @bad_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  // expected-error @+1 {{result shape [3x3] is not the broadcast shape [2x3]}}
  %0 = zg.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// Tests that matmul checks the contraction dims.
func.func @bad_matmul(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{contraction dims differ: 3 vs 4}}
  %0 = zg.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// Tests that linear checks K against the weight layout.
func.func @bad_linear(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{input's last dim 8 does not match the weight's K = 16}}
  %0 = zg.linear %x, %w {trans_w = true} : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that linear checks the bias shape.
func.func @bad_bias(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{bias must have shape [16]}}
  %0 = zg.linear %x, %w, %b : (tensor<2x8xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

// Tests that attention checks the head grouping.
func.func @bad_heads(%q: tensor<1x3x4x2xf32>, %kv: tensor<1x2x4x2xf32>) -> tensor<1x3x4x2xf32> {
  // expected-error @+1 {{query heads (3) are not a multiple of kv heads (2)}}
  %0 = zg.attention %q, %kv, %kv {causal = false, scale = 1.0 : f64} : (tensor<1x3x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> tensor<1x3x4x2xf32>
  return %0 : tensor<1x3x4x2xf32>
}

// -----

// Tests that attention checks the mask shape.
func.func @bad_mask(%q: tensor<1x2x4x2xf32>, %m: tensor<1x1x4x5xf32>) -> tensor<1x2x4x2xf32> {
  // expected-error @+1 {{mask does not broadcast to the scores [1x2x4x4]}}
  %0 = zg.attention %q, %q, %q, %m {causal = false, scale = 1.0 : f64} : (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x1x4x5xf32>) -> tensor<1x2x4x2xf32>
  return %0 : tensor<1x2x4x2xf32>
}

// -----

// Tests that transpose checks its permutation.
func.func @bad_perm(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{perm is not a permutation}}
  %0 = zg.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// Tests that reshape keeps the element count.
func.func @bad_reshape(%x: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{element counts differ: 6 vs 7}}
  %0 = zg.reshape %x : (tensor<2x3xf32>) -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

// Tests that slice stays inside the input.
func.func @bad_slice(%x: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{dim 0 reads outside [0, 4)}}
  %0 = zg.slice %x {starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Tests that split sizes add up.
func.func @bad_split(%x: tensor<8xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{split sizes add up to 6, input has 8}}
  %0:2 = zg.split %x {axis = 0 : i64} : (tensor<8xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  return %0#0 : tensor<3xf32>
}

// -----

// Tests that concat checks its sizes.
func.func @bad_concat(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{sizes along axis add up to 7, result has 8}}
  %0 = zg.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that reductions check their axes.
func.func @bad_axes(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{axis 2 out of range for rank 2}}
  %0 = zg.reduce_sum %x {axes = array<i64: 2>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that gelu checks its approximation.
func.func @bad_gelu(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = zg.gelu %x {approximate = "fast"} : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that a weight's byte length matches its type.
func.func @bad_weight() -> tensor<4x4xf32> {
  // expected-error @+1 {{length 60 does not match the type's 64 bytes}}
  %0 = zg.weight {file = "w.bin", length = 60 : i64, name = "w", offset = 0 : i64} : () -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// Tests that a weight has a file or an inline value.
func.func @bad_weight_source() -> tensor<4xf32> {
  // expected-error @+1 {{needs a file or an inline value}}
  %0 = zg.weight {file = "", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that a layer norm's scale matches the normalised dims.
func.func @bad_layer_norm(%x: tensor<2x8xf32>, %g: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{scale does not broadcast to the normalised dims [8]}}
  %0 = zg.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that the embedding's result shape is ids.shape + [D].
func.func @bad_embedding(%t: tensor<32x8xf32>, %ids: tensor<4xi64>) -> tensor<4x9xf32> {
  // expected-error @+1 {{result shape should be [4x8]}}
  %0 = zg.embedding %t, %ids : (tensor<32x8xf32>, tensor<4xi64>) -> tensor<4x9xf32>
  return %0 : tensor<4x9xf32>
}

// -----

// Tests that every zg value is statically shaped.
func.func @dynamic(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = zg.neg %x : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}
