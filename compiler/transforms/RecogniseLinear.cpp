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

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

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
    for (int k = 0; k < 2; ++k) {
      auto lin = op->getOperand(k).getDefiningOp<zg::LinearOp>();
      Value b = op->getOperand(1 - k);
      if (!lin || lin.getBias() || !lin->hasOneUse() ||
          lin.getType() != op.getType())
        continue;
      auto bt = cast<RankedTensorType>(b.getType());
      if (bt.getRank() != 1 ||
          bt.getDimSize(0) != lin.getType().getShape().back())
        continue;
      rewriter.replaceOpWithNewOp<zg::LinearOp>(
          op, op.getType(), lin.getInput(), lin.getWeight(), b,
          lin.getTransWAttr(), lin.getAlphaAttr());
      return success();
    }
    return failure();
  }
};

/// mul(linear(x, w), c) with a scalar c and no bias yet -> alpha *= c.
struct LinearAlpha : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    for (int k = 0; k < 2; ++k) {
      auto lin = op->getOperand(k).getDefiningOp<zg::LinearOp>();
      Value c = op->getOperand(1 - k);
      auto s = getSplatValue(c);
      if (!lin || !s || lin.getBias() || !lin->hasOneUse() ||
          lin.getType() != op.getType())
        continue;
      rewriter.replaceOpWithNewOp<zg::LinearOp>(
          op, op.getType(), lin.getInput(), lin.getWeight(), Value(),
          lin.getTransWAttr(),
          rewriter.getF64FloatAttr(lin.getAlpha().convertToDouble() * *s));
      return success();
    }
    return failure();
  }
};

/// reshape(linear(reshape(x [..., K] -> [M, K])) -> [..., N]) ->
/// linear(x).
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
    auto xs = cast<RankedTensorType>(x.getType()).getShape();
    auto flat = inner.getType().getShape();
    auto out = op.getType().getShape();
    if (xs.empty() || flat.size() != 2 || flat[1] != xs.back())
      return failure();
    SmallVector<int64_t> expect(xs.drop_back());
    expect.push_back(lin.getType().getShape().back());
    if (ArrayRef<int64_t>(expect) != out)
      return failure();
    rewriter.replaceOpWithNewOp<zg::LinearOp>(
        op, op.getType(), x, lin.getWeight(), lin.getBias(),
        lin.getTransWAttr(), lin.getAlphaAttr());
    return success();
  }
};

struct RecogniseLinearPass
    : transforms::impl::RecogniseLinearBase<RecogniseLinearPass> {
  void runOnOperation() override {
    int64_t before = countOps<zg::LinearOp>(getOperation());
    RewritePatternSet patterns(&getContext());
    patterns.add<MatmulToLinear, LinearBias, LinearAlpha,
                 LinearReshapeSandwich>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    numLinear += countOps<zg::LinearOp>(getOperation()) - before;
  }
};

} // namespace
