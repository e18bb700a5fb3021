//===- Loss.h - losses of the training step ---------------------*- C++ -*-===//

#ifndef ZPLAN_COMPILER_AUTODIFF_LOSS_H
#define ZPLAN_COMPILER_AUTODIFF_LOSS_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace zplan::autodiff {

/// A scalar loss and the ops the backward must not differentiate through.
struct Loss {
  mlir::Value value;
  llvm::DenseSet<mlir::Operation *> stopGradient;
  /// For a loss that is sum(perRow * weights) (causal-lm): its parts, so that
  /// fp16 loss scaling can scale the weights instead of the loss (the scaled
  /// loss itself may not fit in fp16; its per-row gradients do). Null for a
  /// loss taken from a model output.
  mlir::Value perRow, weights;
};

/// The mean next-token cross-entropy of `logits` [B, S, V] (float) against
/// `ids` [B, S] (integer): position s of row b is scored against
/// ids[b, s + 1]; the last position of each row, and any label equal to
/// `ignoreIndex`, contribute nothing. The mean is over the B * (S - 1)
/// scored positions. Built from reduce_max, sub, exp, reduce_sum, log and
/// label_pick on [B * S, V], so that each reduction over the vocabulary is
/// a partial reduction plus an all_reduce when V is split over tp. The max
/// only shifts the log-sum-exp: it is returned in `stopGradient`.
Loss buildCausalLmLoss(mlir::OpBuilder &b, mlir::Location loc,
                       mlir::Value logits, mlir::Value ids,
                       int64_t ignoreIndex);

} // namespace zplan::autodiff

#endif // ZPLAN_COMPILER_AUTODIFF_LOSS_H
