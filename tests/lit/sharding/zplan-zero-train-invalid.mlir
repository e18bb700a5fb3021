// RUN: zplan-opt --split-input-file --verify-diagnostics --zplan-zero-train="stage=2" %s
// RUN: not zplan-opt --split-input-file --zplan-zero-train="stage=4" %s 2>&1 | FileCheck %s --check-prefix=STAGE

// Tests that an update whose parameter is persistent state but not a
// zg.weight is refused: ZeRO cannot partition what it cannot load.
// STAGE: ZeRO stage must be 0, 1, 2 or 3, got 4
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @train_step(%g: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  %p = zg.state {init = "zeros", kind = "scalar", name = "p"} : () -> tensor<4xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "p.m", of = "p"} : () -> tensor<4xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "p.v", of = "p"} : () -> tensor<4xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  // expected-error @+1 {{the parameter of zg.adamw must be a zg.weight}}
  zg.adamw %p, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return
}
}

// -----

// Tests that optimizer offload with stage 0 over dp > 1 is refused with the
// flag that fixes it.
// RUN: zplan-opt --split-input-file --verify-diagnostics --zplan-zero-train="stage=0 offload-optimizer=cpu" %S/Inputs/zero-train-offload-stage0.mlir

