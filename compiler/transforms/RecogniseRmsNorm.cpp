//===- RecogniseRmsNorm.cpp - zg-recognise-rms-norm -----------------------===//
//
// x * reciprocal(sqrt(mean(x^2) + eps)) [* w] -> zg.rms_norm(x, w).
// Two patterns: the normalisation itself (root: the mul or div by the root
// mean square) and the absorption of a following [D] scale into an
// unscaled zg.rms_norm, so that any association of the product matches.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISERMSNORM
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

/// Returns true when x = y - reduce_mean(y): then the pattern is a layer
/// norm, which zg-recognise-layer-norm takes.
bool isCentred(Value x) {
  auto sub = x.getDefiningOp<zg::SubOp>();
  if (!sub)
    return false;
  auto mean = sub.getRhs().getDefiningOp<zg::ReduceMeanOp>();
  return mean && mean.getInput() == sub.getLhs();
}

/// Matches sqrt(reduce_mean(x^2, [last], keepdims) + eps) and returns eps.
std::optional<double> matchRms(Value s, Value x) {
  if (isCentred(x))
    return std::nullopt;
  auto m = matchSqrtMeanPlusEps(s);
  if (!m)
    return std::nullopt;
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  zg::ReduceMeanOp mean = m->mean;
  if (!mean.getKeepdims() || mean.getAxes().size() != 1 ||
      mean.getAxes()[0] != rank - 1 || !isSquareOf(mean.getInput(), x) ||
      cast<RankedTensorType>(m->add.getType()).getNumElements() !=
          cast<RankedTensorType>(mean.getType()).getNumElements())
    return std::nullopt;
  return m->eps;
}

/// x * reciprocal(rms) or x / rms -> rms_norm(x).
template <typename OpTy> struct RmsNormQuotient : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    std::optional<double> eps;
    auto q = matchQuotient(op, [&](Value x, Value rms) {
      return x.getType() == op.getType() && (eps = matchRms(rms, x));
    });
    if (!q)
      return failure();
    rewriter.replaceOpWithNewOp<zg::RmsNormOp>(
        op, op.getType(), q->first, Value(), rewriter.getF64FloatAttr(*eps));
    return success();
  }
};

/// mul(w [D], rms_norm(x)) -> rms_norm(x, w).
struct RmsNormScale : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto m =
        matchCommutative<zg::RmsNormOp>(op, [&](zg::RmsNormOp norm, Value w) {
          auto wt = cast<RankedTensorType>(w.getType());
          return !norm.getScale() && norm->hasOneUse() &&
                 norm.getType() == op.getType() && wt.getRank() == 1 &&
                 wt.getDimSize(0) == norm.getType().getShape().back();
        });
    if (!m)
      return failure();
    auto [norm, w] = *m;
    rewriter.replaceOpWithNewOp<zg::RmsNormOp>(
        op, op.getType(), norm.getInput(), w, norm.getEpsilonAttr());
    return success();
  }
};

struct RecogniseRmsNormPass
    : transforms::impl::RecogniseRmsNormBase<RecogniseRmsNormPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::RmsNormOp, RmsNormQuotient<zg::MulOp>,
                         RmsNormQuotient<zg::DivOp>, RmsNormScale>(
            getOperation(), numRmsNorm)))
      return signalPassFailure();
  }
};

} // namespace
