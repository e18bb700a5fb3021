// RUN: zplan-opt --split-input-file --zplan-overlap-chunks=chunks=2 %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-overlap-chunks=chunks=1 %s | FileCheck %s --check-prefix=ONE
// RUN: zplan-opt --split-input-file --zplan-overlap-chunks=chunks=2 --zplan-schedule --zplan-memory-plan %s | FileCheck %s --check-prefix=PLAN

// Tests that a tp layer is split into two batch chunks interleaved segment
// by segment: chunk 0's all_reduce comes before chunk 1's work of the same
// segment, the weights are shared, the inputs are sliced by rows and the
// result is the concatenation of the chunks. With chunks=1 the pass must
// not change anything.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK: %[[X0:.*]] = zg.slice %[[X]] {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[W1:.*]] = zg.weight {{.*}}name = "w1"
// CHECK-NEXT: %[[W2:.*]] = zg.weight {{.*}}name = "w2"
// CHECK-NEXT: %[[H0:.*]] = zg.linear %[[X0]], %[[W1]] : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
// CHECK-NEXT: %[[G0:.*]] = zg.gelu %[[H0]]
// CHECK-NEXT: %[[P0:.*]] = zg.linear %[[G0]], %[[W2]]
// CHECK-NEXT: %[[R0:.*]] = zd.all_reduce %[[P0]] {axis = "tp"} : tensor<1x8xf32>
// CHECK-NEXT: %[[X1:.*]] = zg.slice %[[X]] {starts = array<i64: 1, 0>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[H1:.*]] = zg.linear %[[X1]], %[[W1]]
// CHECK-NEXT: %[[G1:.*]] = zg.gelu %[[H1]]
// CHECK-NEXT: %[[P1:.*]] = zg.linear %[[G1]], %[[W2]]
// CHECK-NEXT: %[[R1:.*]] = zd.all_reduce %[[P1]] {axis = "tp"} : tensor<1x8xf32>
// CHECK-NEXT: %[[Y0:.*]] = zg.add %[[R0]], %[[X0]]
// CHECK-NEXT: %[[Y1:.*]] = zg.add %[[R1]], %[[X1]]
// CHECK-NEXT: %[[Y:.*]] = zg.concat %[[Y0]], %[[Y1]] {axis = 0 : i64} : (tensor<1x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: return %[[Y]] : tensor<2x8xf32>
// ONE-LABEL: func.func @layer
// ONE-NOT: zg.slice
// ONE-NOT: zg.concat
// ONE: return
// On the streams: chunk 1's slice and linears do not wait for chunk 0's
// all_reduce (event 2); only chunk 0's residual add does, and chunk 1's add
// waits for chunk 1's all_reduce (event 3). The memory plan keeps the bytes
// an all_reduce reads from being reused by chunk 1's compute (that reuse
// would order chunk 1 after the all_reduce again).
// PLAN-LABEL: func.func @layer
// PLAN: zd.all_reduce {{.*}}zplan.signal = 2 : i64, zplan.stream = "comm", zplan.waits = array<i64: 0>}
// PLAN-NEXT: zg.slice
// PLAN-NOT: zplan.waits
// PLAN-SAME: tensor<1x8xf32>
// PLAN-NEXT: zg.linear
// PLAN-NOT: zplan.waits
// PLAN-SAME: tensor<1x4xf32>
// PLAN-NEXT: zg.gelu
// PLAN-NOT: zplan.waits
// PLAN-SAME: tensor<1x4xf32>
// PLAN-NEXT: zg.linear
// PLAN-NOT: zplan.waits
// PLAN-SAME: tensor<1x8xf32>
// PLAN-NEXT: zd.all_reduce {{.*}}zplan.signal = 3 : i64, zplan.stream = "comm", zplan.waits = array<i64: 1>}
// PLAN-NEXT: zg.add {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 2>}
// PLAN-NEXT: zg.add {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 3>}
// PLAN-NEXT: zg.concat
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @layer(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w1 = zg.weight {name = "w1", file = "m.data", offset = 0 : i64, length = 128 : i64} : () -> tensor<8x4xf32>
  %w2 = zg.weight {name = "w2", file = "m.data", offset = 128 : i64, length = 128 : i64} : () -> tensor<4x8xf32>
  %h = zg.linear %x, %w1 : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %g = zg.gelu %h {approximate = "tanh"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %p = zg.linear %g, %w2 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = zd.all_reduce %p {axis = "tp"} : tensor<2x8xf32>
  %y = zg.add %r, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
}

// -----

// Tests that a program without a tp collective must NOT be chunked: there is
// nothing to overlap.
// CHECK-LABEL: func.func @no_collective
// CHECK-NOT: zg.slice
// CHECK-NOT: zg.concat
// CHECK: return
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @no_collective(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = zg.neg %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
}

// -----

// Tests that a program whose batch the rules cannot split stays whole, with
// a remark that names the reason (a reduction over the batch dimension).
// CHECK-LABEL: func.func @reduces_batch
// CHECK-NOT: zg.slice
// CHECK: return
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @reduces_batch(%x: tensor<2x8xf32>) -> tensor<1x8xf32> {
  %r = zd.all_reduce %x {axis = "tp"} : tensor<2x8xf32>
  %s = zg.reduce_sum %r {axes = array<i64: 0>, keepdims = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  return %s : tensor<1x8xf32>
}
}
