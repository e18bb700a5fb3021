//===- Compile.cpp - The compile path of the zplan CLI --------------------===//
//
// zplan MODEL.onnx [--tp N] [--zero 0|1|2|3] [--world N]
//       [--offload-param none|cpu] [--batch B --seq S] [--dim NAME=V]
//       [--dtype fp32|bf16|fp16] [--target cpu|cuda] [--gpu-mem BYTES]
//       [--host-mem BYTES] [--persist-threshold N] [--prefetch-bytes N]
//       [--max-live-bytes N] [--keep-logits-sharded] [--report]
//       [--report-json FILE] -o PLAN
//
// import -> recognition -> sharding (tp, ZeRO, offload) -> schedule ->
// memory plan -> emit. Every stage reports through MLIR diagnostics; the
// plan (and the JSON report) are written only when all stages succeed,
// each atomically.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Compile.h"

#include "compiler/autodiff/Passes.h"
#include "compiler/generate/Generate.h"
#include "compiler/import/Import.h"
#include "compiler/plan/EmitPlan.h"
#include "compiler/plan/Passes.h"
#include "compiler/plan/Report.h"
#include "compiler/sharding/Pipeline.h"
#include "compiler/transforms/Passes.h"
#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "zrt/plan_file.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

using namespace mlir;

namespace zplan::driver {
namespace {

/// The compile path's own flags. Driver.cpp owns the CLI::App and parses
/// once; the values land here.
struct CompileFlags {
  int tp = 1;
  int zero = 0;
  int world = 0; // 0: world = tp
  std::string offloadParam = "none";
  std::string offloadOptimizer = "none";
  std::string dtype = "fp32";
  std::string target = "cpu";
  std::string gpuMem, hostMem;
  // What the CUDA backend holds outside the arenas: the context (528.9 MiB
  // measured on an H200 with CUDA 13.0, driver 580, right after creation; a
  // whole run adds 2.5-7.7 MiB of streams, events, cuBLAS state, graphs and
  // lazily loaded kernels, docs/gpu-plan-runs.md) and
  // NCCL's buffers: per communicator the runtime makes, as measured with the
  // runtime's fixed NCCL configuration (docs/gpu-plan-runs.md). An explicit
  // --comm-reserve-bytes replaces the computed total.
  std::string cudaContextBytes = "540M", commReserveBytes = "auto",
              commBytesPerGroup = "1232M";
  int64_t persistThreshold = 0, prefetchBytes = 0, maxLiveBytes = 0;
  bool keepLogitsSharded = false;
  bool noFuse = false;
  bool report = false;
  std::string reportJson;
  // Training (docs/training-contract.md): --train builds @init and
  // @train_step from the forward before sharding.
  bool train = false;
  std::string loss = "causal-lm", lossOutput, lrSchedule = "constant";
  double lr = 1e-3, weightDecay = 0.01, beta1 = 0.9, beta2 = 0.999,
         eps = 1e-8, clipGrad = 0.0;
  int64_t warmupSteps = 0, totalSteps = 0, microBatches = 1;
  bool restoreZeroBiases = false;
  std::string recompute = "none";
  // Generation (docs/generation.md): @prefill and @decode with a KV cache of
  // --max-seq positions.
  bool generate = false;
  int64_t maxSeq = 0;
  // The host link's copy rate for the ZeRO-Inference floor (bytes/s). The
  // default is the rate docs/gpu-plan-runs.md assumed for PCIe 5 x16; give
  // the measured one.
  std::string linkBandwidth = "55000000000";
};

CompileFlags &flags() {
  static CompileFlags f;
  return f;
}

/// Parses a byte count with an optional binary suffix: "85899345920",
/// "80G", "512MiB".
bool parseBytes(const std::string &text, uint64_t &out) {
  llvm::StringRef s(text);
  uint64_t scale = 1;
  for (auto [suffix, factor] :
       {std::pair<const char *, uint64_t>{"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
        {"K", 1ull << 10},
        {"M", 1ull << 20},
        {"G", 1ull << 30},
        {"T", 1ull << 40},
        {"B", 1}}) {
    if (s.consume_back(suffix)) {
      scale = factor;
      break;
    }
  }
  uint64_t v = 0;
  if (s.empty() || s.getAsInteger(10, v))
    return false;
  if (v != 0 && scale > UINT64_MAX / v)
    return false;
  out = v * scale;
  return true;
}

/// Prints diagnostics as "zplan: error: MESSAGE [LOCATION]" on stderr.
class StderrDiagnostics {
public:
  explicit StderrDiagnostics(MLIRContext &ctx)
      : handler(&ctx, [](Diagnostic &diag) {
          std::string loc;
          llvm::raw_string_ostream os(loc);
          diag.getLocation().print(os);
          const char *severity = "error";
          if (diag.getSeverity() == DiagnosticSeverity::Warning)
            severity = "warning";
          else if (diag.getSeverity() == DiagnosticSeverity::Note)
            severity = "note";
          else if (diag.getSeverity() == DiagnosticSeverity::Remark)
            severity = "remark";
          llvm::errs() << "zplan: " << severity << ": " << diag.str();
          if (!loc.empty() && loc != "loc(unknown)")
            llvm::errs() << " [" << loc << "]";
          llvm::errs() << "\n";
          for (Diagnostic &note : diag.getNotes())
            llvm::errs() << "zplan: note: " << note.str() << "\n";
          return success();
        }) {}

private:
  ScopedDiagnosticHandler handler;
};

/// Warns once per external-data file that does not exist next to the model:
/// graph-only exports compile, and the plan refers to the files by name.
void warnMissingWeightFiles(ModuleOp module, const std::string &modelPath) {
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::remove_filename(dir);
  std::set<std::string> seen;
  module.walk([&](Operation *op) {
    auto file = op->getAttrOfType<StringAttr>("file");
    if (!isa<graph::WeightOp, dist::WeightShardOp>(op) || !file ||
        file.getValue().empty() || !seen.insert(file.str()).second)
      return;
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, file.getValue());
    if (!llvm::sys::fs::exists(path))
      std::cerr << "zplan: warning: external data file '" << path.str().str()
                << "' does not exist: the plan refers to it by name, and "
                   "zrun needs it (or --init random) to run\n";
  });
}

/// Checks the flags against each other; returns an error message or "".
std::string validate(const CompileFlags &f, const CommonOptions &o,
                     uint64_t &gpuMem, uint64_t &hostMem) {
  if (o.output.empty())
    return "no output: give the plan file with -o PLAN";
  if (llvm::sys::fs::is_directory(o.output))
    return "-o '" + o.output + "' is a directory";
  if (f.tp < 1)
    return "--tp " + std::to_string(f.tp) + " must be at least 1";
  if (f.world < 0)
    return "--world " + std::to_string(f.world) + " must be at least 1";
  int world = f.world > 0 ? f.world : f.tp;
  if (world % f.tp != 0)
    return "--world " + std::to_string(world) + " is not a multiple of --tp " +
           std::to_string(f.tp) + " (world = tp x dp)";
  if (f.zero < 0 || f.zero > 3)
    return "--zero " + std::to_string(f.zero) + " must be 0, 1, 2 or 3";
  if (f.offloadParam != "none" && f.offloadParam != "cpu")
    return "--offload-param '" + f.offloadParam + "' must be none or cpu";
  if (f.offloadOptimizer != "none" && f.offloadOptimizer != "cpu")
    return "--offload-optimizer '" + f.offloadOptimizer +
           "' must be none or cpu";
  if (!plan::parseFloatDType(f.dtype))
    return "--dtype '" + f.dtype + "' must be fp32, bf16 or fp16";
  if (f.target != "cpu" && f.target != "cuda")
    return "--target '" + f.target + "' must be cpu or cuda";
  if (!f.gpuMem.empty() && !parseBytes(f.gpuMem, gpuMem))
    return "--gpu-mem '" + f.gpuMem +
           "' is not a byte count (e.g. 85899345920 or 80G)";
  if (!f.hostMem.empty() && !parseBytes(f.hostMem, hostMem))
    return "--host-mem '" + f.hostMem +
           "' is not a byte count (e.g. 549755813888 or 512G)";
  uint64_t ignored = 0;
  if (!parseBytes(f.cudaContextBytes, ignored))
    return "--cuda-context-bytes '" + f.cudaContextBytes +
           "' is not a byte count (e.g. 536M)";
  if (f.commReserveBytes != "auto" && !parseBytes(f.commReserveBytes, ignored))
    return "--comm-reserve-bytes '" + f.commReserveBytes +
           "' is not a byte count (e.g. 256M) or 'auto'";
  if (!parseBytes(f.commBytesPerGroup, ignored))
    return "--comm-bytes-per-group '" + f.commBytesPerGroup +
           "' is not a byte count (e.g. 300M)";
  if (f.persistThreshold < 0 || f.prefetchBytes < 0 || f.maxLiveBytes < 0)
    return "--persist-threshold, --prefetch-bytes and --max-live-bytes must "
           "not be negative";
  int64_t dp = world / f.tp;
  int64_t batch = o.import.batch;
  if (batch == 0)
    return "--batch 0 must be at least 1";
  if (batch > 0 && batch % dp != 0)
    return "--batch " + std::to_string(batch) +
           " does not split evenly over dp = " + std::to_string(dp) +
           " ranks (--world " + std::to_string(world) + " / --tp " +
           std::to_string(f.tp) + ")";
  if (o.import.seq == 0)
    return "--seq 0 must be at least 1";
  if (f.generate) {
    if (f.train)
      return "--generate and --train are different plans: give one";
    if (f.maxSeq < 1)
      return "--generate needs --max-seq L (at least 1): the KV cache's "
             "positions, prompt and new tokens together";
    if (o.import.seq > 0)
      return "--generate plans its own sequence lengths (--max-seq for the "
             "prompt, 1 per decode step): drop --seq";
  } else if (f.maxSeq != 0) {
    return "--max-seq needs --generate";
  }
  if (!f.train) {
    if (f.loss != "causal-lm" || !f.lossOutput.empty() ||
        f.microBatches != 1 || f.recompute != "none")
      return "--loss, --loss-output, --micro-batches and --recompute need "
             "--train";
    if (f.offloadOptimizer != "none")
      return "--offload-optimizer needs --train (inference has no optimizer)";
    return {};
  }
  if (f.offloadOptimizer == "cpu" && f.zero == 0 && dp > 1)
    return "--offload-optimizer cpu over dp = " + std::to_string(dp) +
           " needs --zero 1 or more (each rank updates its part on its host)";
  if (f.loss != "causal-lm")
    return "--loss '" + f.loss + "' must be causal-lm (or use --loss-output)";
  if (f.lrSchedule != "constant" && f.lrSchedule != "warmup-decay")
    return "--lr-schedule '" + f.lrSchedule +
           "' must be constant or warmup-decay";
  if ((f.warmupSteps != 0 || f.totalSteps != 0) && f.lrSchedule == "constant")
    return "--warmup-steps and --total-steps need --lr-schedule warmup-decay";
  if (f.lrSchedule == "warmup-decay" &&
      (f.warmupSteps < 0 || f.totalSteps <= f.warmupSteps))
    return "--lr-schedule warmup-decay needs 0 <= --warmup-steps < "
           "--total-steps";
  if (!(f.lr >= 0) || !(f.weightDecay >= 0) || !(f.eps >= 0) ||
      !(f.clipGrad >= 0))
    return "--lr, --weight-decay, --eps and --clip-grad must not be negative";
  if (!(f.beta1 >= 0 && f.beta1 < 1) || !(f.beta2 >= 0 && f.beta2 < 1))
    return "--beta1 and --beta2 must be in [0, 1)";
  if (f.microBatches < 1)
    return "--micro-batches " + std::to_string(f.microBatches) +
           " must be at least 1";
  if (f.recompute != "none" && f.recompute != "selective")
    return "--recompute '" + f.recompute +
           "' must be none or selective (full and auto are not built yet)";
  if (batch > 0 && batch % (dp * f.microBatches) != 0)
    return "--batch " + std::to_string(batch) + " does not split into " +
           std::to_string(f.microBatches) + " micro-batches on each of dp = " +
           std::to_string(dp) + " ranks";
  return {};
}

std::string commandLine(const CompileFlags &f, const CommonOptions &o) {
  std::ostringstream os;
  os << llvm::sys::path::filename(o.model).str() << " --tp " << f.tp
     << " --zero " << f.zero << " --world " << (f.world > 0 ? f.world : f.tp);
  if (o.import.batch >= 0)
    os << " --batch " << o.import.batch;
  if (o.import.seq >= 0)
    os << " --seq " << o.import.seq;
  for (const auto &[name, value] : o.import.dims)
    os << " --dim " << name << "=" << value;
  os << " --dtype " << f.dtype << " --target " << f.target;
  if (f.offloadParam != "none")
    os << " --offload-param " << f.offloadParam;
  if (f.offloadOptimizer != "none")
    os << " --offload-optimizer " << f.offloadOptimizer;
  if (f.train)
    os << " --train";
  if (f.generate)
    os << " --generate --max-seq " << f.maxSeq;
  return os.str();
}

/// Writes `text` to `path` through a temporary file and a rename.
bool writeTextAtomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp";
  std::FILE *file = std::fopen(tmp.c_str(), "wb");
  if (!file)
    return false;
  bool ok = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  ok = std::fclose(file) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace

void addCompileFlags(CLI::App &app) {
  CompileFlags &f = flags();
  app.add_option("--tp", f.tp, "Tensor-parallel degree");
  app.add_option("--zero", f.zero, "ZeRO stage: 0, 1, 2 or 3");
  app.add_option("--world", f.world, "Number of ranks (default: --tp)");
  app.add_option("--offload-optimizer", f.offloadOptimizer,
                 "--train: where the optimizer state lives: none (device) or "
                 "cpu (master weights, moments and AdamW in host memory)");
  app.add_option("--offload-param", f.offloadParam,
                 "Parameter placement: none or cpu (pinned host memory)");
  app.add_option("--dtype", f.dtype, "Storage dtype: fp32, bf16 or fp16");
  app.add_option("--target", f.target, "Backend: cpu or cuda");
  app.add_option("--gpu-mem", f.gpuMem,
                 "Device memory per rank in bytes (suffix K, M, G, T)");
  app.add_option("--host-mem", f.hostMem,
                 "Host memory per rank in bytes (suffix K, M, G, T)");
  app.add_option("--cuda-context-bytes", f.cudaContextBytes,
                 "cuda target: device bytes of the CUDA context, counted in "
                 "the planned peak (default 540M)");
  app.add_option("--comm-reserve-bytes", f.commReserveBytes,
                 "cuda target: device bytes of NCCL's buffers counted in "
                 "the planned peak; 'auto' (default): the communicators the "
                 "plan's collectives use times --comm-bytes-per-group");
  app.add_option("--comm-bytes-per-group", f.commBytesPerGroup,
                 "cuda target: device bytes of one NCCL communicator as the "
                 "runtime configures it (measured; docs/gpu-plan-runs.md)");
  app.add_option("--persist-threshold", f.persistThreshold,
                 "ZeRO-3: parameters below this many bytes stay whole");
  app.add_option("--prefetch-bytes", f.prefetchBytes,
                 "ZeRO-3: bytes of parameters gathered ahead of use");
  app.add_option("--max-live-bytes", f.maxLiveBytes,
                 "ZeRO-3: cap on gathered parameter bytes alive at once");
  app.add_flag("--no-fuse", f.noFuse,
               "cuda target: keep linear+GELU, residual add+norm and "
               "activation+gate as separate steps (--zplan-fuse is off)");
  app.add_flag("--keep-logits-sharded", f.keepLogitsSharded,
               "Leave the LM head's logits split over tp");
  app.add_flag("--report", f.report,
               "Print the per-rank memory and communication report");
  app.add_option("--report-json", f.reportJson,
                 "Write the report as JSON to this file");
  app.add_flag("--train", f.train,
               "Plan a training step (@init, @train_step) instead of the "
               "forward pass");
  app.add_option("--loss", f.loss,
                 "--train: causal-lm (next-token cross-entropy, default)");
  app.add_option("--loss-output", f.lossOutput,
                 "--train: use this named model output as the loss");
  app.add_option("--lr", f.lr, "--train: learning rate (default 1e-3)");
  app.add_option("--lr-schedule", f.lrSchedule,
                 "--train: constant or warmup-decay");
  app.add_option("--warmup-steps", f.warmupSteps,
                 "--train, warmup-decay: steps of linear warmup");
  app.add_option("--total-steps", f.totalSteps,
                 "--train, warmup-decay: step at which the rate reaches 0");
  app.add_option("--weight-decay", f.weightDecay,
                 "--train: AdamW weight decay (default 0.01)");
  app.add_option("--beta1", f.beta1, "--train: AdamW beta1 (default 0.9)");
  app.add_option("--beta2", f.beta2, "--train: AdamW beta2 (default 0.999)");
  app.add_option("--eps", f.eps, "--train: AdamW epsilon (default 1e-8)");
  app.add_option("--clip-grad", f.clipGrad,
                 "--train: clip the global gradient norm (0: off)");
  app.add_option("--micro-batches", f.microBatches,
                 "--train: micro-batches accumulated per optimizer step");
  app.add_option("--recompute", f.recompute,
                 "--train: none, or selective (norm and activation outputs "
                 "recomputed in the backward)");
  app.add_flag("--generate", f.generate,
               "Plan greedy generation: @prefill (a prompt of up to "
               "--max-seq tokens) and @decode (one token per sequence) with "
               "a planned KV cache");
  app.add_option("--max-seq", f.maxSeq,
                 "--generate: positions of the KV cache (prompt and new "
                 "tokens together)");
  app.add_option("--link-bandwidth", f.linkBandwidth,
                 "--generate: host link bytes/s for the report's "
                 "ZeRO-Inference floor (default 55000000000)");
  app.add_flag("--restore-zero-biases", f.restoreZeroBiases,
               "--train: give bias-free linears (not a tied LM head) a "
               "trainable zero bias, which exporters drop");
}

int compileCommand(MLIRContext &context, const CommonOptions &options) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  const CompileFlags &f = flags();
  uint64_t gpuMem = 0, hostMem = 0;
  std::string err = validate(f, options, gpuMem, hostMem);
  if (!err.empty()) {
    std::cerr << "zplan: error: " << err << "\n";
    return 2;
  }
  int world = f.world > 0 ? f.world : f.tp;
  int dp = world / f.tp;
  // --zero 3 with dp = 1 and stages 1-2 at inference do nothing; the ZeRO
  // pass says so (a remark), once.

  context
      .loadDialect<func::FuncDialect, graph::GraphDialect, dist::ZdDialect>();
  // Messages name the op and the ONNX node; the whole module that MLIR would
  // attach to a failing pass's diagnostic only buries them.
  context.printOpOnDiagnostic(false);
  StderrDiagnostics diagnostics(context);

  // A missing external-data file is an error that names it, before anything
  // is written: a plan that refers to weights that are not there would only
  // fail later, on every rank. --graph-only (graph-only exports such as
  // ../shared/bench-models) accepts them; the plan then refers to the files
  // by name, zrun needs them or --init random, and warnMissingWeightFiles
  // names each one now.
  import::ImportOptions importOptions = options.import;
  // A training step is built from the forward of the rows one rank runs in
  // one micro-batch: each rank's own rows of the global batch
  // (docs/training-contract.md, sections 7 and 8), split into micro-batches.
  if (f.train && importOptions.batch > 0)
    importOptions.batch /= dp * f.microBatches;
  // Generation plans every rank's own rows of the batch (one sequence when
  // --batch is not given), as training does.
  if (f.generate)
    importOptions.batch = importOptions.batch > 0 ? importOptions.batch / dp : 1;
  if (f.generate && options.import.batch < 0 && dp > 1) {
    std::cerr << "zplan: error: --generate over dp = " << dp
              << " ranks needs --batch (a multiple of dp)\n";
    return 2;
  }
  OwningOpRef<ModuleOp> module =
      f.generate ? generate::importForGeneration(context, options.model,
                                                 importOptions, f.maxSeq)
                 : import::importOnnxFile(context, options.model,
                                          importOptions);
  if (!module)
    return 1;
  if (options.import.allowMissingData)
    warnMissingWeightFiles(*module, options.model);
  auto imported = Clock::now();

  PassManager pm(&context, ModuleOp::getOperationName());
  // The generation module was recognised import by import.
  if (!f.generate)
    transforms::buildRecognitionPipeline(pm);
  if (f.train) {
    autodiff::BuildTrainStepOptions train;
    train.loss = f.loss;
    train.lossOutput = f.lossOutput;
    train.lr = f.lr;
    train.lrSchedule = f.lrSchedule;
    train.warmupSteps = f.warmupSteps;
    train.totalSteps = f.totalSteps;
    train.weightDecay = f.weightDecay;
    train.beta1 = f.beta1;
    train.beta2 = f.beta2;
    train.eps = f.eps;
    train.clipGrad = f.clipGrad;
    train.restoreZeroBiases = f.restoreZeroBiases;
    train.microBatches = f.microBatches;
    train.recompute = f.recompute;
    pm.addPass(autodiff::createBuildTrainStep(train));
  }
  sharding::ShardingOptions sharding;
  sharding.tp = f.tp;
  sharding.dp = dp;
  sharding.zeroStage = f.zero;
  sharding.keepLogitsSharded = f.keepLogitsSharded;
  sharding.persistThreshold = f.persistThreshold;
  sharding.prefetchBytes = f.prefetchBytes;
  sharding.maxLiveBytes = f.maxLiveBytes;
  sharding.offload = f.offloadParam == "cpu"
                         ? sharding::ShardingOptions::Offload::Cpu
                         : sharding::ShardingOptions::Offload::None;
  sharding.mixedPrecision = f.dtype == "bf16";
  sharding.offloadOptimizer = f.offloadOptimizer == "cpu"
                                  ? sharding::ShardingOptions::Offload::Cpu
                                  : sharding::ShardingOptions::Offload::None;
  sharding::buildShardingPipeline(pm, sharding);
  plan::ZplanScheduleOptions schedule;
  schedule.dtype = f.dtype;
  pm.addPass(plan::createZplanMaterializeOutputs());
  // Both backends' matrix products read an operand transposed.
  pm.addPass(plan::createZplanFoldTranspose());
  // The CUDA backend has kernels for the fused steps; the CPU reference
  // backend runs the unfused ones.
  if (f.target == "cuda" && !f.noFuse)
    pm.addPass(plan::createZplanFuse());
  pm.addPass(plan::createZplanSchedule(schedule));
  uint64_t contextBytes = 0, commBytes = 0, perGroup = 0;
  parseBytes(f.cudaContextBytes, contextBytes);
  const bool commOverride = f.commReserveBytes != "auto";
  if (commOverride)
    parseBytes(f.commReserveBytes, commBytes);
  parseBytes(f.commBytesPerGroup, perGroup);
  plan::RuntimeReserve reserve = plan::RuntimeReserve::forTarget(
      f.target == "cuda" ? 1 : 0, contextBytes, perGroup, commOverride,
      commBytes);
  plan::ZplanMemoryPlanOptions memory;
  memory.dtype = f.dtype;
  memory.deviceReserve = reserve.workspaceBytes + reserve.reserveBytes;
  memory.gpuMem = gpuMem;
  memory.hostMem = hostMem;
  pm.addPass(plan::createZplanMemoryPlan(memory));
  if (failed(pm.run(*module)))
    return 1;
  auto planned = Clock::now();

  plan::EmitOptions emit;
  emit.planPath = options.output;
  llvm::SmallString<256> modelDir(options.model);
  llvm::sys::path::remove_filename(modelDir);
  emit.modelDir = modelDir.empty() ? "." : std::string(modelDir.str());
  emit.backend = f.target == "cuda" ? 1 : 0;
  emit.zeroStage = f.zero;
  emit.producer = "zplan 0.1 (" + commandLine(f, options) + ")";
  emit.reserve = reserve;
  std::vector<uint8_t> payload;
  plan::PlanSummary summary;
  if (failed(plan::emitPlan(*module, emit, payload, summary)))
    return 1;

  summary.generation.gpuMem = gpuMem;
  {
    uint64_t rate = 0;
    if (!parseBytes(f.linkBandwidth, rate)) {
      std::cerr << "zplan: error: --link-bandwidth '" << f.linkBandwidth
                << "' is not a byte count per second (e.g. 55G)\n";
      return 2;
    }
    summary.generation.linkBandwidth = double(rate);
  }
  // The JSON report first: if it cannot be written, no plan appears either.
  if (!f.reportJson.empty() &&
      !writeTextAtomically(f.reportJson, plan::formatReportJson(summary))) {
    std::cerr << "zplan: error: cannot write the JSON report '" << f.reportJson
              << "'\n";
    return 1;
  }
  err = zrt::write_plan_file(options.output, payload.data(), payload.size());
  if (!err.empty()) {
    std::cerr << "zplan: error: " << err << "\n";
    if (!f.reportJson.empty())
      std::remove(f.reportJson.c_str());
    return 1;
  }
  if (f.report)
    std::cout << plan::formatReport(summary);
  auto secondsBetween = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  auto done = Clock::now();
  std::cerr << "zplan: wrote " << options.output << " ("
            << payload.size() + zrt::kPlanHeaderBytes << " bytes, "
            << summary.numInstructions << " instructions) in "
            << secondsBetween(start, done) << " s (import "
            << secondsBetween(start, imported) << " s, passes "
            << secondsBetween(imported, planned) << " s, emit "
            << secondsBetween(planned, done) << " s)\n";
  return 0;
}

} // namespace zplan::driver
