// RUN: zplan-opt %s --zg-build-train-step="loss-output=loss" | FileCheck %s

// Tests that loss-output picks the named output as the loss and that only
// the parameter on its path is trained.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = zg.weight {{.*}}name = "w"
// CHECK: %[[L:.*]] = zg.reduce_sum
// CHECK: zg.adamw %[[W]],
// CHECK-NOT: zg.adamw
// CHECK: return %[[L]],
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {zg.name = "loss"}, tensor<4xf32> {zg.name = "other"}) {
  %w = zg.weight {file = "", length = 16 : i64, name = "w", offset = 0 : i64, value = dense<0.5> : tensor<4xf32>} : () -> tensor<4xf32>
  %u = zg.weight {file = "", length = 16 : i64, name = "unused", offset = 0 : i64, value = dense<0.5> : tensor<4xf32>} : () -> tensor<4xf32>
  %p = zg.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = zg.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  %o = zg.add %x, %u : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %l, %o : tensor<f32>, tensor<4xf32>
}
