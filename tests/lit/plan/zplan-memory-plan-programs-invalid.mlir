// RUN: zplan-opt --split-input-file --verify-diagnostics --zplan-schedule --zplan-memory-plan %s

// Tests that a state name means one tensor: the same zg.state name with
// another type in another program is refused.
module {
  func.func @init() {
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<64xf32>
    %z = zg.neg %m : (tensor<64xf32>) -> tensor<64xf32>
    return
  }
  func.func @train_step() {
    // expected-error@+1 {{zplan-memory-plan: state 'w.m' has type 'tensor<32xf32>' here but 'tensor<64xf32>' in another program}}
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<32xf32>
    %z = zg.neg %m : (tensor<32xf32>) -> tensor<32xf32>
    return
  }
}
