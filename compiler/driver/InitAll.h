//===- InitAll.h - registration shared by every tool ------------*- C++ -*-===//
//
// Every dialect and pass of zplan is registered here, once, for zplan,
// zplan-opt and the unit tests. A part that adds a dialect or passes appends
// one line to each function below.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_INITALL_H
#define ZPLAN_COMPILER_DRIVER_INITALL_H

#include "compiler/autodiff/Passes.h"
#include "compiler/plan/Passes.h"
#include "compiler/sharding/Pipeline.h"
#include "compiler/transforms/Passes.h"
#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace zplan {

/// Adds every dialect the compiler produces or consumes.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::func::FuncDialect, zplan::graph::GraphDialect>();
  registry.insert<zplan::dist::ZdDialect>();
}

/// Registers every pass (and pipeline) for the command line.
inline void registerAllPasses() {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  zplan::transforms::registerTransformsPasses();
  zplan::transforms::registerRecognitionPipeline();
  zplan::autodiff::registerAutodiffPasses();
  zplan::sharding::registerShardingPipeline();
  zplan::plan::registerPlanPasses();
}

} // namespace zplan

#endif // ZPLAN_COMPILER_DRIVER_INITALL_H
