//===- EmitPlan.h - Scheduled, memory-planned IR to a plan file -----------===//
//
// Translates the module that --zplan-schedule and --zplan-memory-plan have
// annotated into the FlatBuffer of runtime/schema/plan.fbs, and gathers the
// figures of the memory/communication report on the way.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_EMITPLAN_H
#define ZPLAN_COMPILER_PLAN_EMITPLAN_H

#include "compiler/plan/MemoryPlanAnalysis.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>
#include <vector>

namespace zplan::plan {

struct EmitOptions {
  /// Where the plan will be written: weight files are recorded relative to
  /// its folder (absolute when no relative path exists).
  std::string planPath;
  /// The folder of the source model: zg.weight `file` attributes are
  /// relative to it.
  std::string modelDir;
  /// Target backend: 0 cpu, 1 cuda (plan.fbs Backend).
  int backend = 0;
  int zeroStage = 0;
  std::string producer;
};

/// Bytes one rank moves per run for one collective kind over one axis.
struct CommFigure {
  uint64_t count = 0;
  /// The message size summed over calls (the tensor each rank contributes
  /// or receives, as the collective's definition goes).
  uint64_t payloadBytes = 0;
  /// Bytes each rank sends with ring algorithms: all_reduce 2(n-1)/n of the
  /// tensor, all_gather and gather_param (n-1) parts, reduce_scatter (n-1)/n
  /// of the input, broadcast the tensor.
  uint64_t sentBytes = 0;
};

struct PlanSummary {
  int world = 1, tp = 1, dp = 1;
  PlanDType dtype = PlanDType::F32;
  MemoryFigures memory;
  /// comm[kind][axis]
  std::map<std::string, std::map<std::string, CommFigure>> comm;
  uint64_t collectiveHash = 0;
  size_t numInstructions = 0, numTensors = 0, numWeights = 0;
};

/// Builds the plan FlatBuffer (without the 24-byte file header) into
/// `payload`. Emits an error naming the op on anything plan.fbs cannot
/// express and fails.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, const EmitOptions &options,
                             std::vector<uint8_t> &payload,
                             PlanSummary &summary);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_EMITPLAN_H
