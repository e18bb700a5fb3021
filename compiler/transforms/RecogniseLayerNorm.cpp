//===- RecogniseLayerNorm.cpp - zg-recognise-layer-norm -------------------===//
//
// (x - mean(x)) / sqrt(var(x) + eps) [* g] [+ b] -> zg.layer_norm. The
// normalisation becomes a layer_norm with a constant-one scale; two more
// patterns absorb a following scale and bias, so that the imported
// LayerNormalization op and the decomposed form end in the same op.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISELAYERNORM
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

bool isLastAxisMean(zg::ReduceMeanOp m) {
  int64_t rank = cast<RankedTensorType>(m.getInput().getType()).getRank();
  return m.getKeepdims() && m.getAxes().size() == 1 &&
         m.getAxes()[0] == rank - 1;
}

/// Matches d = x - mean(x) and returns x.
Value centredInput(Value d) {
  auto sub = d.getDefiningOp<zg::SubOp>();
  if (!sub)
    return nullptr;
  auto mean = sub.getRhs().getDefiningOp<zg::ReduceMeanOp>();
  if (!mean || !isLastAxisMean(mean) || mean.getInput() != sub.getLhs() ||
      sub.getType() != sub.getLhs().getType())
    return nullptr;
  return sub.getLhs();
}

/// Matches sqrt(mean(d^2) + eps) and returns eps.
std::optional<double> matchStd(Value s, Value d) {
  auto m = matchSqrtMeanPlusEps(s);
  if (!m || !isLastAxisMean(m->mean) || !isSquareOf(m->mean.getInput(), d) ||
      m->add.getType() != m->mean.getType())
    return std::nullopt;
  return m->eps;
}

/// Returns true when v has exactly the shape of ln's normalised dims (a
/// scale or bias that applies per normalised element).
bool coversNormalisedDims(zg::LayerNormOp ln, Value v) {
  auto vt = cast<RankedTensorType>(v.getType());
  auto norm = ln.getType().getShape().drop_front(ln.getAxis());
  return vt.getRank() == int64_t(norm.size()) && vt.getShape() == norm;
}

Value makeLayerNorm(PatternRewriter &rewriter, Operation *op, Value x,
                    double eps) {
  auto xt = cast<RankedTensorType>(x.getType());
  auto st = RankedTensorType::get({xt.getShape().back()}, xt.getElementType());
  Value ones = createSplat(rewriter, op->getLoc(), st, 1.0);
  return zg::LayerNormOp::create(rewriter, op->getLoc(), xt, x, ones, Value(),
                                 rewriter.getI64IntegerAttr(xt.getRank() - 1),
                                 rewriter.getF64FloatAttr(eps));
}

/// d * reciprocal(dev) or d / dev, d = x - mean(x) and dev its standard
/// deviation -> layer_norm(x, ones).
template <typename OpTy> struct LayerNormQuotient : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    Value x;
    std::optional<double> eps;
    auto q = matchQuotient(op, [&](Value d, Value dev) {
      x = centredInput(d);
      return x && x.getType() == op.getType() && (eps = matchStd(dev, d));
    });
    if (!q)
      return failure();
    rewriter.replaceOp(op, makeLayerNorm(rewriter, op, x, *eps));
    return success();
  }
};

/// mul(layer_norm(x, ones), g) -> layer_norm(x, g).
struct LayerNormScale : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto m =
        matchCommutative<zg::LayerNormOp>(op, [&](zg::LayerNormOp ln, Value g) {
          return !ln.getBias() && ln->hasOneUse() &&
                 isSplatNear(ln.getScale(), 1.0, 0) &&
                 ln.getType() == op.getType() && coversNormalisedDims(ln, g);
        });
    if (!m)
      return failure();
    auto [ln, g] = *m;
    rewriter.replaceOpWithNewOp<zg::LayerNormOp>(
        op, op.getType(), ln.getInput(), g, Value(), ln.getAxisAttr(),
        ln.getEpsilonAttr());
    return success();
  }
};

/// add(layer_norm(x, g), b) -> layer_norm(x, g, b).
struct LayerNormBias : OpRewritePattern<zg::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::AddOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchCommutative<zg::LayerNormOp>(
        op, [&](zg::LayerNormOp ln, Value bias) {
          return !ln.getBias() && ln->hasOneUse() &&
                 ln.getType() == op.getType() && coversNormalisedDims(ln, bias);
        });
    if (!m)
      return failure();
    auto [ln, bias] = *m;
    rewriter.replaceOpWithNewOp<zg::LayerNormOp>(
        op, op.getType(), ln.getInput(), ln.getScale(), bias, ln.getAxisAttr(),
        ln.getEpsilonAttr());
    return success();
  }
};

struct RecogniseLayerNormPass
    : transforms::impl::RecogniseLayerNormBase<RecogniseLayerNormPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::LayerNormOp, LayerNormQuotient<zg::DivOp>,
                         LayerNormQuotient<zg::MulOp>, LayerNormScale,
                         LayerNormBias>(getOperation(), numLayerNorm)))
      return signalPassFailure();
  }
};

} // namespace
