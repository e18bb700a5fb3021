//===- Passes.h - Planner passes --------------------------------*- C++ -*-===//

#ifndef ZPLAN_COMPILER_PLAN_PASSES_H
#define ZPLAN_COMPILER_PLAN_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "dialects/graph/GraphDialect.h"
#include "mlir/Pass/Pass.h"

namespace zplan::plan {

#define GEN_PASS_DECL
#include "compiler/plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/plan/Passes.h.inc"

/// Attribute names the passes write and the emitter reads.
namespace attr {
constexpr llvm::StringLiteral kStream = "zplan.stream";
constexpr llvm::StringLiteral kSignal = "zplan.signal";
constexpr llvm::StringLiteral kWaits = "zplan.waits";
constexpr llvm::StringLiteral kNumEvents = "zplan.num_events";
constexpr llvm::StringLiteral kCollectiveHash = "zplan.collective_hash";
constexpr llvm::StringLiteral kOffsets = "zplan.offsets";
constexpr llvm::StringLiteral kOffset = "zplan.offset";
constexpr llvm::StringLiteral kArenaBytes = "zplan.arena_bytes";
constexpr llvm::StringLiteral kPeakLiveBytes = "zplan.peak_live_bytes";
constexpr llvm::StringLiteral kDType = "zplan.dtype";
/// --zplan-early-loads: the step's kernel loads its early operands before the
/// wait for the previous kernel (plan 2.18, Instr.early).
constexpr llvm::StringLiteral kEarly = "zplan.early";
} // namespace attr

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_PASSES_H
