// RUN: zplan-opt --zplan-zero-train="stage=0 mixed-precision=true" %s | FileCheck %s

// Tests mixed precision at ZeRO stage 0 over dp = 2: each gradient is widened
// to fp32 and all-reduced in fp32 (sum, then 1/dp), every rank updates a whole
// fp32 master weight (a zg.state of kind master that @init fills from the
// parameter) and assigns it back into the 16-bit parameter.
// CHECK-LABEL: func.func @init
// CHECK: %[[P:.*]] = zg.weight {{.*}}name = "w"
// CHECK: %[[M:.*]] = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<4xf32>
// CHECK: zg.assign %[[M]], %[[P]]
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = zg.weight {{.*}}name = "w"
// CHECK: %[[MASTER:.*]] = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"}
// CHECK: %[[WIDE:.*]] = zg.cast %[[G:[^ ]*]] {zplan.own_dtype}
// CHECK: %[[SUM:.*]] = zd.all_reduce %[[WIDE]] {axis = "dp", zplan.own_dtype}
// CHECK: %[[MEAN:.*]] = zg.mul %[[SUM]], %{{.*}} {zplan.own_dtype}
// CHECK: zg.sum_squares %[[MEAN]]
// CHECK: zg.adamw %[[MASTER]], %[[MEAN]],
// CHECK: zg.assign %[[W]], %[[MASTER]]
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @init() {
  return
}
func.func @train_step(%g: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> tensor<f32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 16 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<4xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %gg = zg.mul %g, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %ss = zg.sum_squares %gg : (tensor<4xf32>) -> tensor<f32>
  zg.adamw %w, %gg, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %ss : tensor<f32>
}
}
