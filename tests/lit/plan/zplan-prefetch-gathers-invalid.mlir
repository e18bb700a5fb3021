// RUN: zplan-opt --zplan-prefetch-gathers="window-bytes=-2" --verify-diagnostics %s

// Tests that a window below -1 (auto) is refused with the option's name.
// expected-error @+1 {{zplan-prefetch-gathers: window-bytes must be -1 (auto) or at least 0 and max-live-bytes at least 0, got -2 and 0}}
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
