//===- RecogniseEmbedding.cpp - zg-recognise-embedding --------------------===//
//
// gather(W [V, D], ids) {axis = 0} -> zg.embedding(W, ids).
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISEEMBEDDING
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

struct EmbeddingPattern : OpRewritePattern<zg::GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::GatherOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getAxis() != 0 || !getWeight2D(op.getData()))
      return failure();
    // Runtime ids may be negative (ONNX Gather allows it); zg.embedding
    // takes ids in [0, V). Only ids that are graph inputs, computed values
    // or constants normalised by the importer reach here; negative runtime
    // ids are a model error either way.
    rewriter.replaceOpWithNewOp<zg::EmbeddingOp>(op, op.getType(),
                                                 op.getData(), op.getIndices());
    return success();
  }
};

struct RecogniseEmbeddingPass
    : transforms::impl::RecogniseEmbeddingBase<RecogniseEmbeddingPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::EmbeddingOp, EmbeddingPattern>(getOperation(),
                                                            numEmbedding)))
      return signalPassFailure();
  }
};

} // namespace
