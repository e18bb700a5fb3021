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

// -----

// Tests the attention verifier with seq_major: bits outside 1..15, and a
// sequence-major k whose logical shape does not fit q.
func.func @bad_seq_major_bits(%q: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error @+1 {{seq_major must be bits of 1 (q), 2 (k), 4 (v) and 8 (result)}}
  %a = zg.attention %q, %q, %q {causal = false, scale = 1.0 : f64, seq_major = 16 : i64} : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %a : tensor<1x4x8x8xf32>
}

// -----

func.func @bad_seq_major_shape(%q: tensor<1x4x8x8xf32>, %k: tensor<1x8x3x8xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{query heads (4) are not a multiple of kv heads (3)}}
  %a = zg.attention %q, %k, %k {causal = false, scale = 1.0 : f64, seq_major = 14 : i64} : (tensor<1x4x8x8xf32>, tensor<1x8x3x8xf32>, tensor<1x8x3x8xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

// Tests the attention verifier with packed operands: a packed q whose heads run past
// its tensor's rows (offset 64 + 4 heads of 8 > 64), and a packed operand
// that is not sequence-major.
func.func @packed_past_row(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{packed operand at offset 64 with 4 heads of 8 does not fit rows of 64}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: 64, 64, 4, 0, 64, 4, 32, 64, 4>, scale = 1.0 : f64, seq_major = 15 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

func.func @packed_head_major(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{a packed operand must be sequence-major}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: 0, 64, 4, 0, 64, 4, 32, 64, 4>, scale = 1.0 : f64, seq_major = 14 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

// Tests the declared packed attribute of zg.attention: one that is not nine
// non-negative ints (ODS's constraint), one that packs no operand, and an
// unpacked operand (row stride 0) with an offset or heads.
func.func @packed_eight_ints(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{attribute 'packed' failed to satisfy constraint: i64 dense array attribute with exactly 9 elements whose value is non-negative}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: 0, 64, 4, 0, 64, 4, 32, 64>, scale = 1.0 : f64, seq_major = 15 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

func.func @packed_negative_offset(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{attribute 'packed' failed to satisfy constraint: i64 dense array attribute with exactly 9 elements whose value is non-negative}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: -32, 64, 4, 0, 64, 4, 32, 64, 4>, scale = 1.0 : f64, seq_major = 15 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

func.func @packed_nothing(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{packed packs no operand (every row stride is 0): leave it out}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: 0, 0, 0, 0, 0, 0, 0, 0, 0>, scale = 1.0 : f64, seq_major = 15 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}

// -----

func.func @packed_unpacked_heads(%x: tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32> {
  // expected-error @+1 {{packed: k is not packed (row stride 0), so its offset and heads must be 0, not 32 and 4}}
  %a = zg.attention %x, %x, %x {causal = false, packed = array<i64: 0, 64, 4, 32, 0, 4, 32, 64, 4>, scale = 1.0 : f64, seq_major = 15 : i64} : (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x4x8xf32>
  return %a : tensor<1x8x4x8xf32>
}
