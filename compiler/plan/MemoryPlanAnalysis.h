//===- MemoryPlanAnalysis.h - Liveness of every tensor over the schedule --===//
//
// The analysis half of the memory plan: which tensors exist, what kind each
// is (plan.fbs TensorKind), its plan dtype, size and memory space, the steps
// of the schedule during which its storage must stay intact, and which
// tensors are views of another's storage. The --zplan-memory-plan pass turns
// this into offsets; the emitter and the report read it again.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_MEMORYPLANANALYSIS_H
#define ZPLAN_COMPILER_PLAN_MEMORYPLANANALYSIS_H

#include "compiler/plan/ArenaPlanner.h"
#include "compiler/plan/OpInfo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace zplan::plan {

/// plan.fbs TensorKind numbers.
enum class TensorKind : uint8_t {
  Activation = 0,
  Input = 1,
  Output = 2,
  Weight = 3,
  WeightShard = 4,
  Gathered = 5,
  Constant = 6,
  Workspace = 7,
  Grad = 8,
  Master = 9,
  Moment = 10,
  State = 11
};

/// Kinds whose storage lives for the whole plan (every program, every run):
/// bound inputs and outputs, parameters, shards, constants and the state
/// kinds. Activations and gathered parameters live inside one program run.
inline bool isWholePlan(TensorKind k) {
  return k != TensorKind::Activation && k != TensorKind::Gathered &&
         k != TensorKind::Workspace;
}

struct TensorInfo {
  mlir::Value value;
  TensorKind kind = TensorKind::Activation;
  PlanDType dtype = PlanDType::F32;
  unsigned space = 0;
  /// elements * dtype size (the arena reserves this rounded up to 256).
  uint64_t bytes = 0;
  /// Live steps, inclusive; only meaningful for tensors that own storage.
  int64_t begin = 0, end = 0;
  /// The tensor whose storage this one shares, or -1.
  int aliasOf = -1;
  /// Produced by all_reduce / all_gather / reduce_scatter / broadcast.
  bool collectiveResult = false;
  /// Read by an all_reduce / reduce_scatter over dp: a gradient reduction
  /// buffer (the report's buckets).
  bool gradientBucket = false;
  /// For persistent storage: persistentKey() (one tensor across programs).
  std::string key;
  /// Bytes the arena reserves when more than alignArena(bytes): a host or
  /// nvme buffer of a plan with NVMe storage is a whole number of the
  /// direct-I/O alignment (--zplan-nvme), so that its offset is one too.
  uint64_t reserved = 0;
  uint64_t reservedBytes() const {
    return reserved ? reserved : alignArena(bytes);
  }
};

/// The programs of the module: every public func.func with a body, in module
/// order (docs/training-contract.md). Emits an error on the module and fails
/// when there is none or one has more than one block.
mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>>
getPrograms(mlir::ModuleOp module);

class Liveness {
public:
  /// Builds the liveness of every tensor of `func` over its block order
  /// (storage ops are not steps). Emits an error and fails on IR the plan
  /// cannot hold (unsupported element types, uses after zd.release, a graph
  /// input returned as an output).
  static mlir::FailureOr<Liveness> build(mlir::func::FuncOp func,
                                         PlanDType floatDType);

  std::vector<TensorInfo> tensors;
  llvm::DenseMap<mlir::Value, int> indexOf;
  /// Instruction ops in schedule order.
  std::vector<mlir::Operation *> steps;
  llvm::DenseMap<mlir::Operation *, int64_t> stepOf;

  int64_t lastStep() const {
    return steps.empty() ? 0 : int64_t(steps.size()) - 1;
  }
  bool isWholeRun(const TensorInfo &t) const {
    return t.begin <= 0 && t.end >= lastStep();
  }
  /// The arena requests, one per tensor in tensor order (aliases and
  /// zero-byte tensors request 0 bytes).
  std::vector<BufferRequest> requests() const;
};

/// Every program's liveness and the plan's one tensor table. Programs run one
/// at a time, so they are laid end to end on one timeline: a program's
/// transient tensors live inside its span and may share bytes with another
/// program's; whole-plan tensors (isWholePlan) span the whole timeline, and a
/// persistent value named in several programs (same persistentKey) is one
/// tensor with one offset.
struct ModuleLiveness {
  llvm::SmallVector<mlir::func::FuncOp> funcs;
  std::vector<Liveness> programs;
  /// The plan's tensors; `value` is the first program's value, begin/end are
  /// on the joint timeline, aliasOf indexes this table.
  std::vector<TensorInfo> tensors;
  /// globalOf[p][i]: the plan tensor of program p's tensor i.
  std::vector<std::vector<int>> globalOf;

  static mlir::FailureOr<ModuleLiveness> build(mlir::ModuleOp module,
                                               PlanDType floatDType);
  std::vector<BufferRequest> requests() const;
};

/// Figures of the memory report, for one rank (all ranks hold the same local
/// shapes, so they are equal on every rank).
struct MemoryFigures {
  uint64_t residentWeightBytes = 0;
  /// Exact bytes of the persistent state kinds (format 2).
  uint64_t gradBytes = 0, masterBytes = 0, momentBytes = 0, stateBytes = 0;
  /// The parts of the five figures above that live in the host arena
  /// (offloaded parameters and optimizer state); the rest is on the device.
  uint64_t hostWeightBytes = 0, hostGradBytes = 0, hostMasterBytes = 0,
           hostMomentBytes = 0, hostStateBytes = 0;
  /// The parts that live in the rank's NVMe file (docs/nvme.md).
  uint64_t nvmeWeightBytes = 0, nvmeMasterBytes = 0, nvmeMomentBytes = 0,
           nvmeStateBytes = 0;
  /// Peak bytes of gradient reduction buffers live at once.
  uint64_t bucketBytes = 0;
  uint64_t peakGatheredParamBytes = 0;
  uint64_t activationBytes = 0;
  /// Training: bytes of the activations alive across the loss (produced by
  /// the forward, read by the backward), at the op zg-build-train-step marks
  /// `zplan.loss`; the largest over the programs. What --recompute lowers.
  uint64_t activationsForBackwardBytes = 0;
  /// Training: bytes of the gradients the optimizer reads, one per zg.adamw
  /// (the whole gradient at ZeRO stage 0, this rank's reduced part at 1-3, in
  /// the reduction's dtype: fp32 under mixed precision).
  uint64_t optimizerGradBytes = 0;
  uint64_t collectiveBufferBytes = 0;
  uint64_t workspaceBytes = 0;
  /// Device bytes the backend takes outside the arenas (CUDA context,
  /// communicator buffers); see RuntimeReserve in EmitPlan.h.
  uint64_t runtimeReserveBytes = 0;
  uint64_t arenaBytes[kNumSpaces] = {0, 0, 0};
  /// What the whole process holds on the device at its peak, as planned.
  uint64_t plannedPeakBytes() const {
    return arenaBytes[0] + workspaceBytes + runtimeReserveBytes;
  }
};

/// Computes the figures from the liveness and the arena sizes: resident
/// weights are the exact bytes of weights and shards (all spaces); the peaks
/// are the largest sums of aligned bytes live at one step, by category.
MemoryFigures computeMemoryFigures(const ModuleLiveness &liveness,
                                   const uint64_t arenaBytes[kNumSpaces]);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_MEMORYPLANANALYSIS_H
