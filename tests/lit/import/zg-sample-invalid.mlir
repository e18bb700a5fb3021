// RUN: zplan-opt %s --split-input-file -verify-diagnostics

// Tests that zg.sample wants rank-2 float logits.
func.func @rank(%l: tensor<50xf32>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>, %s: tensor<i64>) -> tensor<1xi64> {
  // expected-error @+1 {{logits must be a float tensor [B, V]}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<50xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<1xi64>
  return %0 : tensor<1xi64>
}

// -----

// Tests that zg.sample's ids are i64 [B].
func.func @ids(%l: tensor<2x50xf32>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>, %s: tensor<i64>) -> tensor<3xi64> {
  // expected-error @+1 {{ids must be i64 [B], B the logits' rows}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<2x50xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

// Tests that zg.sample wants an f32 scalar temperature.
func.func @temperature(%l: tensor<2x50xf32>, %t: tensor<1xf32>, %k: tensor<i64>, %p: tensor<f32>, %s: tensor<i64>) -> tensor<2xi64> {
  // expected-error @+1 {{temperature must be an f32 scalar (rank 0)}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<2x50xf32>, tensor<1xf32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Tests that zg.sample wants an i64 scalar top_k.
func.func @top_k(%l: tensor<2x50xf32>, %t: tensor<f32>, %k: tensor<i32>, %p: tensor<f32>, %s: tensor<i64>) -> tensor<2xi64> {
  // expected-error @+1 {{top_k must be an i64 scalar (rank 0)}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<2x50xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Tests that zg.sample wants an f32 scalar top_p.
func.func @top_p(%l: tensor<2x50xf32>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f64>, %s: tensor<i64>) -> tensor<2xi64> {
  // expected-error @+1 {{top_p must be an f32 scalar (rank 0)}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<2x50xf32>, tensor<f32>, tensor<i64>, tensor<f64>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Tests that zg.sample wants i64 scalars for seed and step.
func.func @step(%l: tensor<2x50xf32>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>, %s: tensor<i64>, %st: tensor<2xi64>) -> tensor<2xi64> {
  // expected-error @+1 {{step must be an i64 scalar (rank 0)}}
  %0 = zg.sample %l, %t, %k, %p, %s, %st : (tensor<2x50xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<2xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Tests that zg.sample refuses a vocabulary beyond its 2^23 limit.
func.func @vocab(%l: tensor<1x8388609xf32>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>, %s: tensor<i64>) -> tensor<1xi64> {
  // expected-error @+1 {{the vocabulary is larger than 2^23}}
  %0 = zg.sample %l, %t, %k, %p, %s, %s : (tensor<1x8388609xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<1xi64>
  return %0 : tensor<1xi64>
}
