//===- Options.h - The compile path's settings and their table --*- C++ -*-===//
//
// Every setting of `zplan MODEL.onnx ...` lives in one CompileConfig. The
// flags are one table (Options.cpp): each row names the flag, its help, the
// field it sets and the check its value must pass, so the command line, the
// DeepSpeed config reader (DsConfig.cpp) and the estimator (Estimate.cpp) set
// and check the same fields the same way. Each setting records where its
// value came from (the flag, a ds-config field, or the default); the report
// prints that.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_OPTIONS_H
#define ZPLAN_COMPILER_DRIVER_OPTIONS_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace zplan::driver {

struct CommonOptions;

/// Where a setting's value came from.
enum class Source { Default, Flag, DsConfig };

/// "default", "flag" or "ds-config".
llvm::StringRef sourceName(Source source);

struct Origin {
  Source source = Source::Default;
  /// For Source::DsConfig: the config's field path, e.g.
  /// "zero_optimization.stage" (and what it was derived from).
  std::string field;
};

/// The compile path's settings, with zplan's defaults.
struct CompileConfig {
  int64_t tp = 1;
  int64_t zero = 0;
  int64_t world = 0; ///< 0: world = tp
  std::string offloadParam = "none";
  std::string offloadOptimizer = "none";
  std::string dtype = "fp32";
  std::string target = "cpu";
  std::string gpuMem, hostMem;
  // What the CUDA backend holds outside the arenas: the context (528.9 MiB
  // measured on an H200 with CUDA 13.0, driver 580, right after creation; a
  // whole run adds 2.5-7.7 MiB of streams, events, cuBLAS state, graphs and
  // lazily loaded kernels, docs/gpu-plan-runs.md) and NCCL's buffers: per
  // communicator the runtime makes, as measured with the runtime's fixed
  // NCCL configuration (docs/gpu-plan-runs.md). An explicit
  // --comm-reserve-bytes replaces the computed total.
  std::string cudaContextBytes = "540M", commReserveBytes = "auto",
              commBytesPerGroup = "1232M";
  int64_t persistThreshold = 0, prefetchBytes = 0, maxLiveBytes = 0;
  /// --overlap-chunks: batch chunks of a tp forward whose collectives
  /// overlap the other chunks' compute (1: off).
  int64_t overlapChunks = 1;
  bool keepLogitsSharded = false;
  bool noFuse = false;
  bool mergeLinears = false;
  /// --decode-fusion: one step for the products of one input in a decode
  /// program, the norm before them folded in, one step for a layer's
  /// rotaries and cache writes (auto: every few-row group on the cpu target;
  /// on the cuda target the rotary / cache step at every batch and the
  /// products and norms at one row only, where the H200 measured a gain).
  std::string decodeFusion = "auto";
  /// --decode-layer: each llama-style decoder layer of the decode program as
  /// one step, zg.decode_layer (on the cuda target one persistent kernel a
  /// layer, where that kernel takes the layer's shapes); off by default.
  std::string decodeLayer = "off";
  /// --fold-rotary: fold llama's q / k head split transposes through the
  /// rotary embedding (auto and on: both targets, checked on the H200 in
  /// session 7; off: not folded).
  std::string foldRotary = "auto";
  /// --cuda-arch: the GPU the cuda target's plan is for (sm_90: the H200), so
  /// that the compiler, not the runtime, chooses each attention's kernel;
  /// --attention-kernel: one forward kernel for every attention that can take
  /// it (zk/attention_kernels.h's names; empty: the arch's default).
  std::string cudaArch = "sm_90", attentionKernel;
  /// --gemm-algos: on writes the cuBLASLt algorithm of the products the
  /// tuning table zk/gemm_algos.h has for --cuda-arch (--zplan-gemm-algos,
  /// plan 2.15; the default since session 9's H200 call ran it: llama2-7b
  /// batch 4 82.0-82.2 ms against 85.9-86.0); off leaves every product to
  /// cuBLASLt's first heuristic answer.
  std::string gemmAlgos = "on";
  /// --few-rows-max-rows / --few-rows-max-bytes: the cuda target's rule for
  /// the products the few-row kernel runs instead of cuBLASLt.
  int64_t fewRowsMaxRows = 1, fewRowsMaxBytes = 4 * 1024 * 1024;
  /// --few-rows-kernel: the cuda target's kernel for the few-row products
  /// (fused, or marked by the rule above) that the streaming kernel holds
  /// (stream, the default; cluster: the earlier kernels, for A/B timing).
  std::string fewRowsKernel = "stream";
  /// --few-rows-stream-max-bytes: the rule's weight cap for the products the
  /// streaming kernel holds (it read llama-1b's o and down at one row faster
  /// than cuBLASLt; the LM head, 131 MB, stays with cuBLASLt).
  int64_t fewRowsStreamMaxBytes = 64 * 1024 * 1024;
  bool report = false;
  std::string reportJson;
  // Training (docs/training-contract.md): --train builds @init and
  // @train_step from the forward before sharding.
  bool train = false;
  std::string loss = "causal-lm", lossOutput, lrSchedule = "constant";
  double lr = 1e-3, weightDecay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
         clipGrad = 0.0;
  int64_t warmupSteps = 0, totalSteps = 0, microBatches = 1;
  bool restoreZeroBiases = false;
  std::string recompute = "none";
  // fp16 loss scaling: --loss-scale S > 0 is static, 0 (default) dynamic
  // (DeepSpeed's: start at --initial-loss-scale, halve on overflow down to
  // --loss-scale-min, double after --loss-scale-window good steps).
  double lossScale = 0.0, initialLossScale = 65536.0, lossScaleMin = 1.0;
  int64_t lossScaleWindow = 1000;
  // Generation (docs/generation.md): @prefill and @decode with a KV cache of
  // --max-seq positions.
  bool generate = false;
  int64_t maxSeq = 0;
  // The host link's copy rate for the ZeRO-Inference floor (bytes/s). The
  // default is the rate docs/gpu-plan-runs.md assumed for PCIe 5 x16; give
  // the measured one.
  std::string linkBandwidth = "55000000000";
  // NVMe offload (docs/nvme.md): the folder of the rank files, and the disk's
  // rate for the report's time floor (bytes/s; 3 GB/s, a PCIe 3 x4 drive's
  // sequential read, until a measured figure is given).
  std::string nvmePath;
  std::string nvmeBandwidth = "3000000000";
  /// --ds-config: a DeepSpeed JSON config read after the flags.
  std::string dsConfig;

  /// Where each setting came from, by flag name ("--zero"); a flag missing
  /// here kept its default. "--batch" is recorded here too (its value lives
  /// in CommonOptions).
  llvm::StringMap<Origin> origins;

  int64_t worldSize() const { return world > 0 ? world : tp; }
  int64_t dpSize() const { return tp > 0 ? worldSize() / tp : 1; }
  Origin origin(llvm::StringRef flag) const;
};

/// Byte counts parsed from the config's text fields.
struct ByteLimits {
  uint64_t gpuMem = 0, hostMem = 0, cudaContext = 0, commReserve = 0,
           commPerGroup = 0, linkBandwidth = 0, nvmeBandwidth = 0;
  bool commOverride = false;
};

/// Parses a byte count with an optional binary suffix: "85899345920",
/// "80G", "512MiB".
bool parseBytes(const std::string &text, uint64_t &out);

/// The compute capability of a --cuda-arch value, major * 10 + minor: 90 for
/// "sm_90" (or "sm_90a"); -1 for anything else.
int64_t cudaArchNumber(const std::string &text);

/// What a group of flags is for; the estimator registers only the kinds it
/// does not sweep itself.
enum OptionGroup : unsigned {
  /// tp, zero, world, offload and recompute: the estimator's sweep.
  kSwept = 1,
  /// Everything else that shapes the plan (dtype, target, training...).
  kPlan = 2,
  /// Output of the compile command only (--report, --report-json,
  /// --ds-config).
  kOutput = 4,
};

/// The parsed flags of one command: the config they fill and the CLI11
/// options to ask afterwards which were given.
class CompileFlagSet {
public:
  /// Adds the table's flags of the given groups to `app`, bound to `config`.
  void addTo(CLI::App &app, CompileConfig &config, unsigned groups);
  /// After parsing: records Source::Flag for each flag given (and --batch
  /// when the app has it).
  void recordFlagOrigins(CLI::App &app, CompileConfig &config) const;

private:
  std::vector<std::pair<std::string, CLI::Option *>> options;
};

/// Sets the setting of `flag` from a ds-config value and records the origin.
/// Integer settings take integral numbers; returns false when the value's
/// type does not fit the setting (the caller names the field).
bool setInteger(CompileConfig &config, llvm::StringRef flag, int64_t value,
                const Origin &origin);
bool setNumber(CompileConfig &config, llvm::StringRef flag, double value,
               const Origin &origin);
bool setText(CompileConfig &config, llvm::StringRef flag,
             const std::string &value, const Origin &origin);
bool setBool(CompileConfig &config, llvm::StringRef flag, bool value,
             const Origin &origin);

/// The setting of `flag` printed as a value ("3", "cpu", "0.001", "true").
std::string settingText(const CompileConfig &config,
                        const CommonOptions &common, llvm::StringRef flag);

/// The flags of the table in table order, and whether each is a setting the
/// report lists (every plan-shaping flag: not -o or --report).
std::vector<std::string> reportedSettings(const CompileConfig &config);

/// "--zero 5", or "ds.json: zero_optimization.stage = 5 (--zero)" when the
/// value came from a DeepSpeed config: how an error names a setting.
std::string describeSetting(const CompileConfig &config,
                            const CommonOptions &common, llvm::StringRef flag);

/// Checks each setting against its row of the table and the settings
/// against each other; fills `limits`. Returns an error message or "".
/// `needOutput`: the compile command needs -o (the estimator does not).
std::string validateConfig(const CompileConfig &config,
                           const CommonOptions &common, ByteLimits &limits,
                           bool needOutput);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_OPTIONS_H
