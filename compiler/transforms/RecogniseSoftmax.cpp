//===- RecogniseSoftmax.cpp - zg-recognise-softmax ------------------------===//
//
// exp(x - max(x)) / sum(exp(x - max(x))) over one axis -> zg.softmax.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISESOFTMAX
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

struct SoftmaxPattern : OpRewritePattern<zg::DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::DivOp op,
                                PatternRewriter &rewriter) const override {
    auto exp = op.getLhs().getDefiningOp<zg::ExpOp>();
    auto sum = op.getRhs().getDefiningOp<zg::ReduceSumOp>();
    if (!exp || !sum || sum.getInput() != exp.getResult() ||
        !sum.getKeepdims() || sum.getAxes().size() != 1 ||
        exp.getType() != op.getType())
      return failure();
    int64_t axis = sum.getAxes()[0];
    Value x = exp.getInput();
    // The max subtraction only guards against overflow; softmax is the same
    // with or without it.
    if (auto sub = x.getDefiningOp<zg::SubOp>()) {
      auto max = sub.getRhs().getDefiningOp<zg::ReduceMaxOp>();
      if (max && max.getInput() == sub.getLhs() && max.getKeepdims() &&
          max.getAxes().size() == 1 && max.getAxes()[0] == axis &&
          sub.getLhs().getType() == sub.getType())
        x = sub.getLhs();
    }
    rewriter.replaceOpWithNewOp<zg::SoftmaxOp>(op, op.getType(), x,
                                               rewriter.getI64IntegerAttr(axis));
    return success();
  }
};

struct RecogniseSoftmaxPass
    : transforms::impl::RecogniseSoftmaxBase<RecogniseSoftmaxPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::SoftmaxOp, SoftmaxPattern>(getOperation(),
                                                        numSoftmax)))
      return signalPassFailure();
  }
};

} // namespace
