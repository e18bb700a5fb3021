// RUN: zplan-opt %s --split-input-file --verify-diagnostics

// Tests the verifier: seq_major on a rank-3 input, and tables that fit the
// input's own shape but not its head-major view.
func.func @bad_rank(%x: tensor<4x2x8xf32>, %c: tensor<8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{seq_major needs a rank-4 [B, S, H, D] input, got [4x2x8]}}
  %r = zg.rotary %x, %c, %c {seq_major = true} : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x2x8xf32>
  return %r : tensor<4x2x8xf32>
}

// -----

func.func @bad_view(%x: tensor<1x4x2x8xf32>, %c: tensor<1x4x1x8xf32>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{cos and sin [1x4x1x8] must broadcast to the input's head-major view [1x2x4x8] with the same last dim}}
  %r = zg.rotary %x, %c, %c {seq_major = true} : (tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>) -> tensor<1x4x2x8xf32>
  return %r : tensor<1x4x2x8xf32>
}
