//===- Passes.h - recognition passes on zg ----------------------*- C++ -*-===//

#ifndef ZPLAN_COMPILER_TRANSFORMS_PASSES_H
#define ZPLAN_COMPILER_TRANSFORMS_PASSES_H

#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace zplan::transforms {

#define GEN_PASS_DECL
#include "compiler/transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/transforms/Passes.h.inc"

/// Adds the recognition passes, in order, to `pm` (nested on func.func).
/// zplan import runs exactly this.
void buildRecognitionPipeline(mlir::OpPassManager &pm);

/// Registers the pipeline as `zg-recognise` for zplan-opt.
void registerRecognitionPipeline();

} // namespace zplan::transforms

#endif // ZPLAN_COMPILER_TRANSFORMS_PASSES_H
