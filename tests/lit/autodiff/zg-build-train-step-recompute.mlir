// RUN: zplan-opt %s --zg-build-train-step="recompute=selective" | FileCheck %s
// RUN: zplan-opt %s --zg-build-train-step | FileCheck %s --check-prefix=NONE

// Tests that recompute=selective clones the norm and the activation whose
// outputs the backward reads (the linears' weight gradients) right before
// their first backward use, and that without it the forward outputs are
// read directly (the pass must not clone).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[N:.*]] = zg.layer_norm %[[X:[^ ,]*]],
// CHECK: %[[H:.*]] = zg.linear %[[N]],
// CHECK: %[[A:.*]] = zg.gelu %[[H]]
// CHECK: zg.label_pick_grad
// CHECK: %[[A2:.*]] = zg.gelu %[[H]]
// CHECK: zg.reshape %[[A2]]
// CHECK: zg.gelu_grad %[[H]],
// CHECK: %[[N2:.*]] = zg.layer_norm %[[X]],
// CHECK: zg.reshape %[[N2]]
// CHECK: zg.layer_norm_grad %[[X]],
// NONE-LABEL: func.func @train_step
// NONE-COUNT-1: zg.layer_norm %
// NONE-COUNT-1: zg.gelu %
// NONE-NOT: zg.gelu %
func.func @main(%ids: tensor<2x3xi64> {zg.name = "input_ids"}) -> (tensor<2x3x8xf32> {zg.name = "logits"}) {
  %e = zg.weight {file = "", length = 128 : i64, name = "emb", offset = 0 : i64, value = dense<0.5> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %g = zg.weight {file = "", length = 16 : i64, name = "ln", offset = 0 : i64, value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %w1 = zg.weight {file = "", length = 256 : i64, name = "fc1", offset = 0 : i64, value = dense<0.25> : tensor<4x16xf32>} : () -> tensor<4x16xf32>
  %w2 = zg.weight {file = "", length = 512 : i64, name = "fc2", offset = 0 : i64, value = dense<0.125> : tensor<16x8xf32>} : () -> tensor<16x8xf32>
  %x = zg.embedding %e, %ids : (tensor<8x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %n = zg.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %h = zg.linear %n, %w1 : (tensor<2x3x4xf32>, tensor<4x16xf32>) -> tensor<2x3x16xf32>
  %a = zg.gelu %h {approximate = "tanh"} : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  %y = zg.linear %a, %w2 : (tensor<2x3x16xf32>, tensor<16x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}
