//===- SetMesh.cpp - --zplan-set-mesh -------------------------------------===//
//
// Records the mesh on the module so that every later pass reads the same tp
// and dp.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANSETMESH
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;

namespace {
struct ZplanSetMeshPass
    : zplan::sharding::impl::ZplanSetMeshBase<ZplanSetMeshPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1 || dp < 1) {
      module.emitError("mesh sizes must be at least 1, got tp = ")
          << (int64_t)tp << ", dp = " << (int64_t)dp;
      return signalPassFailure();
    }
    zplan::dist::setMesh(module, tp, dp);
  }
};
} // namespace
