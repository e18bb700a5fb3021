//===- Pipeline.cpp - the sharding pipeline -------------------------------===//

#include "compiler/sharding/Pipeline.h"
#include "compiler/sharding/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace zplan::sharding;

void zplan::sharding::buildShardingPipeline(OpPassManager &pm,
                                            const ShardingOptions &options) {
  ZplanSetMeshOptions mesh;
  mesh.tp = options.tp;
  mesh.dp = options.dp;
  pm.addPass(createZplanSetMesh(mesh));
  pm.addPass(createZplanTpPropagate());
  ZplanTpPartitionOptions partition;
  partition.keepLogitsSharded = options.keepLogitsSharded;
  pm.addPass(createZplanTpPartition(partition));
  ZplanZeroOptions zero;
  zero.stage = options.zeroStage;
  zero.persistThreshold = options.persistThreshold;
  zero.prefetchBytes = options.prefetchBytes;
  zero.maxLiveBytes = options.maxLiveBytes;
  pm.addPass(createZplanZero(zero));
  ZplanZeroTrainOptions zeroTrain;
  zeroTrain.stage = options.zeroStage;
  zeroTrain.persistThreshold = options.persistThreshold;
  using Offload = ShardingOptions::Offload;
  zeroTrain.offloadOptimizer =
      options.offloadOptimizer != Offload::None ? "cpu" : "none";
  zeroTrain.mixedPrecision = options.mixedPrecision;
  pm.addPass(createZplanZeroTrain(zeroTrain));
  ZplanOffloadOptions offload;
  offload.param = options.offload != Offload::None ? "cpu" : "none";
  pm.addPass(createZplanOffload(offload));
  if (options.offload == Offload::Nvme ||
      options.offloadOptimizer == Offload::Nvme) {
    ZplanNvmeOptions nvme;
    nvme.param = options.offload == Offload::Nvme;
    nvme.optimizer = options.offloadOptimizer == Offload::Nvme;
    nvme.path = options.nvmePath;
    nvme.mixedPrecision = options.mixedPrecision;
    pm.addPass(createZplanNvme(nvme));
  }
}

namespace {
struct PipelineCliOptions : public PassPipelineOptions<PipelineCliOptions> {
  Option<int> tp{*this, "tp", llvm::cl::init(1)};
  Option<int> dp{*this, "dp", llvm::cl::init(1)};
  Option<int> zero{*this, "zero", llvm::cl::init(0)};
  Option<bool> keepLogits{*this, "keep-logits-sharded", llvm::cl::init(false)};
  Option<int64_t> persist{*this, "persist-threshold", llvm::cl::init(0)};
  Option<int64_t> prefetch{*this, "prefetch-bytes", llvm::cl::init(0)};
  Option<int64_t> maxLive{*this, "max-live-bytes", llvm::cl::init(0)};
  Option<std::string> offload{*this, "offload-param", llvm::cl::init("none")};
  Option<std::string> offloadOptimizer{*this, "offload-optimizer",
                                       llvm::cl::init("none")};
  Option<std::string> nvmePath{*this, "nvme-path", llvm::cl::init("")};
};
} // namespace

void zplan::sharding::registerShardingPipeline() {
  registerShardingPasses();
  PassPipelineRegistration<PipelineCliOptions>(
      "zplan-sharding", "tensor parallelism, ZeRO and offload for a mesh",
      [](OpPassManager &pm, const PipelineCliOptions &cli) {
        ShardingOptions o;
        o.tp = cli.tp;
        o.dp = cli.dp;
        o.zeroStage = cli.zero;
        o.keepLogitsSharded = cli.keepLogits;
        o.persistThreshold = cli.persist;
        o.prefetchBytes = cli.prefetch;
        o.maxLiveBytes = cli.maxLive;
        auto place = [](StringRef v) {
          return v == "cpu"    ? ShardingOptions::Offload::Cpu
                 : v == "nvme" ? ShardingOptions::Offload::Nvme
                               : ShardingOptions::Offload::None;
        };
        o.offload = place(cli.offload.getValue());
        o.offloadOptimizer = place(cli.offloadOptimizer.getValue());
        o.nvmePath = cli.nvmePath.getValue();
        buildShardingPipeline(pm, o);
      });
}
