// RUN: zplan-opt %s --split-input-file --zg-build-train-step="clip-grad=1.0 lr=0.002" | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zg-build-train-step="lr-schedule=warmup-decay warmup-steps=2 total-steps=10" | FileCheck %s --check-prefix=SCHED
// RUN: zplan-opt %s --split-input-file --zg-build-train-step="lr-schedule=warmup warmup-steps=3" | FileCheck %s --check-prefix=WARM
// RUN: zplan-opt %s --split-input-file --zg-build-train-step="lr-schedule=warmup warmup-steps=0" | FileCheck %s --check-prefix=WARM0

// Tests that a small causal LM becomes @init and @train_step: the composed
// cross-entropy, the backward through the linear head and the embedding, the
// gradient norm, clipping and one AdamW per parameter with its two moments.
// CHECK-LABEL: func.func @init()
// CHECK-DAG: zg.state {init = "zeros", kind = "moment1", name = "emb.exp_avg", of = "emb"}
// CHECK-DAG: zg.state {init = "zeros", kind = "moment2", name = "head.exp_avg_sq", of = "head"}
// CHECK: %[[Z:.*]] = zg.constant {value = dense<0.000000e+00> : tensor<{{.*}}xf32>}
// CHECK: zg.assign %{{.*}}, %[[Z]]
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%{{.*}}: tensor<2x3xi64> {zg.name = "input_ids"}, %[[LR:[^:]*]]: tensor<f32> {zg.default = 2.000000e-03 : f64, zg.name = "lr"}, %[[STEP:[^:]*]]: tensor<i64> {zg.default = 1 : i64, zg.name = "step"}) -> (tensor<f32> {zg.name = "loss"}, tensor<f32> {zg.name = "grad_norm"})
// CHECK: zg.slice %{{.*}} {starts = array<i64: 0, 1>, steps = array<i64: 1, 1>}
// CHECK: %[[X:.*]] = zg.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK: %[[M:.*]] = zg.reduce_max %[[X]] {axes = array<i64: 1>, keepdims = true}
// CHECK: %[[SH:.*]] = zg.sub %[[X]], %[[M]]
// CHECK: zg.exp %[[SH]]
// CHECK: zg.reduce_sum
// CHECK: zg.log
// CHECK: zg.label_pick %[[SH]], %{{.*}} {ignore_index = -100 : i64}
// CHECK: zg.label_pick_grad
// CHECK: zg.linear {{.*}}trans_w = true
// CHECK: zg.embedding_grad
// CHECK: zg.sum_squares
// CHECK: %[[NORM:.*]] = zg.sqrt
// CHECK: zg.min
// CHECK: zg.adamw {{.*}}, %[[LR]], %[[STEP]], {{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}}, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-02 : f64}
// CHECK: zg.adamw
// CHECK-NOT: zg.adamw
// CHECK: return %{{.*}}, %[[NORM]] : tensor<f32>, tensor<f32>
// SCHED-LABEL: func.func @train_step
// SCHED: %[[T:.*]] = zg.cast %{{.*}} : (tensor<i64>) -> tensor<f32>
// SCHED: zg.less %[[T]]
// SCHED: %[[F:.*]] = zg.where
// SCHED: %[[LR:.*]] = zg.mul %{{.*}}, %[[F]]
// SCHED-NOT: zg.min
// SCHED: zg.adamw {{.*}}, %[[LR]],
// warmup (WarmupLR): lr x (t < 3 ? t / 3 : 1), no decay.
// WARM-LABEL: func.func @train_step
// WARM: %[[T:.*]] = zg.cast %{{.*}} : (tensor<i64>) -> tensor<f32>
// WARM: %[[ONE:.*]] = zg.constant {value = dense<1.000000e+00> : tensor<f32>
// WARM-NOT: zg.sub
// WARM: %[[W:.*]] = zg.constant {value = dense<3.000000e+00> : tensor<f32>
// WARM: %[[UP:.*]] = zg.div %[[T]], %[[W]]
// WARM: %[[LESS:.*]] = zg.less %[[T]]
// WARM: %[[F:.*]] = zg.where %[[LESS]], %[[UP]], %[[ONE]]
// WARM: %[[LR:.*]] = zg.mul %{{.*}}, %[[F]]
// WARM-NOT: zg.max
// WARM: zg.adamw {{.*}}, %[[LR]],
// A warmup of 0 steps is the constant rate: AdamW reads the lr argument.
// WARM0-LABEL: func.func @train_step
// WARM0-SAME: %[[LR:[^:]*]]: tensor<f32> {zg.default = 1.000000e-03 : f64, zg.name = "lr"}
// WARM0: zg.adamw {{.*}}, %[[LR]],
func.func @main(%ids: tensor<2x3xi64> {zg.name = "input_ids"}) -> (tensor<2x3x8xf32> {zg.name = "logits"}) {
  %e = zg.weight {file = "", length = 128 : i64, name = "emb", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %w = zg.weight {file = "", length = 128 : i64, name = "head", offset = 0 : i64, value = dense<0.25> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %y = zg.linear %x, %w : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Tests that a tied embedding / LM head weight is one parameter whose
// gradient is the sum of both uses.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DX:.*]] = zg.linear %{{.*}}, %[[W:.*]] : (tensor<2x3x8xf32>, tensor<8x4xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[G1:.*]] = zg.matmul {{.*}} -> tensor<8x4xf32>
// CHECK: %[[G2:.*]] = zg.embedding_grad %{{.*}}, %[[DX]]
// CHECK: %[[G:.*]] = zg.add %[[G1]], %[[G2]] : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: zg.adamw %{{.*}}, %[[G]],
// CHECK-NOT: zg.adamw
func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
  %e = zg.weight {file = "", length = 128 : i64, name = "wte", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>, zg.tied} : () -> tensor<8x4xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %y = zg.linear %x, %e {trans_w = true} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Tests that a weight the exporter shared between two layer norms (equal
// initial values) becomes two parameters, and that restore-zero-biases is
// off by default.
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: zg.weight {{.*}}name = "ln.weight"
// CHECK-DAG: zg.weight {{.*}}name = "ln.weight#1"
// CHECK-NOT: name = "head.bias"
// CHECK-COUNT-4: zg.adamw
// CHECK-NOT: zg.adamw
func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
  %e = zg.weight {file = "", length = 128 : i64, name = "emb", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %g = zg.weight {file = "", length = 16 : i64, name = "ln.weight", offset = 0 : i64, value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %w = zg.weight {file = "", length = 128 : i64, name = "head.weight", offset = 0 : i64, value = dense<0.25> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %n1 = zg.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %n2 = zg.layer_norm %n1, %g {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %y = zg.linear %n2, %w : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}
