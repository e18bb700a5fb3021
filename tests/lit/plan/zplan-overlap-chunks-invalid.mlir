// RUN: zplan-opt --split-input-file --zplan-overlap-chunks=chunks=2 --verify-diagnostics %s
// RUN: not zplan-opt --zplan-overlap-chunks=chunks=0 %s 2>&1 | FileCheck %s --check-prefix=ZERO

// Tests that a program whose batch cannot be split stays whole with a remark
// naming the op and the reason.
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
// expected-remark @+1 {{zplan-overlap-chunks: @reduces_batch stays one chunk: cannot split the batch over dp = 2: the batch dimension is reduced}}
func.func @reduces_batch(%x: tensor<2x8xf32>) -> tensor<1x8xf32> {
  %r = zd.all_reduce %x {axis = "tp"} : tensor<2x8xf32>
  %s = zg.reduce_sum %r {axes = array<i64: 0>, keepdims = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  return %s : tensor<1x8xf32>
}
}

// -----

// Tests that chunks below 1 are refused.
// ZERO: zplan-overlap-chunks: chunks must be at least 1, got 0
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
