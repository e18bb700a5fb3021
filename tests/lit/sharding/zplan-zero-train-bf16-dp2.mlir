// RUN: zplan-opt --zplan-zero-train="stage=1 mixed-precision=true" %s | FileCheck %s --check-prefix=Z1
// RUN: zplan-opt --zplan-zero-train="stage=3 mixed-precision=true" %s | FileCheck %s --check-prefix=Z3

// Tests stages 1 and 3 over dp = 2: the gradient is cast to fp32 before the
// reduce-scatter, and the whole reduction chain (flatten, padding, scatter,
// 1/dp scaling and its constant) is marked fp32, as is the all-reduce of the
// squared norm. Stage 1 narrows the master before gathering it; stage 3 keeps
// an fp32 master part beside the bf16 parameter shard and assigns it back
// (zg.assign converts) instead of updating the shard in place.
// Z1-LABEL: func.func @train_step
// Z1: %[[MASTER:.*]] = zd.weight_shard {{.*}}zd.role = "master"{{.*}} : tensor<5xf32>
// Z1: %[[C:.*]] = zg.cast %{{.*}} {zplan.own_dtype}
// Z1-NEXT: zg.reshape %[[C]] {zplan.own_dtype}
// Z1-NEXT: zg.constant {{{.*}}zplan.own_dtype
// Z1-NEXT: zg.concat {{.*}}zplan.own_dtype
// Z1-NEXT: %[[RS:.*]] = zd.reduce_scatter {{.*}}zplan.own_dtype
// Z1-NEXT: zg.constant {{{.*}}zplan.own_dtype
// Z1-NEXT: %[[S:.*]] = zg.mul %[[RS]], {{.*}}zplan.own_dtype
// Z1: zd.all_reduce {{.*}}zplan.own_dtype{{.*}}tensor<f32>
// Z1-NEXT: zg.sqrt
// Z1: zg.adamw %[[MASTER]], %[[S]]
// Z1-NEXT: %[[N:.*]] = zg.cast %[[MASTER]] : (tensor<5xf32>) -> tensor<5xf32>
// Z1-NEXT: %[[W:.*]] = zd.gather_param %[[N]] : tensor<5xf32> -> tensor<3x3xf32>
// Z1-NEXT: zg.assign %{{.*}}, %[[W]]
// Z3-LABEL: func.func @train_step
// Z3: %[[P:.*]] = zd.weight_shard {{.*}}zd.role = "param"{{.*}} : tensor<5xf32>
// Z3: %[[MASTER:.*]] = zd.weight_shard {{.*}}zd.role = "master"{{.*}} : tensor<5xf32>
// Z3: zg.adamw %[[MASTER]],
// Z3-NEXT: zg.assign %[[P]], %[[MASTER]]
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @train_step(%x: tensor<1x3xf32>, %lr: tensor<f32> {zg.name = "lr", zg.default = 1.0e-3 : f64},
                      %step: tensor<i64> {zg.name = "step", zg.default = 1 : i64}) -> (tensor<f32> {zg.name = "loss"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %loss = zg.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<1x3xf32>) -> tensor<f32>
  %dy = zg.matmul %y, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<1x3xf32>) -> tensor<3x1xf32>
  %g0 = zg.matmul %xt, %dy : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %g = zg.mul %g0, %g0 {zplan.test = "grad"} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %ss = zg.sum_squares %g : (tensor<3x3xf32>) -> tensor<f32>
  %n = zg.sqrt %ss : (tensor<f32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %loss : tensor<f32>
}
}
