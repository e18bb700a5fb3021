// RUN: zplan-opt --verify-diagnostics --zplan-schedule=dtype=fp8 %s

// Tests that an unknown plan dtype is refused with the accepted names.
// expected-error@+1 {{zplan-schedule: unknown dtype 'fp8' (expected fp32, bf16 or fp16)}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
