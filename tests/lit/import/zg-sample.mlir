// RUN: zplan-opt %s | zplan-opt | FileCheck %s

// Tests that zg.sample parses, verifies and prints back, on f32 and bf16 logits.
// CHECK-LABEL: func.func @sample
// CHECK: zg.sample %{{.*}} : (tensor<2x50xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
// CHECK: zg.sample %{{.*}} : (tensor<1x7xbf16>,
func.func @sample(%l: tensor<2x50xf32>, %lb: tensor<1x7xbf16>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>,
                  %seed: tensor<i64>, %step: tensor<i64>) -> (tensor<2xi64>, tensor<1xi64>) {
  %0 = zg.sample %l, %t, %k, %p, %seed, %step : (tensor<2x50xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  %1 = zg.sample %lb, %t, %k, %p, %seed, %step : (tensor<1x7xbf16>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<1xi64>
  return %0, %1 : tensor<2xi64>, tensor<1xi64>
}
