// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-rms-norm))' | FileCheck %s

// Tests that w * (x * reciprocal(sqrt(mean(x^2) + eps))) becomes
// zg.rms_norm with the scale.
// CHECK-LABEL: func.func @rms
// CHECK: %[[W:.*]] = zg.weight
// CHECK: %[[R:.*]] = zg.rms_norm %arg0, %[[W]] {epsilon = 9.99999997{{.*}}E-7 : f64}
// CHECK-NEXT: return %[[R]]
func.func @rms(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = zg.weight {file = "w.bin", length = 32 : i64, name = "g", offset = 0 : i64} : () -> tensor<8xf32>
  %two = zg.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = zg.constant {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %p = zg.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %m = zg.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %a = zg.add %m, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %s = zg.sqrt %a : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %r = zg.reciprocal %s : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %n = zg.mul %x, %r : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = zg.mul %w, %n : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Tests the variant x / sqrt(mean(x * x) + eps) without a scale.
// CHECK-LABEL: func.func @rms_div
// CHECK: %[[R:.*]] = zg.rms_norm %arg0 {epsilon
// CHECK-NEXT: return %[[R]]
func.func @rms_div(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %eps = zg.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %p = zg.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = zg.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %a = zg.add %eps, %m : (tensor<f32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %s = zg.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %y = zg.div %x, %s : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a mean over the first axis is not an RMS norm.
// CHECK-LABEL: func.func @not_rms
// CHECK-NOT: zg.rms_norm
func.func @not_rms(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %eps = zg.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %p = zg.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = zg.reduce_mean %p {axes = array<i64: 0>, keepdims = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %a = zg.add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = zg.sqrt %a : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %y = zg.div %x, %s : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests the TorchScript exporter's form of torch.rsqrt, x * (1 / sqrt(mean(x^2)
// + eps)), with the scale on the left; a numerator other than 1 is not a
// reciprocal and stays.
// CHECK-LABEL: func.func @rms_one_over
// CHECK: %[[W:.*]] = zg.weight
// CHECK: %[[R:.*]] = zg.rms_norm %arg0, %[[W]] {epsilon
// CHECK-NEXT: return %[[R]]
func.func @rms_one_over(%x: tensor<2x1x8xf32>) -> tensor<2x1x8xf32> {
  %w = zg.weight {file = "w.bin", length = 32 : i64, name = "g", offset = 0 : i64} : () -> tensor<8xf32>
  %two = zg.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = zg.constant {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %p = zg.pow %x, %two : (tensor<2x1x8xf32>, tensor<f32>) -> tensor<2x1x8xf32>
  %m = zg.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<2x1x8xf32>) -> tensor<2x1x1xf32>
  %a = zg.add %m, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %s = zg.sqrt %a : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %r = zg.div %one, %s : (tensor<f32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %n = zg.mul %x, %r : (tensor<2x1x8xf32>, tensor<2x1x1xf32>) -> tensor<2x1x8xf32>
  %y = zg.mul %w, %n : (tensor<8xf32>, tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  return %y : tensor<2x1x8xf32>
}

// -----

// CHECK-LABEL: func.func @rms_two_over
// CHECK-NOT: zg.rms_norm
func.func @rms_two_over(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = zg.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %eps = zg.constant {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %p = zg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = zg.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %a = zg.add %m, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = zg.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = zg.div %two, %s : (tensor<f32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %y = zg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
