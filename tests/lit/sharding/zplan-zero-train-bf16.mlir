// RUN: zplan-opt --zplan-zero-train="stage=0 mixed-precision=true" %s | FileCheck %s --check-prefix=D1
// RUN: zplan-opt --zplan-zero-train="stage=0" %s | FileCheck %s --check-prefix=OFF

// Tests mixed precision (--dtype bf16) at dp = 1: the update runs on an fp32
// master part (a zd.weight_shard with zd.role = "master", kept in fp32 by
// planDTypeOfValue) fed by the gradient cast to fp32 (`zplan.own_dtype` on the
// cast and the flattening), and the master is narrowed back into the bf16
// parameter (a plain zg.cast, then the dp-1 gather and zg.assign).
// D1-LABEL: func.func @train_step
// D1: %[[MASTER:.*]] = zd.weight_shard {{.*}}name = "w"{{.*}}zd.role = "master"{{.*}} : tensor<9xf32>
// D1: %[[G:.*]] = zg.mul %{{.*}}, %{{.*}} {zplan.test = "grad"}
// D1-NEXT: %[[C:.*]] = zg.cast %[[G]] {zplan.own_dtype}
// D1-NEXT: %[[F:.*]] = zg.reshape %[[C]] {zplan.own_dtype}
// D1: zg.adamw %[[MASTER]], %[[F]]
// D1-NEXT: %[[N:.*]] = zg.cast %[[MASTER]] :
// D1-NEXT: %[[W:.*]] = zd.gather_param %[[N]] : tensor<9xf32> -> tensor<3x3xf32>
// D1-NEXT: zg.assign %{{.*}}, %[[W]]
// D1-NEXT: zd.release %[[W]]
// Must not fire: without mixed precision dp = 1 is left alone.
// OFF-LABEL: func.func @train_step
// OFF-NOT: zd.
// OFF-NOT: zplan.own_dtype
// OFF: zg.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @train_step(%x: tensor<1x3xf32>, %lr: tensor<f32> {zg.name = "lr", zg.default = 1.0e-3 : f64},
                      %step: tensor<i64> {zg.name = "step", zg.default = 1 : i64}) -> (tensor<f32> {zg.name = "loss"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %loss = zg.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<1x3xf32>) -> tensor<f32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<1x3xf32>) -> tensor<3x1xf32>
  %g0 = zg.matmul %xt, %y : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %g = zg.mul %g0, %g0 {zplan.test = "grad"} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %ss = zg.sum_squares %g : (tensor<3x3xf32>) -> tensor<f32>
  %n = zg.sqrt %ss : (tensor<f32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %loss : tensor<f32>
}
}
