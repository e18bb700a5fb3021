//===- RecogniseTiedEmbedding.cpp - zg-recognise-tied-embedding -----------===//
//
// Marks a zg.weight used as an embedding table and as a linear weight.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISETIEDEMBEDDING
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
namespace zg = zplan::graph;

namespace {

struct RecogniseTiedEmbeddingPass
    : transforms::impl::RecogniseTiedEmbeddingBase<
          RecogniseTiedEmbeddingPass> {
  void runOnOperation() override {
    getOperation().walk([&](zg::WeightOp w) {
      bool table = false, linear = false;
      for (OpOperand &use : w->getUses()) {
        if (auto e = dyn_cast<zg::EmbeddingOp>(use.getOwner()))
          table |= e.getTable() == w.getResult();
        if (auto l = dyn_cast<zg::LinearOp>(use.getOwner()))
          linear |= l.getWeight() == w.getResult();
      }
      if (table && linear && !w->hasAttr("zg.tied")) {
        w->setAttr("zg.tied", UnitAttr::get(&getContext()));
        ++numTied;
      }
    });
  }
};

} // namespace
