// RUN: zplan-opt %s --zg-build-train-step="micro-batches=2 clip-grad=1.0" | FileCheck %s

// Tests that with micro-batches @micro_step accumulates gradients and loss
// into persistent sums and @optimizer_step averages (dividing by its scalar
// input micro_batches, whose default records M), updates and clears them.
// CHECK-LABEL: func.func @init()
// CHECK-DAG: zg.state {init = "zeros", kind = "grad", name = "head.grad", of = "head"}
// CHECK-DAG: zg.state {init = "zeros", kind = "scalar", name = "loss_sum"}
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%{{.*}}: tensor<1x3xi64> {zg.name = "input_ids"}) -> (tensor<f32> {zg.name = "loss"})
// CHECK: %[[G:.*]] = zg.state {init = "zeros", kind = "grad", name = "head.grad", of = "head"}
// CHECK: zg.accumulate %[[G]], %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> ()
// CHECK: %[[L:.*]] = zg.state {init = "zeros", kind = "scalar", name = "loss_sum"}
// CHECK: zg.accumulate %[[L]], %[[LOSS:.*]] : (tensor<f32>, tensor<f32>) -> ()
// CHECK-NOT: zg.adamw
// CHECK: return %[[LOSS]]
// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: (%[[LR:[^:]*]]: tensor<f32> {zg.default = 1.000000e-03 : f64, zg.name = "lr"}, %[[STEP:[^:]*]]: tensor<i64> {zg.default = 1 : i64, zg.name = "step"}, %[[M:[^:]*]]: tensor<i64> {zg.default = 2 : i64, zg.name = "micro_batches"}) -> (tensor<f32> {zg.name = "loss"}, tensor<f32> {zg.name = "grad_norm"})
// CHECK: %[[GS:.*]] = zg.state {init = "zeros", kind = "grad", name = "head.grad", of = "head"}
// CHECK: %[[COUNT:.*]] = zg.cast %[[M]] {zplan.own_dtype} : (tensor<i64>) -> tensor<f32>
// CHECK: %[[INV:.*]] = zg.div %{{.*}}, %[[COUNT]] {zplan.own_dtype}
// CHECK: zg.sum_squares %[[GS]]
// CHECK: zg.adamw %{{.*}}, %[[GS]], %{{.*}}, %{{.*}}, %[[LR]], %[[STEP]],
// CHECK: %[[SUM:.*]] = zg.state {init = "zeros", kind = "scalar", name = "loss_sum"}
// CHECK: %[[MEAN:.*]] = zg.mul %[[SUM]], %[[INV]]
// CHECK: zg.assign %[[GS]]
// CHECK: zg.assign %[[SUM]]
// CHECK: return %[[MEAN]],
func.func @main(%ids: tensor<1x3xi64> {zg.name = "input_ids"}) -> (tensor<1x3x8xf32> {zg.name = "logits"}) {
  %e = zg.weight {file = "", length = 128 : i64, name = "emb", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %w = zg.weight {file = "", length = 128 : i64, name = "head", offset = 0 : i64, value = dense<0.25> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
  %y = zg.linear %x, %w : (tensor<1x3x4xf32>, tensor<4x8xf32>) -> tensor<1x3x8xf32>
  return %y : tensor<1x3x8xf32>
}
