// RUN: zplan-opt %s --zg-build-train-step="loss-scaling=dynamic loss-scale=1024 loss-scale-window=4 loss-scale-min=2 clip-grad=1.0" | FileCheck %s
// RUN: zplan-opt %s --zg-build-train-step="loss-scaling=static loss-scale=512" | FileCheck %s --check-prefix=STATIC
// RUN: not zplan-opt %s --zg-build-train-step="loss-scaling=dynamic loss-scale=1 loss-scale-min=2" 2>&1 | FileCheck %s --check-prefix=BAD

// Tests fp16 loss scaling (DeepSpeed's dynamic loss scaler, hysteresis 1): @init fills the scale and the
// counters; the per-row loss weights carry the scale (so the backward never holds the scale itself); the
// norm and AdamW's grad_scale divide it out; the overflow flag (the scaled norm is not finite) picks the
// new scale (doubled after 4 good steps, halved on overflow, at least 2) and gives AdamW step 0 (skip).
// CHECK-LABEL: func.func @init()
// CHECK: %[[S0:.*]] = zg.state {init = 1.024000e+03 : f64, kind = "scalar", name = "loss_scale"}
// CHECK: %[[C0:.*]] = zg.constant {value = dense<1.024000e+03> : tensor<f32>, zplan.own_dtype}
// CHECK: zg.assign %[[S0]], %[[C0]]
// CHECK-DAG: zg.state {init = "zeros", kind = "scalar", name = "loss_scale_good_steps"}
// CHECK-DAG: zg.state {init = "zeros", kind = "scalar", name = "optimizer_steps"}
// CHECK-DAG: zg.state {init = "zeros", kind = "scalar", name = "skipped_steps"}
// CHECK-LABEL: func.func @train_step
// CHECK: %[[SEED:.*]] = zg.state {init = 1.024000e+03 : f64, kind = "scalar", name = "loss_scale"}
// CHECK: zg.mul %{{.*}}, %[[SEED]] {zplan.own_dtype} : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
// CHECK: %[[NORM:.*]] = zg.sqrt
// CHECK: %[[SCALE:.*]] = zg.state {init = 1.024000e+03 : f64, kind = "scalar", name = "loss_scale"}
// CHECK: %[[INV:.*]] = zg.div %{{.*}}, %[[SCALE]]
// CHECK: %[[TRUE:.*]] = zg.mul %[[NORM]], %[[INV]]
// CHECK: %[[INF:.*]] = zg.constant {value = dense<0x7F800000> : tensor<f32>, zplan.own_dtype}
// CHECK: %[[FINITE:.*]] = zg.less %[[NORM]], %[[INF]]
// CHECK: %[[FLAG:.*]] = zg.where %[[FINITE]], %{{.*}}, %{{.*}} {zplan.overflow_flag, zplan.own_dtype}
// CHECK: %[[OK:.*]] = zg.less %[[FLAG]]
// CHECK: %[[GOOD:.*]] = zg.state {init = "zeros", kind = "scalar", name = "loss_scale_good_steps"}
// CHECK: %[[COUNT:.*]] = zg.state {init = "zeros", kind = "scalar", name = "optimizer_steps"}
// CHECK: %[[SKIPPED:.*]] = zg.state {init = "zeros", kind = "scalar", name = "skipped_steps"}
// CHECK: zg.constant {value = dense<3.500000e+00> : tensor<f32>, zplan.own_dtype}
// CHECK: %[[NEWSCALE:.*]] = zg.where %[[OK]]
// CHECK: %[[NEWCOUNT:.*]] = zg.add %[[COUNT]],
// CHECK: %[[APPLIED:.*]] = zg.where %[[OK]], %[[NEWCOUNT]], %{{.*}}
// CHECK: %[[STEP:.*]] = zg.cast %[[APPLIED]] {{.*}} -> tensor<i64>
// CHECK: zg.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[STEP]],
// CHECK: zg.adamw
// CHECK: zg.assign %[[SCALE]], %[[NEWSCALE]]
// CHECK: zg.assign %[[GOOD]],
// CHECK: zg.assign %[[COUNT]], %[[NEWCOUNT]]
// CHECK: zg.assign %[[SKIPPED]],
// CHECK: return %{{.*}}, %[[TRUE]]

// Static scaling: a constant, no state, no skip; AdamW takes the step input.
// STATIC-LABEL: func.func @init()
// STATIC-NOT: loss_scale
// STATIC-LABEL: func.func @train_step
// STATIC-SAME: %[[STEPARG:[^:]*]]: tensor<i64> {zg.default = 1 : i64, zg.name = "step"}
// STATIC: zg.constant {value = dense<5.120000e+02> : tensor<f32>, zplan.own_dtype}
// STATIC-NOT: zplan.overflow_flag
// STATIC: zg.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[STEPARG]],
// STATIC-NOT: zg.state {{.*}}loss_scale

// BAD: dynamic loss scaling needs loss-scale-window >= 1 and 0 < loss-scale-min <= loss-scale
func.func @main(%ids: tensor<1x3xi64> {zg.name = "input_ids"}) -> (tensor<1x3x8xf32> {zg.name = "logits"}) {
  %e = zg.weight {file = "", length = 128 : i64, name = "emb", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %w = zg.weight {file = "", length = 128 : i64, name = "head", offset = 0 : i64, value = dense<0.25> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
  %y = zg.linear %x, %w : (tensor<1x3x4xf32>, tensor<4x8xf32>) -> tensor<1x3x8xf32>
  return %y : tensor<1x3x8xf32>
}
