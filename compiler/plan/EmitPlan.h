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

/// Device memory a backend takes outside the planned arenas. The plan owns
/// the arenas exactly; these terms make its predicted total match what the
/// whole process holds (measured on the H200 with cudaMemGetInfo, see
/// docs/gpu-notes.md).
struct RuntimeReserve {
  /// The matrix-product workspace the CUDA backend allocates once
  /// (zk::cuda::kGemmWorkspaceBytes).
  uint64_t workspaceBytes = 0;
  /// The CUDA context and cuBLAS handles.
  uint64_t reserveBytes = 0;
  /// Device bytes of one NCCL communicator as the runtime configures it
  /// (32 channels, every connection made at creation; measured on two
  /// H200s over NVLink, docs/gpu-plan-runs.md). The emitter multiplies it by the number of
  /// communicators the plan's collectives use (tp, dp, world groups of more
  /// than one rank): the runtime makes no others.
  uint64_t commBytesPerGroup = 0;
  /// When set, replaces that product (--comm-reserve-bytes).
  bool commOverride = false;
  uint64_t commBytes = 0;

  /// The reserve of a target: nothing on cpu; on cuda the 32 MiB GEMM
  /// workspace, `contextBytes`, and NCCL's buffers.
  static RuntimeReserve forTarget(int backend, uint64_t contextBytes,
                                  uint64_t commBytesPerGroup,
                                  bool commOverride, uint64_t commBytes) {
    RuntimeReserve r;
    if (backend == 1) {
      r.workspaceBytes = uint64_t(32) << 20;
      r.reserveBytes = contextBytes;
      r.commBytesPerGroup = commBytesPerGroup;
      r.commOverride = commOverride;
      r.commBytes = commBytes;
    }
    return r;
  }
};

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
  /// Device bytes the backend holds beyond the arenas; the report's planned
  /// peak and the plan's RankMemory include them.
  RuntimeReserve reserve;
  /// Only the summary is wanted (zplan estimate): constants are emitted
  /// without their elements, which can be most of a plan's bytes, so the
  /// payload is not a runnable plan. The summary is the same either way.
  bool figuresOnly = false;
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

/// A generation plan's figures (docs/generation.md), per rank.
struct GenerationFigures {
  bool present = false;
  /// The planned global batch and cache positions.
  int64_t batch = 0, maxSeq = 0;
  /// Exact bytes of the KV caches this rank holds.
  uint64_t kvCacheBytes = 0;
  /// Per @decode step: parameter bytes copied host -> device (prefetch), and
  /// gathered parameter bytes received from the other dp ranks (ZeRO-3).
  uint64_t decodePrefetchBytes = 0, decodeGatherBytes = 0;
  /// Set by the driver: --gpu-mem (0: not given) and the host link's rate in
  /// bytes per second (--link-bandwidth) for the ZeRO-Inference floor.
  uint64_t gpuMem = 0;
  double linkBandwidth = 0;
};

/// Host -> device copies (zd.prefetch: parameters kept in host memory by
/// --offload-param cpu, master parts coming back from a host update, NVMe
/// staging buffers), per rank.
struct HostCopyFigures {
  /// Per program run: the bytes copied, by program name.
  std::map<std::string, uint64_t> bytes;
  /// The copy window --zplan-prefetch-gathers decided for each program that
  /// copies parameters (zplan.copy_window_bytes; IR element widths).
  std::map<std::string, int64_t> windowBytes;
};

/// NVMe offload figures (docs/nvme.md), per rank.
struct NvmeFigures {
  bool present = false;
  /// The rank's file: every nvme tensor at its planned offset.
  uint64_t fileBytes = 0;
  uint32_t alignment = 0;
  std::string path;
  /// Per program run: bytes read from the file (nvme_read) and written back
  /// (nvme_write), by program name.
  std::map<std::string, uint64_t> readBytes, writeBytes;
  /// Set by the driver: the disk's rate in bytes per second
  /// (--nvme-bandwidth) for the time floor, and the micro-batches of a
  /// training step (@micro_step runs that often per step).
  double bandwidth = 0;
  int64_t microBatches = 1;
  /// One step's traffic: @train_step, or the micro-steps and @optimizer_step,
  /// or one @decode step, or one @main run; `step` names what was counted.
  uint64_t stepReadBytes() const { return stepBytes(readBytes); }
  uint64_t stepWriteBytes() const { return stepBytes(writeBytes); }
  std::string step() const;
  /// (read + written) / bandwidth: reads and writes share the drive.
  double floorSeconds() const {
    return bandwidth > 0 ? double(stepReadBytes() + stepWriteBytes()) /
                               bandwidth
                         : 0;
  }

private:
  uint64_t stepBytes(const std::map<std::string, uint64_t> &perRun) const;

public:
  /// Programs of the plan (set by the emitter), to tell which step applies.
  std::vector<std::string> programs;
};
struct PlanSummary {
  int world = 1, tp = 1, dp = 1;
  PlanDType dtype = PlanDType::F32;
  MemoryFigures memory;
  /// comm[kind][axis]
  std::map<std::string, std::map<std::string, CommFigure>> comm;
  /// The collective hash of @main (or of the first program).
  uint64_t collectiveHash = 0;
  size_t numInstructions = 0, numTensors = 0, numWeights = 0;
  /// The plan's programs, in order.
  std::vector<std::string> programs;
  GenerationFigures generation;
  NvmeFigures nvme;
  HostCopyFigures hostCopies;
  /// Plan 2.18: per program, the steps marked early (--zplan-early-loads),
  /// whose kernels load their weights (or caches) before the wait for the
  /// previous kernel; programs without any are absent.
  std::map<std::string, int64_t> earlySteps;
};

/// Builds the plan FlatBuffer (without the 24-byte file header) into
/// `payload`. Emits an error naming the op on anything plan.fbs cannot
/// express and fails.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, const EmitOptions &options,
                             std::vector<uint8_t> &payload,
                             PlanSummary &summary);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_EMITPLAN_H
