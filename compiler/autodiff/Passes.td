//===- Passes.td - the training step in the graph dialect --*- tablegen -*-===//
//
// Passes that turn a recognised forward graph into the programs of a training
// step (docs/training-contract.md), before sharding, so that the sharding and
// plan passes plan forward, backward and optimizer together.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_AUTODIFF_PASSES_TD
#define ZPLAN_COMPILER_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def BuildTrainStep : Pass<"zg-build-train-step", "mlir::ModuleOp"> {
  let summary = "forward @main -> @init and @train_step (loss, backward, AdamW)";
  let description = [{
    Replaces the forward function `@main` by two programs:

    - `@init()`: fills every optimizer state tensor (`zg.state`: the AdamW
      moments) with zeros (zg.assign of a splat zg.constant).
    - `@train_step(<@main's inputs>, %lr, %step) -> (loss, grad_norm)`: the
      forward; the loss; the reverse-mode backward built from each op's
      GradientOpInterface (a value used several times gets the sum of its
      gradients, so the tied GPT-2 embedding is one parameter); the global
      gradient norm `sqrt(sum of zg.sum_squares)`; clipping
      `grad_scale = min(1, clip / (norm + 1e-6))`; the learning rate of this
      step from the schedule; one `zg.adamw` per parameter.

    `loss = "causal-lm"`: the mean next-token cross-entropy of the logits
    [B, S, V] against the integer input [B, S] shifted by one (the last
    position of each row is ignored), composed of reduce_max, sub, exp,
    reduce_sum, log and label_pick so that a vocabulary split over tp needs
    only partial reductions. `loss-output = NAME`: the named output of
    `@main` (one element) is the loss.

    Exporters merge initializers with equal values (all the layer-norm scales
    of a fresh model, for instance); such a zg.weight has several users but
    stands for several parameters. A weight used several times is split into
    one parameter per user op unless it carries `zg.tied` (the recognised
    tied embedding / LM head).

    `micro-batches = M > 1`: instead of `@train_step`, `@micro_step(<inputs>)
    -> loss` runs forward and backward on one micro-batch and adds its
    gradients into `zg.state` buffers (kind grad, `<param>.grad`) and its
    loss into `loss_sum` with `zg.accumulate`; `@optimizer_step(%lr, %step)
    -> (loss, grad_norm)` divides the sums by M (the mean of M equal-sized
    micro-batch means is the batch mean), clips, updates and clears the
    sums. The caller runs `@micro_step` M times, then `@optimizer_step`.

    `recompute = selective`: the outputs of layer_norm, rms_norm, gelu and
    silu that the backward reads (the next linear's weight gradient needs its
    input) are recomputed right before their first backward use, from inputs
    the backward keeps anyway (the norm and activation gradients read them),
    so those outputs die with the forward.

    `loss-scaling = static | dynamic` (fp16 training, as DeepSpeed does it):
    the backward is seeded with the loss scale instead of 1, so every
    gradient carries the scale (small fp16 gradients do not flush to zero);
    the norm and AdamW's grad_scale divide it out in fp32. `static` scales
    by the constant `loss-scale` and never skips. `dynamic` keeps the scale
    in the persistent scalar `loss_scale` (initially `loss-scale`): a step
    whose gradients hold an inf or a nan (the squared norm is not finite; the
    flag is marked `zplan.overflow_flag` for the sharding passes, which take
    its maximum over tp and dp) is skipped: zg.adamw gets step 0, which
    updates nothing, the scale is halved (never below `loss-scale-min`) and
    `skipped_steps` counts it; after `loss-scale-window` good steps in a row
    the scale doubles. The optimizer's step count (AdamW's bias correction
    and the learning-rate schedule) is the persistent `optimizer_steps`,
    which skipped steps do not advance (DeepSpeed steps neither the optimizer
    nor the scheduler on an overflow).

    `restore-zero-biases`: exporters drop a bias whose initial value is zero
    (torch.onnx's optimizer removes GPT-2's zero-initialised Conv1D biases),
    but PyTorch trains it. With this option every zg.linear without a bias,
    other than one whose weight is `zg.tied`, gets a trainable zero bias
    named after its weight (`<prefix>.bias` for `<prefix>.weight`).

    Before:
    ```mlir
    func.func @main(%ids: tensor<2x16xi64>) -> tensor<2x16x512xf32>
    ```
    After:
    ```mlir
    func.func @init()
    func.func @train_step(%ids: tensor<2x16xi64>,
                          %lr: tensor<f32> {zg.default = 1.0e-3 : f64},
                          %step: tensor<i64> {zg.default = 1 : i64})
        -> (tensor<f32> {zg.name = "loss"}, tensor<f32> {zg.name = "grad_norm"})
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect",
                           "mlir::func::FuncDialect"];
  let options = [
    Option<"loss", "loss", "std::string", "\"causal-lm\"",
           "Loss: causal-lm (next-token cross-entropy of the logits)">,
    Option<"lossOutput", "loss-output", "std::string", "\"\"",
           "Use this named output of @main as the loss instead">,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "Label value that contributes no loss">,
    Option<"lr", "lr", "double", "1e-3",
           "Default learning rate (the lr run input's default)">,
    Option<"lrSchedule", "lr-schedule", "std::string", "\"constant\"",
           "constant, warmup (linear warmup, then constant) or warmup-decay "
           "(linear warmup, then linear decay to 0)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0",
           "warmup, warmup-decay: steps of linear warmup">,
    Option<"totalSteps", "total-steps", "int64_t", "0",
           "warmup-decay: the step at which the rate reaches 0">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "AdamW decoupled weight decay">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"clipGrad", "clip-grad", "double", "0.0",
           "Clip the global gradient norm at this value (0: no clipping)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per optimizer step: @micro_step accumulates, "
           "@optimizer_step updates">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "none, or selective: the backward recomputes norm and activation "
           "outputs from their saved inputs instead of keeping them">,
    Option<"lossScaling", "loss-scaling", "std::string", "\"none\"",
           "none, static or dynamic (fp16 loss scaling)">,
    Option<"lossScale", "loss-scale", "double", "65536.0",
           "The static loss scale, or the dynamic scale's initial value">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t", "1000",
           "dynamic: good steps in a row after which the scale doubles">,
    Option<"lossScaleMin", "loss-scale-min", "double", "1.0",
           "dynamic: the scale never drops below this">,
    Option<"restoreZeroBiases", "restore-zero-biases", "bool", "false",
           "Give every linear without a bias (except the tied LM head) a "
           "trainable bias starting at zero">
  ];
  let statistics = [
    Statistic<"numParameters", "num-parameters", "Parameters trained">,
    Statistic<"numBackwardOps", "num-backward-ops",
              "Ops built by the gradient rules">,
    Statistic<"numRecomputed", "num-recomputed",
              "Forward ops cloned into the backward (recompute=selective)">
  ];
}

#endif // ZPLAN_COMPILER_AUTODIFF_PASSES_TD
