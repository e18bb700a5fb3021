// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers="window-bytes=1024" %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers="window-bytes=0" %s | FileCheck %s --check-prefix=NONE
// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers="window-bytes=4096 max-live-bytes=2048" %s | FileCheck %s --check-prefix=CAP
// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers %s | FileCheck %s --check-prefix=AUTO
// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers="window-bytes=1024" --zplan-schedule --zplan-memory-plan %s | FileCheck %s --check-prefix=PLAN

// Tests that with a window of one parameter (1024 bytes) each gather is
// issued at the first reader of the gather before it, so that it runs on the
// comm stream while that reader computes; the releases stay after the last
// use. With window-bytes=0 the pass must not move anything.
// CHECK-LABEL: func.func @chain
// CHECK: %[[GA:.*]] = zd.gather_param %{{.*}} : tensor<128xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[GB:.*]] = zd.gather_param
// CHECK-NEXT: %[[H1:.*]] = zg.linear %{{.*}}, %[[GA]]
// CHECK-NEXT: zd.release %[[GA]]
// CHECK-NEXT: %[[GC:.*]] = zd.gather_param
// CHECK-NEXT: %[[H2:.*]] = zg.linear %[[H1]], %[[GB]]
// CHECK-NEXT: zd.release %[[GB]]
// CHECK-NEXT: zg.linear %[[H2]], %[[GC]]
// CHECK-NEXT: zd.release %[[GC]]
// NONE-LABEL: func.func @chain
// NONE: zd.gather_param
// NONE-NEXT: zg.linear
// NONE-NEXT: zd.release
// NONE-NEXT: zd.gather_param
// NONE-NEXT: zg.linear
// NONE-NEXT: zd.release
// NONE-NEXT: zd.gather_param
// NONE-NEXT: zg.linear
// The schedule gives the gathers the comm stream, and each linear waits on
// the event of its own gather only: b's gather (event 1) does not wait for
// the linear of a, which reads a (event 0) while b's bytes arrive. c's
// gather reuses the bytes of a, so the memory plan makes it wait for the
// last compute step that touched them (a's release, event 3), not for the
// linear of b that runs meanwhile.
// PLAN-LABEL: func.func @chain
// PLAN-SAME: zplan.num_events = 4 : i64
// PLAN: zd.gather_param {{.*}}zplan.signal = 0 : i64, zplan.stream = "comm"}
// PLAN-NEXT: zd.gather_param {{.*}}zplan.signal = 1 : i64, zplan.stream = "comm"}
// PLAN-NEXT: zg.linear {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 0>}
// PLAN-NEXT: zd.release {{.*}}zplan.signal = 3 : i64, zplan.stream = "compute"}
// PLAN-NEXT: zd.gather_param {{.*}}zplan.signal = 2 : i64, zplan.stream = "comm", zplan.waits = array<i64: 3>}
// PLAN-NEXT: zg.linear {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 1>}
// PLAN-NEXT: zd.release
// PLAN-NEXT: zg.linear {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 2>}
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @chain(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %sa = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sb = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "b", offset = 1024 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sc = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "c", offset = 2048 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %ga = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
  %h1 = zg.linear %x, %ga : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %ga : tensor<16x16xf32>
  %gb = zd.gather_param %sb : tensor<128xf32> -> tensor<16x16xf32>
  %h2 = zg.linear %h1, %gb : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gb : tensor<16x16xf32>
  %gc = zd.gather_param %sc : tensor<128xf32> -> tensor<16x16xf32>
  %h3 = zg.linear %h2, %gc : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gc : tensor<16x16xf32>
  return %h3 : tensor<1x16xf32>
}
}

// -----

// Tests that max-live-bytes bounds the window: with a window of all three
// parameters and room for two gathered at once, b goes ahead with a, and c
// waits until a is released.
// CAP-LABEL: func.func @capped
// CAP: %[[GA:.*]] = zd.gather_param
// CAP-NEXT: %[[GB:.*]] = zd.gather_param
// CAP-NEXT: zg.linear %{{.*}}, %[[GA]]
// CAP-NEXT: zd.release %[[GA]]
// CAP-NEXT: %[[GC:.*]] = zd.gather_param
// CAP-NEXT: zg.linear %{{.*}}, %[[GB]]
// Without a cap (the default window of auto: the largest gather, as the
// function has no attention), each gather goes one parameter ahead.
// AUTO-LABEL: func.func @capped
// AUTO: zd.gather_param
// AUTO-NEXT: zd.gather_param
// AUTO-NEXT: zg.linear
// AUTO-NEXT: zd.release
// AUTO-NEXT: zd.gather_param
// AUTO-NEXT: zg.linear
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @capped(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %sa = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sb = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "b", offset = 1024 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sc = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "c", offset = 2048 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %ga = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
  %h1 = zg.linear %x, %ga : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %ga : tensor<16x16xf32>
  %gb = zd.gather_param %sb : tensor<128xf32> -> tensor<16x16xf32>
  %h2 = zg.linear %h1, %gb : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gb : tensor<16x16xf32>
  %gc = zd.gather_param %sc : tensor<128xf32> -> tensor<16x16xf32>
  %h3 = zg.linear %h2, %gc : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gc : tensor<16x16xf32>
  return %h3 : tensor<1x16xf32>
}
}

// -----

// Tests that a gather must NOT move above a write to the shard it reads (the
// training step updates its shards in place) nor above the producer of a
// computed operand: the second gather of a stays after the zg.assign, and
// the gather of the computed part stays after its producer.
// CHECK-LABEL: func.func @pinned
// CHECK: %[[G1:.*]] = zd.gather_param %[[SA:.*]] :
// CHECK-NEXT: zg.linear %{{.*}}, %[[G1]]
// CHECK-NEXT: zd.release %[[G1]]
// CHECK-NEXT: zg.assign %[[SA]]
// CHECK-NEXT: zd.gather_param %[[SA]]
// CHECK: %[[P:.*]] = zg.neg
// CHECK-NEXT: zd.gather_param %[[P]]
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @pinned(%x: tensor<1x16xf32>, %u: tensor<128xf32>) -> tensor<1x16xf32> {
  %sa = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %g1 = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
  %h1 = zg.linear %x, %g1 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %g1 : tensor<16x16xf32>
  zg.assign %sa, %u : (tensor<128xf32>, tensor<128xf32>) -> ()
  %g2 = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
  %h2 = zg.linear %h1, %g2 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %g2 : tensor<16x16xf32>
  %p = zg.neg %u : (tensor<128xf32>) -> tensor<128xf32>
  %g3 = zd.gather_param %p : tensor<128xf32> -> tensor<16x16xf32>
  %h3 = zg.linear %h2, %g3 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %g3 : tensor<16x16xf32>
  return %h3 : tensor<1x16xf32>
}
}
