// RUN: zplan-opt --zplan-schedule --zplan-memory-plan %s | FileCheck %s

// Tests that programs share one arena: the parameter and the state that two
// programs name are one tensor at one offset in both; inputs and outputs keep
// their bytes for the whole plan; transient values of different programs
// (which never run at once) reuse the same bytes, here the neg of @init and
// the mul of @train_step.
// CHECK-LABEL: module @shared
// CHECK-SAME: zplan.arena_bytes = array<i64: 1280, 0>
// CHECK: func.func @init
// CHECK: zg.weight
// CHECK-SAME: zplan.offsets = array<i64: 0>
// CHECK: zg.state
// CHECK-SAME: zplan.offsets = array<i64: 256>
// CHECK: zg.neg
// CHECK-SAME: zplan.offsets = array<i64: 1024>
// CHECK: func.func @train_step
// CHECK-SAME: zplan.offset = 512
// CHECK: zg.weight
// CHECK-SAME: zplan.offsets = array<i64: 0>
// CHECK: zg.state
// CHECK-SAME: zplan.offsets = array<i64: 256>
// CHECK: zg.mul
// CHECK-SAME: zplan.offsets = array<i64: 1024>
// CHECK: zg.accumulate
// CHECK-NOT: zplan.offsets
// CHECK: zg.add
// CHECK-SAME: zplan.offsets = array<i64: 768>
module @shared attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
  func.func @init() {
    %w = zg.weight {file = "w.bin", length = 256 : i64, name = "w", offset = 0 : i64} : () -> tensor<64xf32>
    %m = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<64xf32>
    %t = zg.neg %w : (tensor<64xf32>) -> tensor<64xf32>
    zg.assign %m, %t : (tensor<64xf32>, tensor<64xf32>) -> ()
    return
  }
  func.func @train_step(%g: tensor<64xf32>) -> tensor<64xf32> {
    %w = zg.weight {file = "w.bin", length = 256 : i64, name = "w", offset = 0 : i64} : () -> tensor<64xf32>
    %m = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<64xf32>
    %a = zg.mul %g, %g : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    zg.accumulate %m, %a : (tensor<64xf32>, tensor<64xf32>) -> ()
    %o = zg.add %w, %a : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    return %o : tensor<64xf32>
  }
}
