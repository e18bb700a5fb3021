// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-gelu))' | FileCheck %s

// Tests that the erf form 0.5 * x * (1 + erf(x / sqrt(2))) becomes an exact
// zg.gelu.
// CHECK-LABEL: func.func @gelu_erf
// CHECK: %[[G:.*]] = zg.gelu %arg0 {approximate = "none"}
// CHECK-NEXT: return %[[G]]
func.func @gelu_erf(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %r2 = zg.constant {value = dense<1.41421354> : tensor<f32>} : () -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %half = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %d = zg.div %x, %r2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = zg.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %a = zg.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = zg.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = zg.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that the tanh form with x * x * x becomes zg.gelu "tanh".
// CHECK-LABEL: func.func @gelu_tanh
// CHECK: %[[G:.*]] = zg.gelu %arg0 {approximate = "tanh"}
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %k = zg.constant {value = dense<0.044715> : tensor<f32>} : () -> tensor<f32>
  %c = zg.constant {value = dense<0.797884583> : tensor<f32>} : () -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %half = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %x2 = zg.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %x3 = zg.mul %x2, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %kx3 = zg.mul %k, %x3 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %in = zg.add %x, %kx3 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t0 = zg.mul %in, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %t = zg.tanh %t0 : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %a = zg.add %one, %t : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %hx = zg.mul %half, %x : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = zg.mul %hx, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a wrong constant (0.5 instead of 1/sqrt(2) inside erf) does not
// match.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: zg.gelu
// CHECK: zg.erf
func.func @not_gelu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %half = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %d = zg.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = zg.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %a = zg.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = zg.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = zg.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
