// RUN: zplan-opt %s --split-input-file -verify-diagnostics

// Tests that zg.kv_write writes into persistent state only.
func.func @kv_write_not_state(%c: tensor<2x2x8x4xf32>, %v: tensor<2x2x1x4xf32>, %p: tensor<2xi64>) {
  // expected-error @+1 {{cache must be persistent}}
  zg.kv_write %c, %v, %p : (tensor<2x2x8x4xf32>, tensor<2x2x1x4xf32>, tensor<2xi64>) -> ()
  return
}

// -----

// Tests that zg.kv_write's value fits the cache.
func.func @kv_write_too_long(%v: tensor<2x2x9x4xf32>, %p: tensor<2xi64>) {
  %c = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x8x4xf32>
  // expected-error @+1 {{value [2x2x9x4] does not fit the cache [2x2x8x4]}}
  zg.kv_write %c, %v, %p : (tensor<2x2x8x4xf32>, tensor<2x2x9x4xf32>, tensor<2xi64>) -> ()
  return
}

// -----

// Tests that positions are one per sequence.
func.func @kv_write_positions(%v: tensor<2x2x1x4xf32>, %p: tensor<3xi64>) {
  %c = zg.state {init = "zeros", kind = "kv_cache", name = "kv_cache.0.k"} : () -> tensor<2x2x8x4xf32>
  // expected-error @+1 {{pos must be [2] (one cached length per sequence), got [3]}}
  zg.kv_write %c, %v, %p : (tensor<2x2x8x4xf32>, tensor<2x2x1x4xf32>, tensor<3xi64>) -> ()
  return
}

// -----

// Tests that zg.cached_attention needs query heads that are a multiple of the cache's.
func.func @cached_attention_heads(%q: tensor<2x3x1x4xf32>, %k: tensor<2x2x8x4xf32>, %p: tensor<2xi64>) -> tensor<2x3x1x4xf32> {
  // expected-error @+1 {{query heads (3) are not a multiple of kv heads (2)}}
  %0 = zg.cached_attention %q, %k, %k, %p {scale = 0.5 : f64} : (tensor<2x3x1x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2xi64>) -> tensor<2x3x1x4xf32>
  return %0 : tensor<2x3x1x4xf32>
}

// -----

// Tests zg.argmax's result: i64 of the input's leading dims.
func.func @argmax_result(%x: tensor<2x16xf32>) -> tensor<2xi32> {
  // expected-error @+1 {{result must be i64 [2]}}
  %0 = zg.argmax %x : (tensor<2x16xf32>) -> tensor<2xi32>
  return %0 : tensor<2xi32>
}

// -----

// Tests zg.take_rows' result shape.
func.func @take_rows_shape(%x: tensor<2x5x16xf32>, %i: tensor<2xi64>) -> tensor<2x5xf32> {
  // expected-error @+1 {{result must be [2x16]}}
  %0 = zg.take_rows %x, %i : (tensor<2x5x16xf32>, tensor<2xi64>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}
