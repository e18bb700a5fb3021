// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-attention))' -verify-diagnostics

// Tests that a causal mask that no attention absorbs is reported: the
// runtime has no kernel for zg.causal_mask.
func.func @unabsorbed(%x: tensor<1x1x8x8xf32>) -> tensor<1x1x8x8xf32> {
  // expected-warning @+1 {{causal mask is not consumed by a recognised attention}}
  %cm = zg.causal_mask {masked_value = -1.0e30 : f64} : () -> tensor<1x1x8x8xf32>
  %y = zg.add %x, %cm : (tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x1x8x8xf32>
  return %y : tensor<1x1x8x8xf32>
}
