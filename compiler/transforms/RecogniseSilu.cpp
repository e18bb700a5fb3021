//===- RecogniseSilu.cpp - zg-recognise-silu ------------------------------===//
//
// x * sigmoid(x) -> zg.silu(x).
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISESILU
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

struct SiluPattern : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto m = matchCommutative<zg::SigmoidOp>(
        op,
        [&](zg::SigmoidOp sig, Value x) {
          return sig.getInput() == x && x.getType() == op.getType();
        },
        /*first=*/1);
    if (!m)
      return failure();
    rewriter.replaceOpWithNewOp<zg::SiluOp>(op, op.getType(), m->second);
    return success();
  }
};

struct RecogniseSiluPass
    : transforms::impl::RecogniseSiluBase<RecogniseSiluPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::SiluOp, SiluPattern>(getOperation(), numSilu)))
      return signalPassFailure();
  }
};

} // namespace
