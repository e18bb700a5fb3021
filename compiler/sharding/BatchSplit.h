//===- BatchSplit.h - Dividing a program's batch ----------------*- C++ -*-===//
//
// The batch split of ZeRO over dp (compiler/sharding/Zero.cpp), offered to
// the plan phase too: --zplan-overlap-chunks divides a program's batch into
// chunks with the same rules.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_SHARDING_BATCHSPLIT_H
#define ZPLAN_COMPILER_SHARDING_BATCHSPLIT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace zplan::sharding {

/// Divides the batch of `func` into `parts`: every ranked argument keeps
/// 1/parts of its rows (dimension 0) and the batch dimension is followed
/// through the graph, dividing every type that carries it; a constant that
/// carries the whole batch is cut to its first rows (its rows are all the
/// same). Emits an error naming the op and fails where an op cannot keep
/// the batch split.
mlir::LogicalResult splitBatch(mlir::func::FuncOp func, int64_t parts);

} // namespace zplan::sharding

#endif // ZPLAN_COMPILER_SHARDING_BATCHSPLIT_H
