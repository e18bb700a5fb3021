// RUN: zplan-opt %s --split-input-file -verify-diagnostics

// Tests that zg.state checks its kind.
func.func @state_kind() -> tensor<4xf32> {
  // expected-error @+1 {{kind must be master, moment1, moment2, grad, scalar or kv_cache, got "velocity"}}
  %0 = zg.state {init = "zeros", kind = "velocity", name = "s"} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that zg.state checks its init.
func.func @state_init() -> tensor<4xf32> {
  // expected-error @+1 {{init must be "zeros", "copy_of_param" or a float, got "ones"}}
  %0 = zg.state {init = "ones", kind = "grad", name = "s"} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that a copy of a parameter names the parameter.
func.func @state_copy_of() -> tensor<4xf32> {
  // expected-error @+1 {{init "copy_of_param" needs the parameter's name in `of`}}
  %0 = zg.state {init = "copy_of_param", kind = "master", name = "s"} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that zg.state's init is not an arbitrary attribute.
func.func @state_init_type() -> tensor<4xf32> {
  // expected-error @+1 {{init must be "zeros", "copy_of_param" or a float}}
  %0 = zg.state {init = 3 : i64, kind = "grad", name = "s"} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that zg.assign only writes persistent storage.
func.func @assign_temp(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{target must be persistent (a zg.weight, zg.state or zd.weight_shard result)}}
  zg.assign %x, %y : (tensor<4xf32>, tensor<4xf32>) -> ()
  return
}

// -----

// Tests that zg.assign keeps the shape.
func.func @assign_shape(%y: tensor<2x2xf32>) {
  %s = zg.state {init = "zeros", kind = "grad", name = "s"} : () -> tensor<4xf32>
  // expected-error @+1 {{value shape [2x2] differs from the target's [4]}}
  zg.assign %s, %y : (tensor<4xf32>, tensor<2x2xf32>) -> ()
  return
}

// -----

// Tests that zg.accumulate keeps the type.
func.func @accumulate_type(%y: tensor<4xbf16>) {
  %s = zg.state {init = "zeros", kind = "grad", name = "s"} : () -> tensor<4xf32>
  // expected-error @+1 {{value type must equal the target type}}
  zg.accumulate %s, %y : (tensor<4xf32>, tensor<4xbf16>) -> ()
  return
}

// -----

// Tests that zg.adamw updates persistent moments.
func.func @adamw_moment(%g: tensor<4xf32>, %v: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  %w = zg.weight {file = "w.bin", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "m", of = "w"} : () -> tensor<4xf32>
  // expected-error @+1 {{v must be persistent}}
  zg.adamw %w, %g, %m, %v, %lr, %t, %lr {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return
}

// -----

// Tests that zg.adamw takes scalar hyper-parameters.
func.func @adamw_lr(%g: tensor<4xf32>, %lr: tensor<4xf32>, %t: tensor<i64>, %c: tensor<f32>) {
  %w = zg.weight {file = "w.bin", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "v", of = "w"} : () -> tensor<4xf32>
  // expected-error @+1 {{lr must be a float scalar (rank 0)}}
  zg.adamw %w, %g, %m, %v, %lr, %t, %c {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<f32>) -> ()
  return
}

// -----

// Tests that zg.adamw takes an integer step.
func.func @adamw_step(%g: tensor<4xf32>, %lr: tensor<f32>) {
  %w = zg.weight {file = "w.bin", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "v", of = "w"} : () -> tensor<4xf32>
  // expected-error @+1 {{step must be an integer scalar (rank 0)}}
  zg.adamw %w, %g, %m, %v, %lr, %lr, %lr {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
  return
}

// -----

// Tests that zg.adamw checks its betas.
func.func @adamw_beta(%g: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  %w = zg.weight {file = "w.bin", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "v", of = "w"} : () -> tensor<4xf32>
  // expected-error @+1 {{beta1 and beta2 must be in [0, 1)}}
  zg.adamw %w, %g, %m, %v, %lr, %t, %lr {beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return
}

// -----

// Tests that zg.adamw's gradient has the parameter's shape.
func.func @adamw_shape(%g: tensor<2xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  %w = zg.weight {file = "w.bin", length = 16 : i64, name = "w", offset = 0 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "v", of = "w"} : () -> tensor<4xf32>
  // expected-error @+1 {{param, grad, m and v must have one shape}}
  zg.adamw %w, %g, %m, %v, %lr, %t, %lr {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return
}

// -----

// Tests that zg.sum_squares gives an f32 scalar.
func.func @sum_squares(%x: tensor<4xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{result must be an f32 scalar (rank 0)}}
  %0 = zg.sum_squares %x : (tensor<4xf32>) -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

// Tests that zg.gelu_grad checks its form.
func.func @gelu_grad(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = zg.gelu_grad %x, %x {approximate = "fast"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that zg.softmax_grad checks its axis.
func.func @softmax_grad(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{axis 1 out of range for rank 1}}
  %0 = zg.softmax_grad %x, %x {axis = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that zg.layer_norm_grad wants a scale of the normalised dims' shape.
func.func @layer_norm_grad(%x: tensor<4x8xf32>, %s: tensor<1x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{scale must have the normalised dims' shape [8]}}
  %0:3 = zg.layer_norm_grad %x, %s, %x {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<1x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

// Tests that zg.rms_norm_grad gives the scale's gradient in its type.
func.func @rms_norm_grad(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{grad_scale must have the scale's type}}
  %0:2 = zg.rms_norm_grad %x, %s, %x {epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

// Tests that attention's lse is f32 [B, Hq, S].
func.func @attention_lse(%q: tensor<1x4x4x2xf32>, %kv: tensor<1x2x4x2xf32>) -> tensor<1x4x4x2xf32> {
  // expected-error @+1 {{lse must be f32 [1x4x4]}}
  %a:2 = zg.attention %q, %kv, %kv {causal = true, scale = 0.5 : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>)
  return %a#0 : tensor<1x4x4x2xf32>
}

// -----

// Tests that zg.attention_grad gives dk in k's type.
func.func @attention_grad(%q: tensor<1x4x4x2xf32>, %kv: tensor<1x2x4x2xf32>, %lse: tensor<1x4x4xf32>) -> tensor<1x4x4x2xf32> {
  // expected-error @+1 {{grad_q, grad_k and grad_v must have the types of q, k and v}}
  %0:3 = zg.attention_grad %q, %kv, %kv, %q, %q, %lse {causal = false, scale = 0.5 : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x4x4xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>)
  return %0#0 : tensor<1x4x4x2xf32>
}

// -----

// Tests that zg.embedding_grad wants dy of shape ids + [D].
func.func @embedding_grad(%ids: tensor<2x3xi64>, %dy: tensor<6x8xf32>) -> tensor<16x8xf32> {
  // expected-error @+1 {{grad shape should be [2x3x8]}}
  %0 = zg.embedding_grad %ids, %dy : (tensor<2x3xi64>, tensor<6x8xf32>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

// Tests that zg.label_pick takes 2-D logits and one label per row.
func.func @label_pick(%l: tensor<2x4x8xf32>, %y: tensor<8xi64>) -> tensor<8xf32> {
  // expected-error @+1 {{needs logits [N, V] and labels [N]}}
  %0 = zg.label_pick %l, %y {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<8xi64>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that zg.label_pick_grad gives [N, V].
func.func @label_pick_grad(%y: tensor<8xi64>, %d: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{needs labels [N], grad [N] and a result [N, V]}}
  %0 = zg.label_pick_grad %y, %d {ignore_index = -100 : i64} : (tensor<8xi64>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
