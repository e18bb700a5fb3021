// RUN: zplan-opt --split-input-file --zplan-schedule %s | FileCheck %s

// Tests that every public function is a program with its own events and
// collective hash, and that a write to persistent state waits for an earlier
// read of it on another stream (write-after-read): the accumulate into the
// gradient buffer runs on compute after the dp all_reduce read it on comm.
// A later gather of a written shard waits for the write (read-after-write).
// CHECK-LABEL: module @war
// CHECK: func.func @train_step
// CHECK-SAME: zplan.collective_hash = {{[0-9]+}} : ui64, zplan.num_events = 3 : i64
// CHECK: %[[R:.*]] = zd.all_reduce %[[ACC:[0-9a-z]+]]
// CHECK-SAME: zplan.signal = 0 : i64, zplan.stream = "comm"
// CHECK: zg.accumulate %[[ACC]], %arg0
// CHECK-SAME: zplan.stream = "compute", zplan.waits = array<i64: 0>
// CHECK: zg.assign
// CHECK-SAME: zplan.signal = 1 : i64, zplan.stream = "compute"
// CHECK: zd.gather_param
// CHECK-SAME: zplan.signal = 2 : i64, zplan.stream = "comm", zplan.waits = array<i64: 1>
// CHECK: func.func @init
// CHECK-SAME: zplan.collective_hash = 14695981039346656037 : ui64, zplan.num_events = 0 : i64
module @war attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
  func.func @train_step(%g: tensor<64xf32>) -> (tensor<64xf32>, tensor<8x16xf32>) {
    %acc = zg.state {init = "zeros", kind = "grad", name = "w.grad", of = "w"} : () -> tensor<64xf32>
    %r = zd.all_reduce %acc {axis = "dp"} : tensor<64xf32>
    zg.accumulate %acc, %g : (tensor<64xf32>, tensor<64xf32>) -> ()
    %s = zd.weight_shard {name = "w", file = "w.bin", offset = 0 : i64, length = 512 : i64, source_shape = array<i64: 8, 16>, local_shape = array<i64: 8, 16>, dp = 2 : i64, space = "device"} : tensor<64xf32>
    zg.assign %s, %g : (tensor<64xf32>, tensor<64xf32>) -> ()
    %full = zd.gather_param %s : tensor<64xf32> -> tensor<8x16xf32>
    %c = zg.neg %full : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %r, %c : tensor<64xf32>, tensor<8x16xf32>
  }
  func.func @init() {
    %m = zg.state {init = "zeros", kind = "grad", name = "w.grad", of = "w"} : () -> tensor<64xf32>
    %z = zg.neg %m : (tensor<64xf32>) -> tensor<64xf32>
    zg.assign %m, %z : (tensor<64xf32>, tensor<64xf32>) -> ()
    return
  }
}

// -----

// Tests that a write after a read on the same stream needs no event (stream
// order covers it): the pass must not add waits or signals here.
// CHECK-LABEL: module @same_stream
// CHECK: func.func @init
// CHECK-SAME: zplan.num_events = 0 : i64
// CHECK: zg.neg
// CHECK-NOT: zplan.waits
// CHECK-NOT: zplan.signal
// CHECK: zg.assign
// CHECK-NOT: zplan.waits
// CHECK: return
module @same_stream {
  func.func @init() {
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<64xf32>
    %z = zg.neg %m : (tensor<64xf32>) -> tensor<64xf32>
    zg.assign %m, %z : (tensor<64xf32>, tensor<64xf32>) -> ()
    return
  }
}

// -----

// Tests that private functions are not programs: they get no schedule.
// CHECK-LABEL: module @private_helper
// CHECK: func.func private @helper
// CHECK-NOT: zplan.num_events
// CHECK-SAME: {
// CHECK: func.func @main
// CHECK-SAME: zplan.num_events = 0 : i64
module @private_helper {
  func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = zg.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
