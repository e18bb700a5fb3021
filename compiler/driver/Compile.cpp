//===- Compile.cpp - The compile path of the zplan CLI --------------------===//
//
// zplan MODEL.onnx [--tp N] [--zero 0|1|2|3] [--world N]
//       [--offload-param none|cpu] [--batch B --seq S] [--dim NAME=V]
//       [--dtype fp32|bf16|fp16] [--target cpu|cuda] [--gpu-mem BYTES]
//       [--host-mem BYTES] [--persist-threshold N] [--prefetch-bytes N]
//       [--max-live-bytes N] [--keep-logits-sharded] [--train ...]
//       [--ds-config FILE] [--report] [--report-json FILE] -o PLAN
//
// The flags are the table in Options.cpp; --ds-config fills the settings no
// flag gave (DsConfig.cpp).
//
// import -> recognition -> sharding (tp, ZeRO, offload) -> schedule ->
// memory plan -> emit. Every stage reports through MLIR diagnostics; the
// plan (and the JSON report) are written only when all stages succeed,
// each atomically.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Compile.h"
#include "compiler/driver/DsConfig.h"

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
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

using namespace mlir;

namespace zplan::driver {
namespace {

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

/// The report's "settings" block: each plan-shaping setting, its value and
/// where it came from.
std::string formatSettings(const CompileConfig &config,
                           const CommonOptions &options) {
  std::ostringstream os;
  os << "settings (value, source):\n";
  for (const std::string &flag : reportedSettings(config)) {
    Origin o = config.origin(flag);
    std::string value = settingText(config, options, flag);
    std::string line = "  " + flag + " " + (value.empty() ? "(none)" : value);
    if (line.size() < 36)
      line.resize(36, ' ');
    os << line << " " << sourceName(o.source).str();
    if (!o.field.empty())
      os << " (" << o.field << ")";
    os << "\n";
  }
  return os.str();
}

/// The JSON report with a "settings" array added.
std::string reportJsonWithSettings(const plan::PlanSummary &summary,
                                   const CompileConfig &config,
                                   const CommonOptions &options) {
  std::string text = plan::formatReportJson(summary);
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    // The report is ours and always parses; keep it whole if not.
    llvm::consumeError(parsed.takeError());
    return text;
  }
  llvm::json::Array settings;
  for (const std::string &flag : reportedSettings(config)) {
    Origin o = config.origin(flag);
    llvm::json::Object s{{"flag", flag},
                         {"value", settingText(config, options, flag)},
                         {"source", sourceName(o.source)}};
    if (!o.field.empty())
      s["field"] = o.field;
    settings.push_back(std::move(s));
  }
  if (llvm::json::Object *obj = parsed->getAsObject()) {
    (*obj)["settings"] = std::move(settings);
    if (!config.dsConfig.empty())
      (*obj)["ds_config"] = config.dsConfig;
  }
  return llvm::formatv("{0:2}", *parsed).str() + "\n";
}

/// The memory plan checks its arena and the fixed reserve against --gpu-mem;
/// the emitter adds what it sizes itself (the NCCL communicators the plan's
/// collectives use, the collective staging, the training kernels' scratch).
/// The whole planned peak must fit too: returns why it does not, or "".
std::string peakOverGpuMem(const plan::PlanSummary &summary, uint64_t gpuMem) {
  const plan::MemoryFigures &m = summary.memory;
  const uint64_t peak = m.plannedPeakBytes();
  if (gpuMem == 0 || peak <= gpuMem)
    return {};
  auto mib = [](uint64_t b) {
    return llvm::formatv("{0:F1} MiB", double(b) / (1 << 20)).str();
  };
  return "the planned process peak per rank is " + mib(peak) + " (arena " +
         mib(m.arenaBytes[0]) + ", workspace and collective staging " +
         mib(m.workspaceBytes) + ", CUDA context and NCCL buffers " +
         mib(m.runtimeReserveBytes) + ") but --gpu-mem is " + mib(gpuMem) +
         ": over by " + mib(peak - gpuMem) +
         "; try --zero 3 (with dp > 1), --offload-param cpu, a larger --tp "
         "or a smaller --batch";
}

} // namespace

std::string commandLine(const CompileConfig &f, const CommonOptions &o) {
  std::ostringstream os;
  os << llvm::sys::path::filename(o.model).str() << " --tp " << f.tp
     << " --zero " << f.zero << " --world " << f.worldSize();
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
  if (!f.nvmePath.empty())
    os << " --nvme-path " << f.nvmePath;
  if (f.train)
    os << " --train";
  if (f.generate)
    os << " --generate --max-seq " << f.maxSeq;
  if (f.generate && f.decodeFusion != "auto")
    os << " --decode-fusion " << f.decodeFusion;
  if (f.generate && f.decodeLayer != "off")
    os << " --decode-layer " << f.decodeLayer;
  if (f.generate && f.fewRowsKernel != "stream")
    os << " --few-rows-kernel " << f.fewRowsKernel;
  if (f.foldRotary != "auto")
    os << " --fold-rotary " << f.foldRotary;
  if (f.target == "cuda")
    os << " --cuda-arch " << f.cudaArch;
  if (!f.attentionKernel.empty())
    os << " --attention-kernel " << f.attentionKernel;
  if (f.gemmAlgos != "on")
    os << " --gemm-algos " << f.gemmAlgos;
  if (f.microBatches != 1)
    os << " --micro-batches " << f.microBatches;
  if (f.recompute != "none")
    os << " --recompute " << f.recompute;
  return os.str();
}

FailureOr<CompiledPlan> compilePlan(MLIRContext &context,
                                    const CommonOptions &options,
                                    const CompileConfig &f,
                                    const ByteLimits &limits,
                                    ImportCache *cache, bool figuresOnly) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  auto start = Clock::now();
  const int64_t dp = f.dpSize();
  // --zero 3 with dp = 1 and stages 1-2 at inference do nothing; the ZeRO
  // pass says so (a remark), once.
  context
      .loadDialect<func::FuncDialect, graph::GraphDialect, dist::ZdDialect>();
  // Messages name the op and the ONNX node; the whole module that MLIR would
  // attach to a failing pass's diagnostic only buries them.
  context.printOpOnDiagnostic(false);

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
    importOptions.batch =
        importOptions.batch > 0 ? importOptions.batch / dp : 1;
  auto importModel = [&]() {
    return f.generate
               ? generate::importForGeneration(context, options.model,
                                               importOptions, f.maxSeq)
               : import::importOnnxFile(context, options.model, importOptions);
  };
  OwningOpRef<ModuleOp> module;
  if (cache) {
    auto it = cache->modules.find(importOptions.batch);
    if (it == cache->modules.end()) {
      OwningOpRef<ModuleOp> imported = importModel();
      if (!imported)
        return failure();
      it = cache->modules.emplace(importOptions.batch, std::move(imported))
               .first;
    }
    module = it->second->clone();
  } else {
    module = importModel();
    if (!module)
      return failure();
    if (options.import.allowMissingData)
      warnMissingWeightFiles(*module, options.model);
  }
  auto imported = Clock::now();

  // The window of the parameter fetches (--zplan-prefetch-gathers): -1, the
  // pass's automatic one, unless --prefetch-bytes is given; the search below
  // may narrow it to fit --gpu-mem.
  int64_t fetchWindow = f.origin("--prefetch-bytes").source == Source::Default
                            ? -1
                            : f.prefetchBytes;
  plan::RuntimeReserve reserve = plan::RuntimeReserve::forTarget(
      f.target == "cuda" ? 1 : 0, limits.cudaContext, limits.commPerGroup,
      limits.commOverride, limits.commReserve);
  // The whole pipeline, for one --recompute choice (auto tries several).
  auto buildPipeline = [&](PassManager &pm, const std::string &recompute) {
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
      train.recompute = recompute;
      if (f.dtype == "fp16") {
        train.lossScaling = f.lossScale > 0 ? "static" : "dynamic";
        train.lossScale = f.lossScale > 0 ? f.lossScale : f.initialLossScale;
        train.lossScaleWindow = f.lossScaleWindow;
        train.lossScaleMin = f.lossScaleMin;
      }
      pm.addPass(autodiff::createBuildTrainStep(train));
    }
    sharding::ShardingOptions sharding;
    sharding.tp = f.tp;
    sharding.dp = dp;
    sharding.zeroStage = f.zero;
    sharding.keepLogitsSharded = f.keepLogitsSharded;
    sharding.persistThreshold = f.persistThreshold;
    // The plan phase decides how far ahead gathers go
    // (--zplan-prefetch-gathers below); the ZeRO passes place each gather
    // right before its first use.
    sharding.prefetchBytes = 0;
    sharding.maxLiveBytes = f.maxLiveBytes;
    auto placement = [](const std::string &where) {
      using Offload = sharding::ShardingOptions::Offload;
      return where == "cpu"    ? Offload::Cpu
             : where == "nvme" ? Offload::Nvme
                               : Offload::None;
    };
    sharding.offload = placement(f.offloadParam);
    sharding.mixedPrecision =
        f.train && (f.dtype == "bf16" || f.dtype == "fp16");
    sharding.offloadOptimizer = placement(f.offloadOptimizer);
    sharding.nvmePath = f.nvmePath;
    sharding::buildShardingPipeline(pm, sharding);
    plan::ZplanScheduleOptions schedule;
    schedule.dtype = f.dtype;
    pm.addPass(plan::createZplanMaterializeOutputs());
    // One matrix product per group of linears that read the same input, on
    // each rank's local weights (after tensor parallelism).
    if (f.mergeLinears)
      pm.addPass(plan::createZplanMergeLinears());
    // Batch chunks whose tp collectives overlap the other chunks' compute.
    if (f.overlapChunks > 1) {
      plan::ZplanOverlapChunksOptions overlap;
      overlap.chunks = f.overlapChunks;
      pm.addPass(plan::createZplanOverlapChunks(overlap));
    }
    // Both backends' matrix products read an operand transposed. The rotary
    // fold is on by default for both targets: the CUDA kernel's
    // sequence-major form matched the CPU kernel and the folded test llama
    // matched PyTorch on the H200 (docs/gpu-plan-runs.md, session 7).
    plan::ZplanFoldTransposeOptions fold;
    fold.foldRotary = f.foldRotary != "off";
    pm.addPass(plan::createZplanFoldTranspose(fold));
    // The CUDA backend has kernels for the fused steps; the CPU reference
    // backend runs the unfused ones.
    // ZeRO-3 gathers and the host copies of offloaded parameters a window
    // ahead of their use; without --prefetch-bytes, about one layer's
    // parameters ahead.
    plan::ZplanPrefetchGathersOptions prefetch;
    prefetch.windowBytes = fetchWindow;
    prefetch.maxLiveBytes = f.maxLiveBytes;
    pm.addPass(plan::createZplanPrefetchGathers(prefetch));
    if (f.target == "cuda" && !f.noFuse)
      pm.addPass(plan::createZplanFuse());
    // Each attention's CUDA kernel, for --cuda-arch: the plan names it and
    // the runtime runs it on every GPU, or refuses the plan at load.
    if (f.target == "cuda") {
      plan::ZplanAttentionKernelsOptions kernels;
      kernels.arch = cudaArchNumber(f.cudaArch);
      kernels.kernel = f.attentionKernel;
      kernels.dtype = f.dtype;
      pm.addPass(plan::createZplanAttentionKernels(kernels));
      // With --gemm-algos on (the default), each product's cuBLASLt algorithm
      // where the tuning table (zk/gemm_algos.h, measured on the GPU of
      // --cuda-arch) has its shape; the others run cuBLASLt's first heuristic
      // answer.
      if (f.gemmAlgos == "on") {
        plan::ZplanGemmAlgosOptions algos;
        algos.arch = kernels.arch;
        algos.dtype = f.dtype;
        pm.addPass(plan::createZplanGemmAlgos(algos));
      }
    }
    // The decode program's few-row products: fused by input, and the
    // kernel of each other one decided here rather than timed at run time.
    if (f.generate) {
      plan::ZplanDecodeProductsOptions decode;
      decode.fuse = f.decodeFusion != "off";
      // The cuda target's default follows the H200 measurements
      // (docs/generation.md, sessions 6 and 8): at one row the fused steps
      // win (q / k / v as one launch, gate / up with the SiLU as one, the
      // residual add and RMS norm in the product that reads them: with the
      // streaming few-row kernel, batch 1 went from 844 to 960-969 tokens/s
      // in session 8), from 8 rows the few-row launches lose to cuBLASLt, so
      // only the rotaries and cache writes are fused there (batch 8 neutral,
      // batch 64 +3.8%). The q / k / v launch is capped at 16 MiB of weights
      // (a launch over the gate / up pair without its SiLU would read 44 MiB
      // at llama-1b).
      if (f.target == "cuda" && f.decodeFusion == "auto") {
        decode.multiMaxRows = 1;
        decode.multiMaxBytes = 16 << 20;
        decode.gatedMaxRows = 1;
      }
      // One step for a layer's rotaries and cache writes (every batch), and
      // the norm before a few-row product in that product's kernel (the
      // streaming few-row kernel; at one row on cuda, wherever it would hold
      // the rows on cpu).
      decode.ropeKv = decode.fuse;
      // That step folded into the attention that reads it only with `on`:
      // on the H200 (session 10, docs/generation.md) one kernel instead of
      // two was neutral at batch 1 (1091-1129 against 1090-1130 tokens/s)
      // and 10% slower at batch 8 (5568 against 6162): the rotary kernel's
      // time was already hidden behind the programmatic launches.
      decode.ropeAttention = f.decodeFusion == "on";
      if (decode.fuse)
        decode.normMaxRows = f.target == "cuda" ? 1 : 4;
      decode.chooseKernel = f.target == "cuda" && f.fewRowsMaxRows > 0;
      decode.fewRowsMax = f.fewRowsMaxRows;
      decode.fewRowsMaxBytes = f.fewRowsMaxBytes;
      // The streaming few-row kernel where it holds a product (the K-slab
      // grid sized to the SMs, docs/generation.md, session 9); the cpu
      // target has one kernel per op.
      decode.streamKernel = f.target == "cuda" && f.fewRowsKernel == "stream";
      decode.fewRowsStreamMaxBytes = f.fewRowsStreamMaxBytes;
      // A whole decoder layer as one step: the fusions it is made of at
      // every row count the kernel takes (up to 4), then the layer.
      if (f.decodeLayer == "on" && decode.fuse) {
        decode.multiMaxRows = std::max<int64_t>(decode.multiMaxRows, 4);
        decode.multiMaxBytes = 0;
        decode.gatedMaxRows = std::max<int64_t>(decode.gatedMaxRows, 4);
        decode.normMaxRows = 4;
        decode.decodeLayer = true;
        decode.decodeLayerKernel = f.target == "cuda";
      }
      decode.dtype = f.dtype;
      pm.addPass(plan::createZplanDecodeProducts(decode));
    }
    pm.addPass(plan::createZplanSchedule(schedule));
    // Which steps' kernels load their weights (or caches) before waiting for
    // the previous kernel: only where no step writes them (plan 2.18).
    pm.addPass(plan::createZplanEarlyLoads());
    plan::ZplanMemoryPlanOptions memory;
    memory.dtype = f.dtype;
    memory.deviceReserve = reserve.workspaceBytes + reserve.reserveBytes;
    memory.gpuMem = limits.gpuMem;
    memory.hostMem = limits.hostMem;
    pm.addPass(plan::createZplanMemoryPlan(memory));
  };
  plan::EmitOptions emit;
  emit.planPath = options.output.empty() ? "plan.zplan" : options.output;
  llvm::SmallString<256> modelDir(options.model);
  llvm::sys::path::remove_filename(modelDir);
  emit.modelDir = modelDir.empty() ? "." : std::string(modelDir.str());
  emit.backend = f.target == "cuda" ? 1 : 0;
  emit.zeroStage = int(f.zero);
  emit.producer = "zplan 0.1 (" + commandLine(f, options) + ")";
  emit.reserve = reserve;
  // Plans a copy of the module with one --recompute choice, its diagnostics
  // held back: success when the plan fits --gpu-mem.
  std::vector<std::string> held;
  auto tryPlan = [&](const std::string &recompute,
                     OwningOpRef<ModuleOp> &copy) -> FailureOr<bool> {
    copy = module->clone();
    PassManager trial(&context, ModuleOp::getOperationName());
    buildPipeline(trial, recompute);
    held.clear();
    LogicalResult ok = success();
    {
      ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
        if (diag.getSeverity() == DiagnosticSeverity::Error)
          held.push_back(diag.str());
        return success();
      });
      ok = trial.run(*copy);
    }
    if (failed(ok))
      return false;
    // The emitter's figures (figures only: no constant payloads) decide
    // whether the whole process peak fits, not only the arena.
    plan::EmitOptions figures = emit;
    figures.figuresOnly = true;
    std::vector<uint8_t> ignored;
    plan::PlanSummary summary;
    if (failed(plan::emitPlan(*copy, figures, ignored, summary)))
      return failure();
    std::string over = peakOverGpuMem(summary, limits.gpuMem);
    if (!over.empty()) {
      held.assign(1, over);
      return false;
    }
    return true;
  };
  // --offload-param cpu with --gpu-mem and no --prefetch-bytes: the automatic
  // window holds about a layer of parameters more on the device than the
  // placement one parameter ahead. When the plan does not fit with it, the
  // window halves (down to a sixteenth of the automatic one) until it fits;
  // 0 (gathers at their use, copies one parameter ahead) is the last try.
  const bool searchWindow = fetchWindow < 0 && limits.gpuMem > 0 &&
                            f.offloadParam == "cpu" &&
                            !(f.train && f.recompute == "auto");
  if (searchWindow) {
    int64_t automatic = -1;
    for (;;) {
      OwningOpRef<ModuleOp> copy;
      FailureOr<bool> fits = tryPlan(f.recompute, copy);
      if (failed(fits))
        return failure();
      if (*fits) {
        if (fetchWindow >= 0)
          std::cerr << "zplan: parameter fetch window " << fetchWindow
                    << " bytes (the automatic " << automatic
                    << " does not fit --gpu-mem " << f.gpuMem << ")\n";
        module = std::move(copy);
        break;
      }
      if (fetchWindow < 0) {
        // The window the pass chose, from the failed trial's programs.
        copy->walk([&](func::FuncOp func) {
          for (const char *name :
               {"zplan.copy_window_bytes", "zplan.gather_window_bytes"})
            if (auto w = func->getAttrOfType<IntegerAttr>(name))
              automatic = std::max(automatic, w.getInt());
        });
        fetchWindow = automatic > 0 ? automatic / 2 : 0;
      } else if (fetchWindow > 0) {
        fetchWindow = fetchWindow / 2 >= automatic / 16 ? fetchWindow / 2 : 0;
      } else {
        for (const std::string &h : held)
          emitError(UnknownLoc::get(&context), h);
        return failure();
      }
    }
  } else if (f.train && f.recompute == "auto") {
    // The least recomputation whose plan fits --gpu-mem: each choice is
    // planned on a copy of the module, its diagnostics held back; the first
    // that plans wins. When even full recomputation does not fit, its
    // messages (how far over the budget) are reported.
    bool chosen = false;
    for (const char *choice : {"none", "selective", "full"}) {
      OwningOpRef<ModuleOp> copy;
      FailureOr<bool> fits = tryPlan(choice, copy);
      if (failed(fits))
        return failure();
      if (*fits) {
        std::cerr << "zplan: --recompute auto: " << choice << " fits --gpu-mem "
                  << f.gpuMem << "\n";
        module = std::move(copy);
        chosen = true;
        break;
      }
    }
    if (!chosen) {
      std::string msg = "--recompute auto: the step does not fit --gpu-mem " +
                        f.gpuMem + " even with full recomputation:";
      for (const std::string &h : held)
        msg += "\n  " + h;
      emitError(UnknownLoc::get(&context), msg);
      return failure();
    }
  } else {
    PassManager pm(&context, ModuleOp::getOperationName());
    buildPipeline(pm, f.recompute);
    if (failed(pm.run(*module)))
      return failure();
  }
  auto planned = Clock::now();

  emit.figuresOnly = figuresOnly;
  CompiledPlan result;
  if (failed(plan::emitPlan(*module, emit, result.payload, result.summary)))
    return failure();
  if (std::string over = peakOverGpuMem(result.summary, limits.gpuMem);
      !over.empty()) {
    emitError(UnknownLoc::get(&context), over);
    return failure();
  }
  result.summary.generation.gpuMem = limits.gpuMem;
  result.summary.generation.linkBandwidth = double(limits.linkBandwidth);
  result.summary.nvme.bandwidth = double(limits.nvmeBandwidth);
  result.summary.nvme.microBatches = f.microBatches;
  auto done = Clock::now();
  result.importSeconds = seconds(start, imported);
  result.passSeconds = seconds(imported, planned);
  result.emitSeconds = seconds(planned, done);
  return result;
}

int compileCommand(MLIRContext &context, const CommonOptions &commonIn,
                   CompileConfig &f) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  CommonOptions options = commonIn;
  if (!f.dsConfig.empty()) {
    if (!applyDsConfigPrinting(f, options))
      return 2;
  }
  ByteLimits limits;
  std::string err = validateConfig(f, options, limits, /*needOutput=*/true);
  if (!err.empty()) {
    std::cerr << "zplan: error: " << err << "\n";
    return 2;
  }

  StderrDiagnostics diagnostics(context);
  FailureOr<CompiledPlan> compiled = compilePlan(context, options, f, limits);
  if (failed(compiled))
    return 1;

  // The JSON report first: if it cannot be written, no plan appears either.
  if (!f.reportJson.empty() &&
      !writeTextAtomically(f.reportJson, reportJsonWithSettings(
                                             compiled->summary, f, options))) {
    std::cerr << "zplan: error: cannot write the JSON report '" << f.reportJson
              << "'\n";
    return 1;
  }
  err = zrt::write_plan_file(options.output, compiled->payload.data(),
                             compiled->payload.size());
  if (!err.empty()) {
    std::cerr << "zplan: error: " << err << "\n";
    if (!f.reportJson.empty())
      std::remove(f.reportJson.c_str());
    return 1;
  }
  if (f.report)
    std::cout << plan::formatReport(compiled->summary)
              << formatSettings(f, options) << std::flush;
  double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::cerr << "zplan: wrote " << options.output << " ("
            << compiled->payload.size() + zrt::kPlanHeaderBytes << " bytes, "
            << compiled->summary.numInstructions << " instructions) in "
            << total << " s (import " << compiled->importSeconds
            << " s, passes " << compiled->passSeconds << " s, emit "
            << compiled->emitSeconds << " s)\n";
  return 0;
}

} // namespace zplan::driver
