//===- Matchers.h - structural helpers of the recognition passes -*- C++ -*-=//
//
// The matcher library of the recognition passes: scalar constants, weights,
// squares, product trees, and the operands of commutative ops in either
// order (each pass used to peel them with its own loop over both orders);
// and the one driver every pattern-based recognition pass runs (each used to
// repeat it in its runOnOperation).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H
#define ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

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

/// Returns true when v is x^2: pow(x, 2) or x * x.
bool isSquareOf(mlir::Value v, mlir::Value x);

/// Matches a commutative binary op (zg.add, zg.mul) with one operand
/// produced by OpTy: returns that op and the other operand for the first
/// order in which `pred(def, other)` holds. The defining operand is tried at
/// index `first` and then at the other index, so a pass can keep the order
/// its patterns were written for.
template <typename OpTy, typename Pred>
std::optional<std::pair<OpTy, mlir::Value>>
matchCommutative(mlir::Operation *op, Pred &&pred, unsigned first = 0) {
  for (unsigned i = 0; i < 2; ++i) {
    unsigned k = i ^ first;
    auto def = op->getOperand(k).getDefiningOp<OpTy>();
    mlir::Value other = op->getOperand(1 - k);
    if (def && pred(def, other))
      return std::make_pair(def, other);
  }
  return std::nullopt;
}

/// Matches a commutative binary op on its two operands, whatever produces
/// them: returns (a, b) for the first order in which `pred(a, b)` holds,
/// trying (lhs, rhs) first.
template <typename Pred>
std::optional<std::pair<mlir::Value, mlir::Value>>
matchEitherOrder(mlir::Operation *op, Pred &&pred) {
  for (unsigned k = 0; k < 2; ++k) {
    mlir::Value a = op->getOperand(k), b = op->getOperand(1 - k);
    if (pred(a, b))
      return std::make_pair(a, b);
  }
  return std::nullopt;
}

/// Matches a quotient, `n / d` (zg.div) or `n * reciprocal(d)` (zg.mul, the
/// reciprocal tried on the right first), the reciprocal also as `1 / d` (a
/// zg.div of a splat 1: how the TorchScript exporter writes torch.rsqrt):
/// returns (n, d) when `pred(n, d)` holds.
template <typename Pred>
std::optional<std::pair<mlir::Value, mlir::Value>>
matchQuotient(mlir::Operation *op, Pred &&pred) {
  if (auto div = llvm::dyn_cast<graph::DivOp>(op)) {
    if (!pred(div.getLhs(), div.getRhs()))
      return std::nullopt;
    return std::make_pair(div.getLhs(), div.getRhs());
  }
  if (!llvm::isa<graph::MulOp>(op))
    return std::nullopt;
  auto m = matchCommutative<graph::ReciprocalOp>(
      op,
      [&](graph::ReciprocalOp rec, mlir::Value n) {
        return pred(n, rec.getInput());
      },
      /*first=*/1);
  if (m)
    return std::make_pair(m->second, m->first.getInput());
  auto one = matchCommutative<graph::DivOp>(
      op,
      [&](graph::DivOp inv, mlir::Value n) {
        return isSplatNear(inv.getLhs(), 1.0, 0.0) && pred(n, inv.getRhs());
      },
      /*first=*/1);
  if (!one)
    return std::nullopt;
  return std::make_pair(one->second, one->first.getRhs());
}

/// A contiguous part of a tensor's last dim, every other dim whole: a
/// zg.slice with unit steps, or one result of a zg.split on the last axis.
struct LastDimPart {
  mlir::Value base;
  int64_t start = 0;
  int64_t size = 0;
};

/// The part of its base's last dim that `v` is, or nullopt when v is not
/// such a part.
std::optional<LastDimPart> matchLastDimPart(mlir::Value v);

/// The denominator of a normalisation, sqrt(reduce_mean(...) + eps) with a
/// scalar constant eps on either side of the sum: its sum, its mean and eps.
/// What is averaged, and over which axes, is the caller's to check.
struct SqrtMeanPlusEps {
  graph::AddOp add;
  graph::ReduceMeanOp mean;
  double eps = 0.0;
};
std::optional<SqrtMeanPlusEps> matchSqrtMeanPlusEps(mlir::Value s);

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

/// The body of a recognition pass: applies `Patterns` greedily under `root`
/// and adds to `recognised` how many more OpTy ops there are afterwards, the
/// pass's statistic. Fails when the greedy driver does; the pass then signals
/// failure.
template <typename OpTy, typename... Patterns>
mlir::LogicalResult recognise(mlir::Operation *root,
                              mlir::Pass::Statistic &recognised) {
  int64_t before = countOps<OpTy>(root);
  mlir::RewritePatternSet patterns(root->getContext());
  patterns.add<Patterns...>(root->getContext());
  if (mlir::failed(mlir::applyPatternsGreedily(root, std::move(patterns))))
    return mlir::failure();
  recognised += countOps<OpTy>(root) - before;
  return mlir::success();
}

} // namespace zplan::transforms

#endif // ZPLAN_COMPILER_TRANSFORMS_MATCHERS_H
