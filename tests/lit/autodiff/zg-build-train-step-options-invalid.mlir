// RUN: not zplan-opt %s --zg-build-train-step="loss=mse" 2>&1 | FileCheck %s --check-prefix=LOSS
// RUN: not zplan-opt %s --zg-build-train-step="lr-schedule=cosine" 2>&1 | FileCheck %s --check-prefix=SCHED
// RUN: not zplan-opt %s --zg-build-train-step="lr-schedule=warmup-decay warmup-steps=5 total-steps=5" 2>&1 | FileCheck %s --check-prefix=STEPS
// RUN: not zplan-opt %s --zg-build-train-step="lr-schedule=warmup warmup-steps=2 total-steps=5" 2>&1 | FileCheck %s --check-prefix=WARM
// RUN: not zplan-opt %s --zg-build-train-step="beta2=1.0" 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not zplan-opt %s --zg-build-train-step="loss-output=nope" 2>&1 | FileCheck %s --check-prefix=OUT
// RUN: not zplan-opt %s --zg-build-train-step="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=MICRO

// Tests that bad options are named before anything is built.
// LOSS: zg-build-train-step: unknown loss 'mse' (expected causal-lm, or loss-output=NAME)
// SCHED: zg-build-train-step: unknown lr-schedule 'cosine' (expected constant, warmup or warmup-decay)
// STEPS: zg-build-train-step: warmup-decay needs 0 <= warmup-steps < total-steps (got 5 and 5)
// WARM: zg-build-train-step: warmup needs warmup-steps >= 0 and no total-steps (got 2 and 5)
// BETA: zg-build-train-step: beta1 and beta2 must be in [0, 1)
// OUT: zg-build-train-step: @main has no output named 'nope'
// MICRO: zg-build-train-step: micro-batches must be at least 1 (got 0)
func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
  %w = zg.weight {file = "", length = 96 : i64, name = "w", offset = 0 : i64, value = dense<0.5> : tensor<2x3x8xf32>} : () -> tensor<2x3x8xf32>
  return %w : tensor<2x3x8xf32>
}
