// RUN: zplan-opt --zplan-tp-propagate --zplan-tp-partition %s | FileCheck %s

// Tests the partitioned train step: one load of the parameter (split), the
// moments at the parameter's local shape in both functions, a zd.local_slice
// for the whole activation the add needs split (no second load of the
// weight), the partial backward linear and sum_squares all-reduced over tp,
// the splat moment initialiser kept a constant at the local shape, and the
// vocabulary-parallel loss pieces: max all-reduced with reduction "max",
// label pick and its gradient with zd.vocab_stride.
// CHECK-LABEL: func.func @init
// CHECK: zg.state {{.*}}name = "w.m"{{.*}} -> tensor<8x4xf32>
// CHECK: zg.constant {{.*}}dense<0.000000e+00> : tensor<8x4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: zd.local_slice %arg0 {axis = "tp", dim = 1 : i64} : tensor<8x8xf32> -> tensor<8x4xf32>
// CHECK: zg.weight {{.*}} -> tensor<8x4xf32>
// CHECK-NOT: zg.weight
// CHECK: zg.state {{.*}}name = "w.m"{{.*}} -> tensor<8x4xf32>
// CHECK: zg.linear {{.*}} -> tensor<8x4xf32>
// CHECK: zg.linear {{.*}}trans_w = true
// CHECK-NEXT: zd.all_reduce {{.*}}{axis = "tp"} : tensor<8x8xf32>
// CHECK: zg.reduce_max
// CHECK-NEXT: zd.all_reduce {{.*}}{axis = "tp", reduction = "max"} : tensor<8x1xf32>
// CHECK: zg.label_pick {{.*}}zd.vocab_stride = 4 : i64
// CHECK-NEXT: zd.all_reduce
// CHECK: zg.label_pick_grad {{.*}}zd.vocab_stride = 4 : i64} : (tensor<8xi64>, tensor<8xf32>) -> tensor<8x4xf32>
// CHECK: zg.sum_squares
// CHECK-NEXT: zd.all_reduce {{.*}}{axis = "tp"} : tensor<f32>
// CHECK: zg.adamw {{.*}}(tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>)
// CHECK-NOT: zg.weight
// CHECK: return
module attributes {zd.tp = 2 : i64} {
func.func @init() {
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8x8xf32>
  %z = zg.constant {value = dense<0.0> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  zg.assign %m, %z : (tensor<8x8xf32>, tensor<8x8xf32>) -> ()
  return
}
func.func @train_step(%x: tensor<8x8xf32>, %labels: tensor<8xi64>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<8x8xf32>, tensor<f32>, tensor<8xf32>, tensor<8x8xf32>) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 256 : i64} : () -> tensor<8x8xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8x8xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<8x8xf32>
  %y = zg.linear %x, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = zg.add %w, %x : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %dx = zg.linear %y, %w {trans_w = true} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %mx = zg.reduce_max %y {axes = array<i64: 1>, keepdims = true} : (tensor<8x8xf32>) -> tensor<8x1xf32>
  %sh = zg.sub %y, %mx : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %p = zg.label_pick %sh, %labels {ignore_index = -100 : i64} : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<8xf32>
  %d = zg.label_pick_grad %labels, %p {ignore_index = -100 : i64} : (tensor<8xi64>, tensor<8xf32>) -> tensor<8x8xf32>
  %n = zg.sum_squares %s : (tensor<8x8xf32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %s, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %dx, %n, %p, %d : tensor<8x8xf32>, tensor<f32>, tensor<8xf32>, tensor<8x8xf32>
}
}
