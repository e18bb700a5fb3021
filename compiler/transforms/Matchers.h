//===- Matchers.h - structural helpers of the recognition passes -*- C++ -*-=//
//
// Small predicates shared by the recognition passes: scalar constants,
// weights, product trees.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H
#define ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace zplan::transforms {

/// The value of a constant whose elements are all equal (a splat
/// zg.constant, possibly behind a zg.expand), as double.
std::optional<double> getSplatValue(mlir::Value v);

/// Returns true when v is a splat constant equal to `expected` within a
/// relative tolerance.
bool isSplatNear(mlir::Value v, double expected, double relTol = 1e-4);

/// Returns true when a and b are equal within a relative tolerance.
bool near(double a, double b, double relTol = 1e-4);

/// The zg.weight defining v when it is 2-D, else null.
graph::WeightOp getWeight2D(mlir::Value v);

/// Flattens a tree of zg.mul ops rooted at `v` (into operands whose
/// producing mul has a single use, up to `depth` levels) into its non-scalar
/// factors and the product of its scalar-constant factors.
void collectFactors(mlir::Value v, llvm::SmallVectorImpl<mlir::Value> &factors,
                    double &scalar, int depth = 3);

/// A splat zg.constant of `type` holding `value`, created at the builder's
/// insertion point.
mlir::Value createSplat(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::RankedTensorType type, double value);

/// Counts the ops of type OpTy under `root`.
template <typename OpTy> int64_t countOps(mlir::Operation *root) {
  int64_t n = 0;
  root->walk([&](OpTy) { ++n; });
  return n;
}

} // namespace zplan::transforms

#endif // ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H
