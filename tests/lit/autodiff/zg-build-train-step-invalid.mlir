// RUN: zplan-opt %s --split-input-file --zg-build-train-step -verify-diagnostics

// Tests that a module without a forward @main is refused.
// expected-error @+1 {{zg-build-train-step: the module has no @main}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// Tests that causal-lm needs logits of rank 3.
module {
  // expected-error @+1 {{--loss causal-lm needs one [batch, seq, vocab] float output}}
  func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x8xf32> {
    %w = zg.weight {file = "", length = 64 : i64, name = "w", offset = 0 : i64, value = dense<0.5> : tensor<2x8xf32>} : () -> tensor<2x8xf32>
    return %w : tensor<2x8xf32>
  }
}

// -----

// Tests that causal-lm needs the token ids as an input.
module {
  // expected-error @+1 {{--loss causal-lm needs an integer input of shape [2, 3] (the token ids)}}
  func.func @main(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
    %w = zg.weight {file = "", length = 32 : i64, name = "w", offset = 0 : i64, value = dense<0.5> : tensor<8xf32>} : () -> tensor<8xf32>
    %y = zg.mul %x, %w : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    return %y : tensor<2x3x8xf32>
  }
}

// -----

// Tests that an op without a gradient rule on the path to the loss is named.
module {
  func.func @main(%ids: tensor<2x3xi64>, %d: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
    %w = zg.weight {file = "", length = 32 : i64, name = "w", offset = 0 : i64, value = dense<0.5> : tensor<8xf32>} : () -> tensor<8xf32>
    %y = zg.mul %d, %w : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    // expected-error @+1 {{'zg.softmax_grad' op is on the path from a parameter to the loss but has no gradient rule}}
    %z = zg.softmax_grad %y, %d {axis = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    return %z : tensor<2x3x8xf32>
  }
}

// -----

// Tests that a graph whose loss does not depend on any parameter is refused.
module {
  // expected-error @+1 {{zg-build-train-step: no parameter reaches the loss}}
  func.func @main(%ids: tensor<2x3xi64>, %x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
    return %x : tensor<2x3x8xf32>
  }
}
