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

// -----

func.func @rope_kv_not_state(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x1x8xf32>, %t: tensor<1x1x1x8xf32>, %c: tensor<1x2x16x8xf32>, %p: tensor<1xi64>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{k_cache must be persistent}}
  %r = zg.rope_kv_write %q, %k, %k, %t, %t, %c, %c, %p : (tensor<1x4x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x4x1x8xf32>
  return %r : tensor<1x4x1x8xf32>
}

// -----

func.func @rope_kv_too_long(%q: tensor<1x4x17x8xf32>, %k: tensor<1x2x17x8xf32>, %t: tensor<1x1x1x8xf32>, %p: tensor<1xi64>) -> tensor<1x4x17x8xf32> {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<1x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<1x2x16x8xf32>
  // expected-error @+1 {{k [1x2x17x8] does not fit the cache [1x2x16x8]}}
  %r = zg.rope_kv_write %q, %k, %k, %t, %t, %kc, %vc, %p : (tensor<1x4x17x8xf32>, tensor<1x2x17x8xf32>, tensor<1x2x17x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x4x17x8xf32>
  return %r : tensor<1x4x17x8xf32>
}

// -----

func.func @rope_kv_tables(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x1x8xf32>, %t: tensor<1x4x1x8xf32>, %p: tensor<1xi64>) -> tensor<1x4x1x8xf32> {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<1x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<1x2x16x8xf32>
  // expected-error @+1 {{cos and sin must be one float type [1 or B, 1, 1 or S, D], got [1x4x1x8]}}
  %r = zg.rope_kv_write %q, %k, %k, %t, %t, %kc, %vc, %p : (tensor<1x4x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x4x1x8xf32>
  return %r : tensor<1x4x1x8xf32>
}

// -----

// rope_attention takes rope_kv_write's rules (persistent caches, tables) and
// the attention's: query heads a multiple of the K/V heads.
func.func @rope_attention_not_state(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x1x8xf32>, %t: tensor<1x1x1x8xf32>, %c: tensor<1x2x16x8xf32>, %p: tensor<1xi64>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{k_cache must be persistent}}
  %r = zg.rope_attention %q, %k, %k, %t, %t, %c, %c, %p {scale = 0.5 : f64} : (tensor<1x4x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x4x1x8xf32>
  return %r : tensor<1x4x1x8xf32>
}

// -----

func.func @rope_attention_heads(%q: tensor<1x3x1x8xf32>, %k: tensor<1x2x1x8xf32>, %t: tensor<1x1x1x8xf32>, %p: tensor<1xi64>) -> tensor<1x3x1x8xf32> {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<1x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<1x2x16x8xf32>
  // expected-error @+1 {{query heads (3) are not a multiple of kv heads (2)}}
  %r = zg.rope_attention %q, %k, %k, %t, %t, %kc, %vc, %p {scale = 0.5 : f64} : (tensor<1x3x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x3x1x8xf32>
  return %r : tensor<1x3x1x8xf32>
}

// -----

func.func @rope_attention_tables(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x1x8xf32>, %t: tensor<1x1x1x4xf32>, %p: tensor<1xi64>) -> tensor<1x4x1x8xf32> {
  %kc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<1x2x16x8xf32>
  %vc = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.v"} : () -> tensor<1x2x16x8xf32>
  // expected-error @+1 {{cos and sin must be one float type [1 or B, 1, 1 or S, D], got [1x1x1x4]}}
  %r = zg.rope_attention %q, %k, %k, %t, %t, %kc, %vc, %p {scale = 0.5 : f64} : (tensor<1x4x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1xi64>) -> tensor<1x4x1x8xf32>
  return %r : tensor<1x4x1x8xf32>
}
