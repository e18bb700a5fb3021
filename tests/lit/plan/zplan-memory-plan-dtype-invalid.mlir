// RUN: zplan-opt --verify-diagnostics --zplan-schedule --zplan-memory-plan=dtype=int4 %s

// Tests that an unknown plan dtype is refused with the accepted names.
// expected-error@+1 {{zplan-memory-plan: unknown dtype 'int4' (expected fp32, bf16 or fp16)}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %a = zg.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
