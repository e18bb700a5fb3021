//===- RecogniseLinear.cpp - zg-recognise-linear --------------------------===//
//
// matmul(x, W | transpose(W)) [* alpha] [+ bias] -> zg.linear, and the
// reshape sandwich of the Gemm form of 3-D activations folded away. Each
// step is its own pattern, so the greedy driver composes them in any order
// the graph presents.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISELINEAR
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

struct MatmulToLinear : OpRewritePattern<zg::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MatmulOp op,
                                PatternRewriter &rewriter) const override {
    Value w = op.getRhs();
    bool transW = false;
    if (auto t = w.getDefiningOp<zg::TransposeOp>()) {
      if (getWeight2D(t.getInput()) && t.getPerm() == ArrayRef<int64_t>{1, 0}) {
        w = t.getInput();
        transW = true;
      }
    }
    if (!getWeight2D(w))
      return failure();
    // A 1-D input is a vector-matrix product: linear computes the same.
    rewriter.replaceOpWithNewOp<zg::LinearOp>(
        op, op.getType(), op.getLhs(), w, Value(),
        rewriter.getBoolAttr(transW), rewriter.getF64FloatAttr(1.0));
    return success();
  }
};

/// add(linear(x, w), b [N]) -> linear(x, w, b).
struct LinearBias : OpRewritePattern<zg::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::AddOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchCommutative<zg::LinearOp>(op, [&](zg::LinearOp lin, Value b) {
      auto bt = cast<RankedTensorType>(b.getType());
      return !lin.getBias() && lin->hasOneUse() &&
             lin.getType() == op.getType() && bt.getRank() == 1 &&
             bt.getDimSize(0) == lin.getType().getShape().back();
    });
    if (!m)
      return failure();
    auto [lin, b] = *m;
    rewriter.replaceOpWithNewOp<zg::LinearOp>(
        op, op.getType(), lin.getInput(), lin.getWeight(), b,
        lin.getTransWAttr(), lin.getAlphaAttr());
    return success();
  }
};

/// mul(linear(x, w), c) with a scalar c and no bias yet -> alpha *= c.
struct LinearAlpha : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchCommutative<zg::LinearOp>(op, [&](zg::LinearOp lin, Value c) {
      return getSplatValue(c) && !lin.getBias() && lin->hasOneUse() &&
             lin.getType() == op.getType();
    });
    if (!m)
      return failure();
    auto [lin, c] = *m;
    rewriter.replaceOpWithNewOp<zg::LinearOp>(
        op, op.getType(), lin.getInput(), lin.getWeight(), Value(),
        lin.getTransWAttr(),
        rewriter.getF64FloatAttr(lin.getAlpha().convertToDouble() *
                                 *getSplatValue(c)));
    return success();
  }
};

/// reshape(linear(reshape(x -> [M, K])) -> [d0, ..., dp-1, N]) where
/// d0 ... dp-1 are the leading dims of x with product M (and the remaining
/// dims of x have product K) -> linear(x viewed as [d0, ..., dp-1, K]). The
/// view is x itself when its last dim is K (the Gemm form of 3-D
/// activations); otherwise one reshape stays in front of the linear.
struct LinearReshapeSandwich : OpRewritePattern<zg::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto lin = op.getInput().getDefiningOp<zg::LinearOp>();
    if (!lin || !lin->hasOneUse())
      return failure();
    auto inner = lin.getInput().getDefiningOp<zg::ReshapeOp>();
    if (!inner)
      return failure();
    Value x = inner.getInput();
    auto xt = cast<RankedTensorType>(x.getType());
    auto xs = xt.getShape();
    auto flat = inner.getType().getShape();
    auto out = op.getType().getShape();
    if (flat.size() != 2 || out.size() < 2 || out.size() > xs.size())
      return failure();
    size_t p = out.size() - 1;
    if (ArrayRef<int64_t>(xs).take_front(p) != out.drop_back() ||
        out.back() != lin.getType().getShape().back())
      return failure();
    int64_t m = 1, k = 1;
    for (size_t d = 0; d < xs.size(); ++d)
      (d < p ? m : k) *= xs[d];
    if (m != flat[0] || k != flat[1])
      return failure();
    Value in = x;
    if (xs.size() != p + 1) {
      SmallVector<int64_t> view(xs.take_front(p));
      view.push_back(k);
      in = zg::ReshapeOp::create(rewriter, op.getLoc(),
                                 RankedTensorType::get(view, xt.getElementType()),
                                 x);
    }
    rewriter.replaceOpWithNewOp<zg::LinearOp>(
        op, op.getType(), in, lin.getWeight(), lin.getBias(),
        lin.getTransWAttr(), lin.getAlphaAttr());
    return success();
  }
};

struct RecogniseLinearPass
    : transforms::impl::RecogniseLinearBase<RecogniseLinearPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::LinearOp, MatmulToLinear, LinearBias, LinearAlpha,
                         LinearReshapeSandwich>(getOperation(), numLinear)))
      return signalPassFailure();
  }
};

} // namespace
