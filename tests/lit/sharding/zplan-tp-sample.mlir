// RUN: zplan-opt --zplan-sharding="tp=2" %s | FileCheck %s

// Tests that zg.sample receives whole logits under tp: the LM head tied to a
// vocabulary-parallel embedding gives each rank a slice of the vocabulary,
// and the logits are gathered (the padding sliced off) before the sampler,
// which every rank then runs on the same values.
// CHECK-LABEL: func.func @next_token
// CHECK: zg.embedding {{.*}}zd.vocab_stride = 5 : i64
// CHECK: %[[L:.*]] = zg.linear {{.*}} -> tensor<2x5xf32>
// CHECK: %[[G:.*]] = zd.all_gather %[[L]] {axis = "tp", dim = 1 : i64} : tensor<2x5xf32> -> tensor<2x10xf32>
// CHECK: %[[S:.*]] = zg.sample %[[G]], {{.*}} : (tensor<2x10xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
// CHECK: return %[[S]]
func.func @next_token(%ids: tensor<2xi64>, %t: tensor<f32>, %k: tensor<i64>, %p: tensor<f32>, %seed: tensor<i64>, %step: tensor<i64>) -> tensor<2xi64> {
  %w = zg.weight {name = "wte", file = "m.data", offset = 0 : i64, length = 320 : i64} : () -> tensor<10x8xf32>
  %e = zg.embedding %w, %ids : (tensor<10x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  %l = zg.linear %e, %w {trans_w = true} : (tensor<2x8xf32>, tensor<10x8xf32>) -> tensor<2x10xf32>
  %s = zg.sample %l, %t, %k, %p, %seed, %step : (tensor<2x10xf32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  return %s : tensor<2xi64>
}
