// RUN: not zplan-opt %s "--zplan-gemm-algos=dtype=fp8" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not zplan-opt %s "--zplan-gemm-algos=arch=9" 2>&1 | FileCheck %s --check-prefix=NUMBER

// Tests the pass's refusals: a plan dtype it does not know, and an arch that
// is no compute capability.
// DTYPE: error: --zplan-gemm-algos: unknown dtype 'fp8'
// NUMBER: error: --zplan-gemm-algos: arch 9 is not a compute capability (90 for sm_90)
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> tensor<4x6xf32> {
  %y = zg.linear %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}
