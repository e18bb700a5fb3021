//===- GraphOps.h - zg operations -------------------------------*- C++ -*-===//
//
// Declares the ops of the zg dialect and the shape helpers they share.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRAPHOPS_H
#define ZPLAN_DIALECTS_GRAPH_GRAPHOPS_H

#include "dialects/graph/GradientOpInterface.h"
#include "dialects/graph/GraphDialect.h"
#include "dialects/graph/TpShardingOpInterface.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

namespace zplan::graph {

/// Returns the numpy broadcast of two shapes, or nullopt when they do not
/// broadcast.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Returns true when `from` broadcasts (numpy rules) to exactly `to`.
bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

} // namespace zplan::graph

#define GET_OP_CLASSES
#include "dialects/graph/GraphOps.h.inc"

#endif // ZPLAN_DIALECTS_GRAPH_GRAPHOPS_H
