//===- Passes.h - the training step in the graph dialect --------*- C++ -*-===//

#ifndef ZPLAN_COMPILER_AUTODIFF_PASSES_H
#define ZPLAN_COMPILER_AUTODIFF_PASSES_H

#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace zplan::autodiff {

#define GEN_PASS_DECL
#include "compiler/autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/autodiff/Passes.h.inc"

} // namespace zplan::autodiff

#endif // ZPLAN_COMPILER_AUTODIFF_PASSES_H
