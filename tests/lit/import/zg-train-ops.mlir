// RUN: zplan-opt %s --split-input-file | zplan-opt --split-input-file | FileCheck %s

// Tests that the training ops of docs/training-contract.md parse, verify and
// print back.
// CHECK-LABEL: func.func @state_and_updates
// CHECK: zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"}
// CHECK: zg.state {init = 1.000000e+00 : f64, kind = "scalar", name = "scale"}
// CHECK: zg.sum_squares
// CHECK: zg.adamw {{.*}}beta1 = 9.000000e-01
// CHECK: zg.accumulate
// CHECK: zg.assign
func.func @state_and_updates(%g: tensor<8xf32>, %lr: tensor<f32> {zg.name = "lr", zg.default = 1.0e-3 : f64},
                             %step: tensor<i64> {zg.name = "step", zg.default = 1 : i64}) -> tensor<f32> {
  %w = zg.weight {file = "w.bin", length = 32 : i64, name = "w", offset = 0 : i64} : () -> tensor<8xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<8xf32>
  %acc = zg.state {init = "zeros", kind = "grad", name = "w.grad", of = "w"} : () -> tensor<8xf32>
  %master = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<8xf32>
  %s = zg.state {init = 1.0 : f64, kind = "scalar", name = "scale"} : () -> tensor<f32>
  %n = zg.sum_squares %g : (tensor<8xf32>) -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  zg.accumulate %acc, %g : (tensor<8xf32>, tensor<8xf32>) -> ()
  zg.assign %master, %w : (tensor<8xf32>, tensor<8xf32>) -> ()
  return %n : tensor<f32>
}

// -----

// Tests that the gradient ops and attention's lse result round-trip.
// CHECK-LABEL: func.func @grads
// CHECK: zg.gelu_grad {{.*}}approximate = "tanh"
// CHECK: zg.silu_grad
// CHECK: zg.softmax_grad {{.*}}axis = 1
// CHECK: zg.layer_norm_grad
// CHECK: zg.rms_norm_grad
// CHECK: zg.attention {{.*}} -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
// CHECK: zg.attention_grad
// CHECK: zg.embedding_grad
// CHECK: zg.label_pick {{.*}}ignore_index = -100
// CHECK: zg.label_pick_grad
func.func @grads(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %q: tensor<1x4x4x2xf32>, %kv: tensor<1x2x4x2xf32>,
                 %ids: tensor<2x2xi64>, %labels: tensor<4xi64>, %d: tensor<4xf32>) -> tensor<4x8xf32> {
  %0 = zg.gelu_grad %x, %x {approximate = "tanh"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = zg.silu_grad %x, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = zg.softmax_grad %x, %1 {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3:3 = zg.layer_norm_grad %x, %s, %2 {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %4:2 = zg.rms_norm_grad %x, %s, %3#0 {epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %a:2 = zg.attention %q, %kv, %kv {causal = true, scale = 0.5 : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
  %5:3 = zg.attention_grad %q, %kv, %kv, %a#0, %q, %a#1 {causal = true, scale = 0.5 : f64} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x4x4xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
  %6 = zg.embedding_grad %labels, %4#0 : (tensor<4xi64>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %7 = zg.label_pick %x, %labels {ignore_index = -100 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4xf32>
  %8 = zg.label_pick_grad %labels, %d {ignore_index = -100 : i64} : (tensor<4xi64>, tensor<4xf32>) -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}
