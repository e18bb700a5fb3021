module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @train_step(%g: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 16 : i64} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<4xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  // expected-error @+1 {{--dtype bf16 training over dp = 2 needs ZeRO stage 1 or more}}
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return
}
}
