//===- Pipeline.h - the sharding pipeline ----------------------*- C++ -*-===//
//
// The one entry the driver calls to add tensor parallelism, ZeRO and offload
// to its pass manager.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_SHARDING_PIPELINE_H
#define ZPLAN_COMPILER_SHARDING_PIPELINE_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

namespace zplan::sharding {

struct ShardingOptions {
  int tp = 1;
  int dp = 1;
  int zeroStage = 0;
  bool keepLogitsSharded = false;
  /// Parameters smaller than this many bytes stay whole on every rank.
  int64_t persistThreshold = 0;
  /// Bytes of parameters gathered ahead of their first use.
  int64_t prefetchBytes = 0;
  /// Cap on gathered parameter bytes alive at once; 0 means no cap.
  int64_t maxLiveBytes = 0;
  /// Nvme: in host memory first (--zplan-offload / --zplan-zero-train), then
  /// in the rank's NVMe file (--zplan-nvme).
  enum class Offload { None, Cpu, Nvme } offload = Offload::None;
  /// Training: where the optimizer's master parts and moments live.
  Offload offloadOptimizer = Offload::None;
  /// Training at --dtype bf16: fp32 master parts and gradient reduction.
  bool mixedPrecision = false;
  /// The folder of the NVMe files (--nvme-path), recorded in the plan.
  std::string nvmePath;
};

/// Adds set-mesh, tp-propagate, tp-partition, zero and offload to `pm`, which
/// must run on a builtin.module.
void buildShardingPipeline(mlir::OpPassManager &pm,
                           const ShardingOptions &options);

/// Registers the passes of this folder (the generated
/// registerShardingPasses() of Passes.h does that alone) and the
/// `zplan-sharding` pipeline (options tp, dp, zero, keep-logits-sharded,
/// persist-threshold, prefetch-bytes, max-live-bytes, offload-param).
void registerShardingPipeline();

} // namespace zplan::sharding

#endif // ZPLAN_COMPILER_SHARDING_PIPELINE_H
