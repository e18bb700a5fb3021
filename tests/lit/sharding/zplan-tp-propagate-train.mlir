// RUN: zplan-opt --split-input-file --zplan-tp-propagate %s | FileCheck %s

// Tests the train-step rules on one column-parallel linear: the parameter is
// split once, by its forward consumer; the backward linear (dx = dy W^T)
// contracts over that split (a partial sum); the weight gradient comes out
// split as the parameter; sum_squares of it is partial; zg.adamw asks for
// the gradient and both moments in the parameter's sharding; and @init,
// planned after the train step, gives the moment the same sharding.
// CHECK-LABEL: func.func @init
// CHECK: zg.state {{.*}}name = "w.m"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.constant {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.assign %{{[0-9]+}}, %{{[0-9]+}} :
// CHECK-LABEL: func.func @train_step
// CHECK: zg.weight {{.*}}name = "w"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.state {{.*}}name = "w.m"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.state {{.*}}name = "w.v"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.linear {{.*}}trans_w = true, zd.result_shardings = [#zd.sharding<[_, _], partial>]
// CHECK: zg.matmul {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.sum_squares {{.*}}zd.result_shardings = [#zd.sharding<[], partial>]
// CHECK: zg.adamw {{.*}}weight_decay = 1.000000e-02 : f64} :
module attributes {zd.tp = 2 : i64} {
func.func @init() {
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8x8xf32>
  %z = zg.constant {value = dense<0.0> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  zg.assign %m, %z : (tensor<8x8xf32>, tensor<8x8xf32>) -> ()
  return
}
func.func @train_step(%x: tensor<4x8xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<4x8xf32>, tensor<f32>) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 256 : i64} : () -> tensor<8x8xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8x8xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<8x8xf32>
  %y = zg.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dx = zg.linear %y, %w {trans_w = true} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %dw = zg.matmul %xt, %y : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %n = zg.sum_squares %dw : (tensor<8x8xf32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %dw, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %dx, %n : tensor<4x8xf32>, tensor<f32>
}
}

// -----

// Tests that a parameter's later consumer works with the sharding its first
// consumer fixed: the elementwise add keeps the weight split and asks for
// the whole activation split (a rank-local slice in partition).
// CHECK-LABEL: func.func @one_param
// CHECK: zg.weight {{.*}}name = "w"{{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK-NOT: zg.weight
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.add {{.*}}zd.operand_shardings = [#zd.sharding<[_, tp]>, #zd.sharding<[_, tp]>], zd.result_shardings = [#zd.sharding<[_, tp]>]
module attributes {zd.tp = 2 : i64} {
func.func @one_param(%x: tensor<8x8xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> tensor<8x8xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 256 : i64} : () -> tensor<8x8xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8x8xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<8x8xf32>
  %y = zg.linear %x, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = zg.add %w, %x : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %s, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %y : tensor<8x8xf32>
}
}

// -----

// Tests the vocabulary-parallel cross-entropy pieces: a row maximum over the
// split vocabulary is a partial maximum, a row sum a partial sum, the label
// pick partial; its gradient comes out split like the logits.
// CHECK-LABEL: func.func @vocab_loss
// CHECK: zg.linear {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.reduce_max {{.*}}zd.partial_reduction = "max", zd.result_shardings = [#zd.sharding<[_, _], partial>]
// CHECK: zg.sub {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
// CHECK: zg.reduce_sum {{.*}}zd.result_shardings = [#zd.sharding<[_], partial>]
// CHECK: zg.label_pick {{.*}}zd.result_shardings = [#zd.sharding<[_], partial>]
// CHECK: zg.label_pick_grad {{.*}}zd.result_shardings = [#zd.sharding<[_, tp]>]
module attributes {zd.tp = 2 : i64} {
func.func @vocab_loss(%h: tensor<4x8xf32>, %labels: tensor<4xi64>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4x16xf32>) {
  %w = zg.weight {name = "head", file = "m.data", offset = 0 : i64, length = 512 : i64} : () -> tensor<16x8xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "head.m", of = "head"} : () -> tensor<16x8xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "head.v", of = "head"} : () -> tensor<16x8xf32>
  %x = zg.linear %h, %w {trans_w = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %mx = zg.reduce_max %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %s = zg.sub %x, %mx : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %e = zg.exp %s : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %sum = zg.reduce_sum %e {axes = array<i64: 1>, keepdims = false} : (tensor<4x16xf32>) -> tensor<4xf32>
  %p = zg.label_pick %s, %labels {ignore_index = -100 : i64} : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<4xf32>
  %d = zg.label_pick_grad %labels, %p {ignore_index = -100 : i64} : (tensor<4xi64>, tensor<4xf32>) -> tensor<4x16xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %dw = zg.constant {value = dense<0.0> : tensor<16x8xf32>} : () -> tensor<16x8xf32>
  zg.adamw %w, %dw, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %sum, %p, %d : tensor<4xf32>, tensor<4xf32>, tensor<4x16xf32>
}
}

// -----

// Must not fire: outside a training step (no zg.adamw, no zg.state) a row
// sum over the split vocabulary still gathers it, as for inference.
// CHECK-LABEL: func.func @inference_sum
// CHECK: zg.reduce_sum
// CHECK-NOT: partial
// CHECK: return
module attributes {zd.tp = 2 : i64} {
func.func @inference_sum(%h: tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<4xf32>) {
  %w = zg.weight {name = "head", file = "m.data", offset = 0 : i64, length = 512 : i64} : () -> tensor<16x8xf32>
  %x = zg.linear %h, %w {trans_w = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %sum = zg.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : (tensor<4x16xf32>) -> tensor<4xf32>
  return %x, %sum : tensor<4x16xf32>, tensor<4xf32>
}
}
