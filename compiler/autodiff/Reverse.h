//===- Reverse.h - reverse-mode differentiation of zg code ------*- C++ -*-===//
//
// The engine behind zg-build-train-step: it walks a block backwards and asks
// each op's GradientOpInterface for its vector-Jacobian product.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_AUTODIFF_REVERSE_H
#define ZPLAN_COMPILER_AUTODIFF_REVERSE_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace zplan::autodiff {

/// Builds, at `builder`'s insertion point (after every op of `loss`'s
/// block that the loss depends on), the gradient of the scalar `loss` with
/// respect to each value of `wrt`. A value used several times gets the sum
/// of its gradients. Ops in `stopGradient` pass nothing back to their
/// operands (a quantity the loss is invariant to, like the shift of a
/// log-sum-exp). `seed` is the loss's own gradient, the constant 1 when null
/// (a loss scale under fp16: every gradient then comes out multiplied by it).
/// Returns one gradient per `wrt` value, null where the value does not reach
/// the loss; fails (after an error at the op) when an op on the path has no
/// rule or its rule fails.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
buildReverseMode(mlir::OpBuilder &builder, mlir::Value loss,
                 llvm::ArrayRef<mlir::Value> wrt,
                 const llvm::DenseSet<mlir::Operation *> &stopGradient,
                 mlir::Value seed = {});

} // namespace zplan::autodiff

#endif // ZPLAN_COMPILER_AUTODIFF_REVERSE_H
