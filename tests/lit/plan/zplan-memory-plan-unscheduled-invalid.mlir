// RUN: zplan-opt --verify-diagnostics --zplan-memory-plan %s

// Tests that the memory plan needs a schedule to plan over.
module {
  // expected-error@+1 {{zplan-memory-plan: @main has no schedule (run --zplan-schedule first)}}
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %a = zg.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
