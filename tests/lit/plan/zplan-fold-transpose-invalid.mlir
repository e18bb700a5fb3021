// RUN: zplan-opt %s --split-input-file --verify-diagnostics

// Tests the verifier: a flag on a rank-1 operand, and contraction dims that
// differ once the flag is applied.
func.func @bad_flag(%v: tensor<8xf32>, %g: tensor<8x6xf32>) -> tensor<6xf32> {
  // expected-error @+1 {{trans_a / trans_b need an operand of rank >= 2}}
  %r = zg.matmul %v, %g {trans_a = true} : (tensor<8xf32>, tensor<8x6xf32>) -> tensor<6xf32>
  return %r : tensor<6xf32>
}

// -----

func.func @bad_dims(%x: tensor<8x4xf32>, %g: tensor<4x6xf32>) -> tensor<8x6xf32> {
  // expected-error @+1 {{contraction dims differ: 8 vs 4}}
  %r = zg.matmul %x, %g {trans_a = true} : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  return %r : tensor<8x6xf32>
}
