//===- Estimate.cpp - zplan estimate --------------------------------------===//
//
// zplan estimate MODEL.onnx --world N [--batch B --seq S] [--dim NAME=V]
//       [--gpu-mem X] [--host-mem X] [--gpus-per-node G] [--train ...]
//       [--dtype D] [--target cpu|cuda] [--json] [-o FILE]
//
// Every row is a real compile (compilePlan, the pipeline of `zplan`), in
// this process, of one configuration: each tp that divides --world, ZeRO
// stage 0-3, the offload placements, and with --train the recompute
// modes none, selective and full. The model is imported once per batch a rank
// sees and cloned for each row. A row the compiler refuses shows the compiler's
// reason; NVMe rows say NVMe offload is not supported yet. --gpu-mem and
// --host-mem only decide the "fits" column: every row is planned without them,
// so that a row that does not fit still shows by how much.
//
// --ds-config applies a DeepSpeed config to every row as `zplan --ds-config`
// would (the swept tp, stage, offload and recompute act as flags, so they
// win over the config's), and marks the row of the config's own choice. The
// config's batch arithmetic depends on dp, so it is applied per row: a row
// whose dp the config's batch does not split into is refused with the
// config's message.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Estimate.h"
#include "compiler/driver/DsConfig.h"

#include "compiler/plan/Report.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

using namespace mlir;

namespace zplan::driver {
namespace {

/// One configuration and what its plan holds.
struct Row {
  int64_t tp = 1, dp = 1, zero = 0;
  std::string offloadParam = "none", offloadOptimizer = "none";
  std::string recompute = "none";
  /// The configuration --ds-config (with the command line) chose.
  bool configRow = false;
  enum class Status { Ok, Refused, NotSupported } status = Status::Ok;
  std::string reason;
  std::vector<std::string> args;
  plan::PlanSummary summary;

  const plan::MemoryFigures &m() const { return summary.memory; }
  uint64_t deviceParams() const {
    return m().residentWeightBytes - m().hostWeightBytes - m().nvmeWeightBytes;
  }
  uint64_t deviceGrads() const { return m().gradBytes - m().hostGradBytes; }
  uint64_t deviceOptimizer() const {
    return (m().masterBytes - m().hostMasterBytes - m().nvmeMasterBytes) +
           (m().momentBytes - m().hostMomentBytes - m().nvmeMomentBytes);
  }
  /// The rank's NVMe file (docs/nvme.md): parameters and optimizer state.
  uint64_t nvmeBytes() const { return m().arenaBytes[2]; }
  uint64_t hostOptimizer() const {
    return m().hostMasterBytes + m().hostMomentBytes;
  }
  /// Gathered parameters, collective results and gradient buckets: each a
  /// peak of its own, summed (an upper bound on what they hold at once).
  uint64_t buffers() const {
    return m().peakGatheredParamBytes + m().collectiveBufferBytes +
           m().bucketBytes;
  }
  uint64_t commSent() const {
    uint64_t total = 0;
    for (const auto &[kind, axes] : summary.comm)
      for (const auto &[axis, f] : axes)
        total += f.sentBytes;
    return total;
  }
};

/// "1.5G", "312.0K": compact binary units for the table.
std::string compact(uint64_t bytes) {
  const char *units[] = {"B", "K", "M", "G", "T"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%lluB",
                  static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof(buf), "%.1f%s", v, units[u]);
  return buf;
}

std::string pad(const std::string &s, size_t width, bool right = true) {
  if (s.size() >= width)
    return s;
  return right ? std::string(width - s.size(), ' ') + s
               : s + std::string(width - s.size(), ' ');
}

/// The flags that reproduce a row with `zplan MODEL ... -o PLAN`: every
/// setting the command line or the table gave, and the swept ones.
std::vector<std::string> rowArgs(const CompileConfig &c,
                                 const CommonOptions &o) {
  std::vector<std::string> args;
  for (const std::string &flag : reportedSettings(c)) {
    Origin origin = c.origin(flag);
    // The estimator plans without the memory limits (they only decide the
    // "fits" column); dtype and target always go along, since the
    // estimator's default target (cuda) is not zplan's.
    if (flag == "--gpu-mem" || flag == "--host-mem")
      continue;
    if (origin.source == Source::Default && flag != "--batch" &&
        flag != "--dtype" && flag != "--target")
      continue;
    if (flag == "--batch" && o.import.batch < 0)
      continue;
    std::string value = settingText(c, o, flag);
    if (flag == "--train" || flag == "--no-fuse" ||
        flag == "--keep-logits-sharded" || flag == "--restore-zero-biases") {
      if (value == "true")
        args.push_back(flag);
      continue;
    }
    args.push_back(flag);
    args.push_back(value);
  }
  if (o.import.seq >= 0) {
    args.push_back("--seq");
    args.push_back(std::to_string(o.import.seq));
  }
  for (const auto &[name, value] : o.import.dims) {
    args.push_back("--dim");
    args.push_back(name + "=" + std::to_string(value));
  }
  if (o.import.allowMissingData)
    args.push_back("--graph-only");
  return args;
}

/// Records the first error a compile reports and swallows the rest (the
/// remarks that ZeRO without dp partitions nothing, ...).
class CaptureDiagnostics {
public:
  explicit CaptureDiagnostics(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) {
          if (diag.getSeverity() == DiagnosticSeverity::Error && first.empty())
            first = diag.str();
          return success();
        }) {}
  std::string take() {
    std::string s = std::move(first);
    first.clear();
    return s;
  }

private:
  std::string first;
  ScopedDiagnosticHandler handler;
};

/// Progress on stderr, one line rewritten in place.
class Progress {
public:
  Progress(bool enabled, size_t total) : enabled(enabled), total(total) {}
  void show(size_t i, const Row &r) {
    if (!enabled)
      return;
    std::string line = llvm::formatv(
        "zplan estimate: [{0}/{1}] tp {2} zero {3} offload {4}/{5}{6}", i + 1,
        total, r.tp, r.zero, r.offloadParam, r.offloadOptimizer,
        r.recompute == "none" ? "" : " recompute " + r.recompute);
    std::cerr << "\r" << pad(line, width, /*right=*/false) << std::flush;
    width = std::max(width, line.size());
  }
  void done() {
    if (enabled)
      std::cerr << "\r" << std::string(width, ' ') << "\r" << std::flush;
  }

private:
  bool enabled;
  size_t total;
  size_t width = 0;
};

std::vector<Row> configurations(const EstimateOptions &opts) {
  std::vector<Row> rows;
  const bool train = opts.base.train;
  struct Placement {
    const char *param, *optimizer;
    bool stage3Only, supported;
  };
  // Parameter offload of a training step to the host is refused by the
  // compiler today (validateConfig says so); its rows show that reason. NVMe
  // offload (docs/nvme.md) is offered at stage 3, as DeepSpeed offers it.
  std::vector<Placement> placements =
      train ? std::vector<Placement>{{"none", "none", false, true},
                                     {"none", "cpu", false, true},
                                     {"cpu", "cpu", true, true},
                                     {"nvme", "nvme", true, true}}
            : std::vector<Placement>{{"none", "none", false, true},
                                     {"cpu", "none", false, true},
                                     {"nvme", "none", true, true}};
  std::vector<std::string> recomputes = {"none"};
  if (train) {
    recomputes.push_back("selective");
    recomputes.push_back("full");
  }
  for (int64_t tp = 1; tp <= opts.world; ++tp) {
    if (opts.world % tp != 0)
      continue;
    for (int64_t zero = 0; zero <= 3; ++zero)
      for (const Placement &p : placements) {
        if (p.stage3Only && zero != 3)
          continue;
        for (const std::string &rc : recomputes) {
          Row r;
          r.tp = tp;
          r.dp = opts.world / tp;
          r.zero = zero;
          r.offloadParam = p.param;
          r.offloadOptimizer = p.optimizer;
          r.recompute = rc;
          if (!p.supported) {
            r.status = Row::Status::NotSupported;
            r.reason = "NVMe offload (ZeRO-Infinity) is not built";
          }
          rows.push_back(r);
        }
      }
  }
  return rows;
}

std::string fitsText(const Row &r, const ByteLimits &limits) {
  if (r.status != Row::Status::Ok || (!limits.gpuMem && !limits.hostMem))
    return "-";
  bool fits = (!limits.gpuMem || r.m().plannedPeakBytes() <= limits.gpuMem) &&
              (!limits.hostMem || r.m().arenaBytes[1] <= limits.hostMem);
  return fits ? "yes" : "no";
}

std::string formatTable(const std::vector<Row> &rows,
                        const EstimateOptions &opts,
                        const CommonOptions &common, const ByteLimits &limits) {
  std::ostringstream os;
  const CompileConfig &b = opts.base;
  os << "zplan estimate: " << llvm::sys::path::filename(common.model).str()
     << ", world " << opts.world;
  if (common.import.batch >= 0)
    os << ", batch " << common.import.batch;
  if (common.import.seq >= 0)
    os << ", seq " << common.import.seq;
  os << ", dtype " << b.dtype << ", target " << b.target << ", "
     << (b.train ? "training step (AdamW)" : "forward pass");
  if (limits.gpuMem)
    os << ", --gpu-mem " << plan::formatBytes(limits.gpuMem);
  if (limits.hostMem)
    os << ", --host-mem " << plan::formatBytes(limits.hostMem);
  os << "\n";
  os << "Per GPU: parameters, gradient buffers, optimizer state (master + "
        "moments), activations (peak), buffers (gathered parameters + "
        "collective results + gradient buckets, each at its peak), the "
        "planned peak (arena + workspace"
     << (b.target == "cuda" ? " + CUDA context + NCCL" : "")
     << "). Per host, for each rank: its offloaded state and its host "
        "arena. nvme: each rank's NVMe file. comm: bytes each rank sends "
        "per step.\n";
  const std::vector<std::pair<std::string, size_t>> columns = {
      {"tp", 3},        {"dp", 3},      {"zero", 4},  {"offload", 10},
      {"recompute", 9}, {"params", 8},  {"grads", 8}, {"optim", 8},
      {"activ", 8},     {"buffers", 8}, {"peak", 8},  {"h.params", 8},
      {"h.optim", 8},   {"h.total", 8}, {"nvme", 8},  {"comm", 8},
      {"fits", 4}};
  std::string header, rule;
  for (const auto &[name, width] : columns) {
    header += pad(name, width) + " ";
    rule += std::string(width, '-') + " ";
  }
  os << header << "\n" << rule << "\n";
  std::vector<std::string> reasons;
  for (const Row &r : rows) {
    std::vector<std::string> cells = {
        std::to_string(r.tp), std::to_string(r.dp), std::to_string(r.zero),
        r.offloadParam + "/" + r.offloadOptimizer,
        r.recompute == "none" ? "-" : r.recompute};
    if (r.status == Row::Status::Ok) {
      for (uint64_t v : {r.deviceParams(), r.deviceGrads(), r.deviceOptimizer(),
                         r.m().activationBytes, r.buffers(),
                         r.m().plannedPeakBytes(), r.m().hostWeightBytes,
                         r.hostOptimizer(), r.m().arenaBytes[1], r.nvmeBytes(),
                         r.commSent()})
        cells.push_back(compact(v));
      cells.push_back(fitsText(r, limits));
    }
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i)
      line += pad(cells[i], columns[i].second) + " ";
    if (r.status != Row::Status::Ok) {
      auto it = llvm::find(reasons, r.reason);
      size_t n = it - reasons.begin();
      if (it == reasons.end())
        reasons.push_back(r.reason);
      line += r.status == Row::Status::NotSupported ? "not supported yet"
                                                    : "refused";
      line += " [" + std::to_string(n + 1) + "]";
    }
    if (r.configRow)
      line += " <- --ds-config";
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    os << line << "\n";
  }
  for (size_t i = 0; i < reasons.size(); ++i)
    os << "[" << i + 1 << "] " << reasons[i] << "\n";
  return os.str();
}

std::string formatJson(const std::vector<Row> &rows,
                       const EstimateOptions &opts, const CommonOptions &common,
                       const ByteLimits &limits) {
  using llvm::json::Array;
  using llvm::json::Object;
  const int64_t perNode = opts.gpusPerNode > 0
                              ? std::min(opts.gpusPerNode, opts.world)
                              : opts.world;
  Array out;
  for (const Row &r : rows) {
    Object row{{"tp", r.tp},
               {"dp", r.dp},
               {"zero", r.zero},
               {"offload_param", r.offloadParam},
               {"offload_optimizer", r.offloadOptimizer},
               {"recompute", r.recompute},
               {"ds_config_row", r.configRow},
               {"args", llvm::json::Value(r.args)}};
    switch (r.status) {
    case Row::Status::Ok:
      row["status"] = "ok";
      break;
    case Row::Status::Refused:
      row["status"] = "refused";
      break;
    case Row::Status::NotSupported:
      row["status"] = "not supported yet";
      break;
    }
    if (r.status != Row::Status::Ok) {
      row["reason"] = r.reason;
      out.push_back(std::move(row));
      continue;
    }
    const plan::MemoryFigures &m = r.m();
    row["device"] =
        Object{{"param_bytes", r.deviceParams()},
               {"grad_bytes", r.deviceGrads()},
               {"master_bytes",
                m.masterBytes - m.hostMasterBytes - m.nvmeMasterBytes},
               {"moment_bytes",
                m.momentBytes - m.hostMomentBytes - m.nvmeMomentBytes},
               {"state_bytes",
                m.stateBytes - m.hostStateBytes - m.nvmeStateBytes},
               {"optimizer_bytes", r.deviceOptimizer()},
               {"activation_bytes", m.activationBytes},
               {"peak_gathered_param_bytes", m.peakGatheredParamBytes},
               {"collective_buffer_bytes", m.collectiveBufferBytes},
               {"bucket_bytes", m.bucketBytes},
               {"buffer_bytes", r.buffers()},
               {"workspace_bytes", m.workspaceBytes},
               {"runtime_reserve_bytes", m.runtimeReserveBytes},
               {"arena_bytes", m.arenaBytes[0]},
               {"planned_peak_bytes", m.plannedPeakBytes()}};
    row["host"] = Object{{"param_bytes", m.hostWeightBytes},
                         {"grad_bytes", m.hostGradBytes},
                         {"master_bytes", m.hostMasterBytes},
                         {"moment_bytes", m.hostMomentBytes},
                         {"state_bytes", m.hostStateBytes},
                         {"optimizer_bytes", r.hostOptimizer()},
                         {"arena_bytes", m.arenaBytes[1]},
                         {"node_bytes", m.arenaBytes[1] * uint64_t(perNode)}};
    row["nvme"] = Object{{"param_bytes", m.nvmeWeightBytes},
                         {"master_bytes", m.nvmeMasterBytes},
                         {"moment_bytes", m.nvmeMomentBytes},
                         {"file_bytes", m.arenaBytes[2]}};
    Object byKind;
    uint64_t calls = 0;
    for (const auto &[kind, axes] : r.summary.comm) {
      Object perAxis;
      for (const auto &[axis, f] : axes) {
        perAxis[axis] = f.sentBytes;
        calls += f.count;
      }
      byKind[kind] = std::move(perAxis);
    }
    row["comm"] = Object{{"sent_bytes", r.commSent()},
                         {"calls", calls},
                         {"sent_by_kind", std::move(byKind)}};
    if (limits.gpuMem || limits.hostMem)
      row["fits"] = fitsText(r, limits) == "yes";
    else
      row["fits"] = nullptr;
    out.push_back(std::move(row));
  }
  Object top{{"model", common.model},           {"world", opts.world},
             {"gpus_per_node", perNode},        {"batch", common.import.batch},
             {"seq", common.import.seq},        {"dtype", opts.base.dtype},
             {"target", opts.base.target},      {"train", opts.base.train},
             {"ds_config", opts.base.dsConfig}, {"gpu_mem", limits.gpuMem},
             {"host_mem", limits.hostMem},      {"rows", std::move(out)}};
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(top))).str() + "\n";
}

} // namespace

void addEstimateFlags(CLI::App &cmd, EstimateOptions &options,
                      CompileFlagSet &flags) {
  // A GPU's memory is the question the estimator answers, so its rows
  // include what the CUDA backend holds besides the arenas.
  options.base.target = "cuda";
  cmd.add_option("--world", options.world, "Number of ranks (required)")
      ->required();
  cmd.add_option("--gpus-per-node", options.gpusPerNode,
                 "Ranks per host, for the per-node host bytes (default: "
                 "all on one host)");
  cmd.add_flag("--json", options.json, "Print JSON instead of the table");
  cmd.add_option("--progress", options.progress,
                 "Progress on stderr: auto (on a terminal), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  // The rows sweep tp; --tp names the one a config is meant for (its batch
  // check and its marked row), as DeepSpeed's config leaves tp to the model.
  cmd.add_option("--tp", options.base.tp,
                 "With --ds-config: the tp of the config's own row (default "
                 "1); every tp is still estimated");
  cmd.add_option("--ds-config", options.base.dsConfig,
                 "Apply a DeepSpeed JSON config to every row (the swept "
                 "settings win) and mark the config's own row "
                 "(docs/ds-config.md)");
  flags.addTo(cmd, options.base, kPlan);
}

int estimateCommand(MLIRContext &context, const CommonOptions &commonIn,
                    EstimateOptions &opts) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  CommonOptions common = commonIn;
  // The estimator plans; it never reads the weights.
  common.import.allowMissingData = true;
  if (opts.world < 1) {
    std::cerr << "zplan: error: --world " << opts.world
              << " must be at least 1\n";
    return 2;
  }
  if (opts.gpusPerNode < 0) {
    std::cerr << "zplan: error: --gpus-per-node " << opts.gpusPerNode
              << " must be at least 1\n";
    return 2;
  }
  opts.base.world = opts.world;

  // The config once, with the command line alone: its messages are printed
  // here (not once per row), an error stops the estimate as it stops zplan,
  // and the result names the config's own row.
  CompileConfig chosen = opts.base;
  const CommonOptions userCommon = common;
  if (!opts.base.dsConfig.empty()) {
    if (!applyDsConfigPrinting(chosen, common))
      return 2;
    // The table's heading names the dtype every row has; each row sets it
    // again from the config (with the same origin rules).
    opts.base.dtype = chosen.dtype;
  }

  // The shared settings must be valid on their own (checked at tp 1).
  ByteLimits limits;
  {
    CompileConfig probe = chosen;
    std::string err = validateConfig(probe, common, limits,
                                     /*needOutput=*/false);
    if (!err.empty()) {
      std::cerr << "zplan: error: " << err << "\n";
      return 2;
    }
  }
  ByteLimits planLimits = limits;
  planLimits.gpuMem = 0;
  planLimits.hostMem = 0;

  // A model that does not import would refuse every row for the same
  // reason: say it once, as zplan would.
  // A forward pass imports at this batch anyway: keep it.
  ImportCache cache;
  {
    OwningOpRef<ModuleOp> module =
        import::importOnnxFile(context, common.model, common.import);
    if (!module)
      return 1;
    if (!opts.base.train)
      cache.modules.emplace(common.import.batch, std::move(module));
  }

  std::vector<Row> rows = configurations(opts);
  if (!opts.base.dsConfig.empty())
    for (Row &r : rows)
      r.configRow =
          r.tp == chosen.tp && r.zero == chosen.zero &&
          r.offloadParam == chosen.offloadParam &&
          (!chosen.train || (r.offloadOptimizer == chosen.offloadOptimizer &&
                             r.recompute == chosen.recompute));
  bool showProgress =
      opts.progress == "on" ||
      (opts.progress == "auto" && llvm::sys::Process::StandardErrIsDisplayed());
  Progress progress(showProgress, rows.size());
  CaptureDiagnostics capture(context);
  size_t compiled = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    Row &r = rows[i];
    progress.show(i, r);
    CompileConfig c = opts.base;
    const Origin swept{Source::Flag, ""};
    setInteger(c, "--tp", r.tp, swept);
    setInteger(c, "--zero", r.zero, swept);
    setInteger(c, "--world", opts.world, swept);
    setText(c, "--offload-param", r.offloadParam, swept);
    if (c.train) {
      setText(c, "--offload-optimizer", r.offloadOptimizer, swept);
      setText(c, "--recompute", r.recompute, swept);
    }
    // The config for this row's dp; its messages were printed above.
    CommonOptions rowCommon = common;
    if (!c.dsConfig.empty()) {
      CompileConfig withConfig = c;
      std::string configError = applyDsConfig(withConfig, rowCommon).error;
      if (!configError.empty()) {
        // The command line that repeats the refusal: the row's flags and
        // the user's, and the config.
        r.args = rowArgs(c, userCommon);
        r.args.push_back("--ds-config");
        r.args.push_back(c.dsConfig);
        if (r.status == Row::Status::Ok) {
          r.status = Row::Status::Refused;
          r.reason = configError;
        }
        continue;
      }
      // The row's flags state every setting, so the plain compile that
      // reproduces it needs no config.
      c = std::move(withConfig);
      c.dsConfig.clear();
    }
    // An NVMe row needs a folder; its figures do not depend on which.
    if ((r.offloadParam == "nvme" || r.offloadOptimizer == "nvme") &&
        c.nvmePath.empty())
      setText(c, "--nvme-path", "nvme", swept);
    r.args = rowArgs(c, rowCommon);
    if (r.status != Row::Status::Ok)
      continue;
    ByteLimits ignored;
    std::string err = validateConfig(c, rowCommon, ignored,
                                     /*needOutput=*/false);
    if (!err.empty()) {
      r.status = Row::Status::Refused;
      r.reason = err;
      continue;
    }
    FailureOr<CompiledPlan> plan =
        compilePlan(context, rowCommon, c, planLimits, &cache,
                    /*figuresOnly=*/true);
    ++compiled;
    std::string diag = capture.take();
    if (failed(plan)) {
      r.status = Row::Status::Refused;
      r.reason = diag.empty() ? "the compile failed" : diag;
      continue;
    }
    r.summary = std::move(plan->summary);
  }
  progress.done();

  std::string text = opts.json ? formatJson(rows, opts, common, limits)
                               : formatTable(rows, opts, common, limits);
  if (common.output.empty() || common.output == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
  } else {
    std::error_code ec;
    llvm::ToolOutputFile out(common.output, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      std::cerr << "zplan: error: cannot write '" << common.output
                << "': " << ec.message() << "\n";
      return 1;
    }
    out.os() << text;
    out.keep();
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cerr << llvm::formatv("zplan estimate: {0} configurations, {1} "
                             "compiled, in {2:f2} s\n",
                             rows.size(), compiled, seconds)
                   .str();
  return 0;
}

} // namespace zplan::driver
