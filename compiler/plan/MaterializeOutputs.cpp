//===- MaterializeOutputs.cpp - --zplan-materialize-outputs ---------------===//
//
// Gives every graph output storage that an instruction writes, so that the
// runtime can read it back: a returned input, parameter or constant (or a view
// of one) gets a copy right before the return.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Passes.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANMATERIALIZEOUTPUTS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

/// True when `v` is computed by an instruction the plan runs: not a block
/// argument, not storage (weights, shards, constants), and not a view whose
/// base is one of those.
bool isComputed(Value v) {
  while (true) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    StringRef name = def->getName().getStringRef();
    if (name == "zg.weight" || name == "zg.constant" ||
        name == "zd.weight_shard")
      return false;
    // A reshape is planned as a view of its operand (same bytes).
    if (isa<graph::ReshapeOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    return true;
  }
}

struct MaterializeOutputsPass
    : impl::ZplanMaterializeOutputsBase<MaterializeOutputsPass> {
  void runOnOperation() override {
    // Collect first: the rewrite inserts ops next to the returns.
    llvm::SmallVector<func::ReturnOp> returns;
    getOperation().walk([&](func::ReturnOp ret) { returns.push_back(ret); });
    for (func::ReturnOp ret : returns) {
      OpBuilder b(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Value v = operand.get();
        if (isComputed(v))
          continue;
        auto copy = graph::CastOp::create(b, ret.getLoc(), v.getType(), v);
        operand.set(copy.getResult());
        ++numCopies;
      }
    }
  }
};

} // namespace
} // namespace zplan::plan
