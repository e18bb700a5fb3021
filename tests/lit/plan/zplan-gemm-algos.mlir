// RUN: zplan-opt %s --split-input-file --zplan-gemm-algos=dtype=bf16 | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zplan-gemm-algos="dtype=bf16 arch=80" | FileCheck %s --check-prefix=NONE
// RUN: zplan-opt %s --split-input-file --zplan-gemm-algos | FileCheck %s --check-prefix=NONE

// Tests that a product the tuning table (zk/gemm_algos.h) has for sm_90 gets
// its cuBLASLt algorithm: llama2-7b batch 4's gate product stored in bf16
// (4096 rows, K 4096, N 11008, W [K, N], no bias); not for another arch, nor
// in an fp32 plan (the second and third RUN).
// CHECK-LABEL: func.func @tuned
// CHECK: zg.linear %arg0, %arg1 {zd.gemm_algo = array<i64: 66, 29, 35, 1, 0, 1, 0>}
// NONE-LABEL: func.func @tuned
// NONE-NOT: zd.gemm_algo
func.func @tuned(%x: tensor<4x1024x4096xf32>, %w: tensor<4096x11008xf32>) -> tensor<4x1024x11008xf32> {
  %y = zg.linear %x, %w : (tensor<4x1024x4096xf32>, tensor<4096x11008xf32>) -> tensor<4x1024x11008xf32>
  return %y : tensor<4x1024x11008xf32>
}

// -----

// Tests that the pass must not choose for a product the table does not
// have: the same shape with the weight transposed, with a bias, with
// another row count, and a product the few-row kernel runs.
// CHECK-LABEL: func.func @untuned
// CHECK-NOT: zd.gemm_algo
func.func @untuned(%x: tensor<4096x4096xf32>, %wt: tensor<11008x4096xf32>, %w: tensor<4096x11008xf32>, %b: tensor<11008xf32>, %x2: tensor<2048x4096xf32>, %x1: tensor<1x4096xf32>) -> (tensor<4096x11008xf32>, tensor<4096x11008xf32>, tensor<2048x11008xf32>, tensor<1x11008xf32>) {
  %c = zg.linear %x, %wt {trans_w = true} : (tensor<4096x4096xf32>, tensor<11008x4096xf32>) -> tensor<4096x11008xf32>
  %d = zg.linear %x, %w, %b : (tensor<4096x4096xf32>, tensor<4096x11008xf32>, tensor<11008xf32>) -> tensor<4096x11008xf32>
  %e = zg.linear %x2, %w : (tensor<2048x4096xf32>, tensor<4096x11008xf32>) -> tensor<2048x11008xf32>
  %f = zg.linear %x1, %w {zd.kernel = "few_rows"} : (tensor<1x4096xf32>, tensor<4096x11008xf32>) -> tensor<1x11008xf32>
  return %c, %d, %e, %f : tensor<4096x11008xf32>, tensor<4096x11008xf32>, tensor<2048x11008xf32>, tensor<1x11008xf32>
}
