//===- Options.cpp - The compile path's option table ----------------------===//
//
// One row per flag: its name, help, the CompileConfig field it sets, its
// group, whether it needs --train, and the check its value must pass. The
// command line registers the rows with CLI11, the DeepSpeed config reader
// sets the same fields by flag name, and validateConfig() runs each row's
// check, naming the flag or, for a value that came from a ds-config file,
// the file and field. Checks that relate several settings follow the table.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Options.h"
#include "compiler/driver/Compile.h"

#include "compiler/plan/EmitPlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"

#include "zk/attention_kernels.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <sstream>
#include <variant>

namespace zplan::driver {
namespace {

using Field = std::variant<int64_t CompileConfig::*, double CompileConfig::*,
                           std::string CompileConfig::*, bool CompileConfig::*>;

enum class Check {
  None,
  AtLeast,      ///< an integer >= `least`
  Choice,       ///< one of `choices`
  NonNegative,  ///< a number >= 0
  UnitInterval, ///< a number in [0, 1)
  Bytes,        ///< a byte count (parseBytes)
  BytesOrAuto,  ///< a byte count or "auto"
  CudaArch,     ///< sm_NN (cudaArchNumber)
};

struct OptionRow {
  std::string flag;
  std::string help;
  Field field;
  unsigned group = kPlan;
  /// Only meaningful for a training step: giving it without --train is an
  /// error (the reason follows in `trainNote`).
  bool trainOnly = false;
  std::string trainNote;
  Check check = Check::None;
  int64_t least = 0;
  std::vector<std::string> choices;
  /// Appended to the check's message: what a valid value looks like, or why
  /// other values are refused.
  std::string note;

  OptionRow &inGroup(unsigned g) {
    group = g;
    return *this;
  }
  OptionRow &needsTrain(std::string why = "") {
    trainOnly = true;
    trainNote = std::move(why);
    return *this;
  }
  OptionRow &atLeast(int64_t v) {
    check = Check::AtLeast;
    least = v;
    return *this;
  }
  OptionRow &oneOf(std::vector<std::string> c, std::string n = "") {
    check = Check::Choice;
    choices = std::move(c);
    note = std::move(n);
    return *this;
  }
  OptionRow &checked(Check c, std::string n = "") {
    check = c;
    note = std::move(n);
    return *this;
  }
};

OptionRow row(std::string flag, Field field, std::string help) {
  OptionRow r;
  r.flag = std::move(flag);
  r.field = field;
  r.help = std::move(help);
  return r;
}

using C = CompileConfig;

std::vector<OptionRow> buildTable() {
  std::vector<OptionRow> t;
  // The estimator sweeps these.
  t.push_back(
      row("--tp", &C::tp, "Tensor-parallel degree").inGroup(kSwept).atLeast(1));
  t.push_back(row("--zero", &C::zero, "ZeRO stage: 0, 1, 2 or 3")
                  .inGroup(kSwept)
                  .oneOf({"0", "1", "2", "3"}));
  t.push_back(row("--offload-param", &C::offloadParam,
                  "Parameter placement: none, cpu (pinned host memory) or "
                  "nvme (files under --nvme-path, read ahead of use)")
                  .inGroup(kSwept)
                  .oneOf({"none", "cpu", "nvme"}));
  t.push_back(row("--offload-optimizer", &C::offloadOptimizer,
                  "--train: where the optimizer state lives: none (device), "
                  "cpu (master weights, moments and AdamW in host memory) "
                  "or nvme (kept in files under --nvme-path, updated on the "
                  "host)")
                  .inGroup(kSwept)
                  .needsTrain("inference has no optimizer")
                  .oneOf({"none", "cpu", "nvme"}));
  t.push_back(
      row("--recompute", &C::recompute,
          "--train: none; selective (norm and activation outputs "
          "recomputed in the backward); full (each layer recomputed from "
          "its input); auto (the least of these whose plan fits --gpu-mem)")
          .inGroup(kSwept)
          .needsTrain()
          .oneOf({"none", "selective", "full", "auto"}));
  // The estimator takes --world itself (it is required there).
  t.push_back(row("--world", &C::world, "Number of ranks (default: --tp)")
                  .inGroup(kSwept)
                  .atLeast(1));
  // Everything else that shapes the plan.
  t.push_back(row("--dtype", &C::dtype, "Storage dtype: fp32, bf16 or fp16")
                  .oneOf({"fp32", "bf16", "fp16"}));
  t.push_back(row("--target", &C::target, "Backend: cpu or cuda")
                  .oneOf({"cpu", "cuda"}));
  t.push_back(row("--gpu-mem", &C::gpuMem,
                  "Device memory per rank in bytes (suffix K, M, G, T)")
                  .checked(Check::Bytes, "(e.g. 85899345920 or 80G)"));
  t.push_back(row("--host-mem", &C::hostMem,
                  "Host memory per rank in bytes (suffix K, M, G, T)")
                  .checked(Check::Bytes, "(e.g. 549755813888 or 512G)"));
  t.push_back(row("--cuda-context-bytes", &C::cudaContextBytes,
                  "cuda target: device bytes of the CUDA context, counted in "
                  "the planned peak (default 540M)")
                  .checked(Check::Bytes, "(e.g. 536M)"));
  t.push_back(row("--comm-reserve-bytes", &C::commReserveBytes,
                  "cuda target: device bytes of NCCL's buffers counted in the "
                  "planned peak; 'auto' (default): the communicators the "
                  "plan's collectives use times --comm-bytes-per-group")
                  .checked(Check::BytesOrAuto, "(e.g. 256M) or 'auto'"));
  t.push_back(row("--comm-bytes-per-group", &C::commBytesPerGroup,
                  "cuda target: device bytes of one NCCL communicator as the "
                  "runtime configures it (measured; docs/gpu-plan-runs.md)")
                  .checked(Check::Bytes, "(e.g. 300M)"));
  t.push_back(row("--persist-threshold", &C::persistThreshold,
                  "ZeRO-3: parameters below this many bytes stay whole")
                  .checked(Check::NonNegative));
  t.push_back(row("--prefetch-bytes", &C::prefetchBytes,
                  "ZeRO-3 gathers and --offload-param cpu copies: bytes of "
                  "parameters fetched ahead of use, counted in fp32 bytes "
                  "(default: one layer's parameters, and for the copies the "
                  "largest parameter on top; 0: gathers at their use, "
                  "copies one parameter ahead)")
                  .checked(Check::NonNegative));
  t.push_back(row("--max-live-bytes", &C::maxLiveBytes,
                  "ZeRO-3 gathers and --offload-param cpu copies: cap on the "
                  "fetched parameter bytes of each kind alive at once")
                  .checked(Check::NonNegative));
  t.push_back(row("--overlap-chunks", &C::overlapChunks,
                  "tp forward: split the batch into N chunks so that one "
                  "chunk's all_reduce runs while another computes (1: off)")
                  .atLeast(1));
  t.push_back(row("--no-fuse", &C::noFuse,
                  "cuda target: keep linear+GELU, linear+residual add, "
                  "residual add+norm and activation+gate as separate steps "
                  "(--zplan-fuse is off)"));
  t.push_back(row("--merge-linears", &C::mergeLinears,
                  "Merge the linears that read one input into one matrix "
                  "product followed by slices (--zplan-merge-linears; off "
                  "by default: each slice is a copy until the memory plan "
                  "has offset views)"));
  t.push_back(row("--decode-fusion", &C::decodeFusion,
                  "--generate: the decode program's products of one input "
                  "as one step (q/k/v; gate/up with the activation), the "
                  "norm before them in their kernel and each layer's "
                  "rotaries and cache writes as one step, "
                  "--zplan-decode-products (auto: every few-row group on "
                  "the cpu target; on cuda the rotaries and cache writes at "
                  "every batch, the products and norms at one row, as "
                  "measured; on: every few-row group, and the rotaries and "
                  "cache writes folded into the attention, rope_attention; "
                  "off: nothing)")
                  .oneOf({"auto", "on", "off"}));
  t.push_back(row("--decode-layer", &C::decodeLayer,
                  "--generate: each llama-style decoder layer of the decode "
                  "program as one step, decode_layer (on the cuda target "
                  "one persistent kernel a layer, kernels/cuda/"
                  "decode_layer.cu, where it takes the layer's shapes: at "
                  "most 4 rows, head dim 64 or 128); its products, norms "
                  "and rotaries are fused first up to 4 rows whatever "
                  "--decode-fusion says, unless it is off (default: off)")
                  .oneOf({"off", "on"}));
  t.push_back(row("--fold-rotary", &C::foldRotary,
                  "Fold the head split transposes of q and k through the "
                  "rotary embedding into the attention (the rotary reads "
                  "and writes sequence-major; --zplan-fold-transpose's "
                  "rotary option; auto, the default, and on: folded on "
                  "both targets; off: not folded)")
                  .oneOf({"auto", "on", "off"}));
  t.push_back(row("--cuda-arch", &C::cudaArch,
                  "cuda target: the GPU architecture the plan is for (default "
                  "sm_90, the H200); the compiler chooses each attention's "
                  "kernel for it (sm_90: the wgmma kernel wg3; others: the "
                  "register kernels), and the runtime refuses the plan on a "
                  "device that cannot run its kernels")
                  .checked(Check::CudaArch, "(e.g. sm_90 or sm_80)"));
  std::vector<std::string> attentionKernels;
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionKernels)
    attentionKernels.push_back(k.name);
  t.push_back(row("--attention-kernel", &C::attentionKernel,
                  "cuda target: run every attention that the tensor-core "
                  "kernels can take with this forward kernel (A/B timing; "
                  "default: --cuda-arch's; rows: the exact kernel everywhere)")
                  .oneOf(attentionKernels,
                         "(kernels/cuda/include/zk/attention_kernels.h)"));
  t.push_back(row("--gemm-algos", &C::gemmAlgos,
                  "cuda target: name each product's cuBLASLt algorithm where "
                  "the tuning table (kernels/cuda/include/zk/gemm_algos.h) "
                  "has it for --cuda-arch (--zplan-gemm-algos; default on; off: "
                  "cuBLASLt's first heuristic answer everywhere, for a GPU or "
                  "library where the table's algorithm is refused at load)")
                  .oneOf({"on", "off"}));
  t.push_back(row("--few-rows-max-rows", &C::fewRowsMaxRows,
                  "cuda target, --generate: products of at most this many "
                  "rows (and --few-rows-max-bytes of weight) run the "
                  "few-row kernel instead of cuBLASLt (default 1; 0: none)")
                  .checked(Check::NonNegative));
  t.push_back(row("--few-rows-max-bytes", &C::fewRowsMaxBytes,
                  "cuda target, --generate: the largest weight the few-row "
                  "kernel runs by that rule (default 4194304)")
                  .checked(Check::NonNegative));
  t.push_back(row("--few-rows-stream-max-bytes", &C::fewRowsStreamMaxBytes,
                  "cuda target, --generate: the largest weight the rule "
                  "gives the few-row kernels where the streaming kernel "
                  "holds the product (default 67108864: llama-1b's o and "
                  "down at one row, not its LM head)")
                  .checked(Check::NonNegative));
  t.push_back(row("--few-rows-kernel", &C::fewRowsKernel,
                  "cuda target, --generate: the kernel of the fused few-row "
                  "products and of those --few-rows-max-rows marks, where "
                  "the streaming kernel holds them (stream, the default: "
                  "W [K, N], at most 4 rows; cluster: the earlier kernels "
                  "everywhere, for A/B timing), written into the plan")
                  .oneOf({"stream", "cluster"}));
  t.push_back(row("--keep-logits-sharded", &C::keepLogitsSharded,
                  "Leave the LM head's logits split over tp"));
  t.push_back(row("--train", &C::train,
                  "Plan a training step (@init, @train_step) instead of the "
                  "forward pass"));
  t.push_back(row("--loss", &C::loss,
                  "--train: causal-lm (next-token cross-entropy, default)")
                  .needsTrain()
                  .oneOf({"causal-lm"}, "(or use --loss-output)"));
  t.push_back(row("--loss-output", &C::lossOutput,
                  "--train: use this named model output as the loss")
                  .needsTrain());
  t.push_back(row("--lr", &C::lr, "--train: learning rate (default 1e-3)")
                  .needsTrain()
                  .checked(Check::NonNegative));
  t.push_back(
      row("--lr-schedule", &C::lrSchedule,
          "--train: constant, warmup (linear warmup, then constant: "
          "DeepSpeed's WarmupLR) or warmup-decay (linear warmup, then linear "
          "decay to 0: WarmupDecayLR)")
          .needsTrain()
          .oneOf({"constant", "warmup", "warmup-decay"}));
  t.push_back(row("--warmup-steps", &C::warmupSteps,
                  "--train, warmup or warmup-decay: steps of linear warmup")
                  .needsTrain());
  t.push_back(row("--total-steps", &C::totalSteps,
                  "--train, warmup-decay: step at which the rate reaches 0")
                  .needsTrain());
  t.push_back(row("--weight-decay", &C::weightDecay,
                  "--train: AdamW weight decay (default 0.01)")
                  .needsTrain()
                  .checked(Check::NonNegative));
  t.push_back(row("--beta1", &C::beta1, "--train: AdamW beta1 (default 0.9)")
                  .needsTrain()
                  .checked(Check::UnitInterval));
  t.push_back(row("--beta2", &C::beta2, "--train: AdamW beta2 (default 0.999)")
                  .needsTrain()
                  .checked(Check::UnitInterval));
  t.push_back(row("--eps", &C::eps, "--train: AdamW epsilon (default 1e-8)")
                  .needsTrain()
                  .checked(Check::NonNegative));
  t.push_back(row("--clip-grad", &C::clipGrad,
                  "--train: clip the global gradient norm (0: off)")
                  .needsTrain()
                  .checked(Check::NonNegative));
  t.push_back(row("--micro-batches", &C::microBatches,
                  "--train: micro-batches accumulated per optimizer step")
                  .needsTrain()
                  .atLeast(1));
  t.push_back(row("--loss-scale", &C::lossScale,
                  "--train --dtype fp16: a static loss scale (0, the "
                  "default: dynamic loss scaling as DeepSpeed does it)")
                  .needsTrain()
                  .checked(Check::NonNegative));
  t.push_back(row("--initial-loss-scale", &C::initialLossScale,
                  "--train --dtype fp16: the dynamic scale's initial value "
                  "(default 65536)")
                  .needsTrain());
  t.push_back(row("--loss-scale-window", &C::lossScaleWindow,
                  "--train --dtype fp16: good steps in a row after which the "
                  "dynamic scale doubles (default 1000)")
                  .needsTrain()
                  .atLeast(1));
  t.push_back(row("--loss-scale-min", &C::lossScaleMin,
                  "--train --dtype fp16: the dynamic scale's floor (default "
                  "1)")
                  .needsTrain());
  t.push_back(row("--restore-zero-biases", &C::restoreZeroBiases,
                  "--train: give bias-free linears (not a tied LM head) a "
                  "trainable zero bias, which exporters drop")
                  .needsTrain());
  t.push_back(row("--generate", &C::generate,
                  "Plan greedy generation: @prefill (a prompt of up to "
                  "--max-seq tokens) and @decode (one token per sequence) "
                  "with a planned KV cache"));
  t.push_back(row("--max-seq", &C::maxSeq,
                  "--generate: positions of the KV cache (prompt and new "
                  "tokens together)"));
  t.push_back(row("--link-bandwidth", &C::linkBandwidth,
                  "host link bytes/s for the report's floors of the host -> "
                  "device copies (--offload-param cpu, ZeRO-Inference; "
                  "default 55000000000)")
                  .checked(Check::Bytes, "per second (e.g. 55G)"));
  t.push_back(row("--nvme-path", &C::nvmePath,
                  "Folder of the NVMe offload files (one per rank, created "
                  "by zrun at load; zrun --nvme-path may name another)"));
  t.push_back(row("--nvme-bandwidth", &C::nvmeBandwidth,
                  "NVMe bytes/s per rank for the report's time floor of the "
                  "offload traffic (default 3000000000)")
                  .checked(Check::Bytes, "per second (e.g. 3G)"));
  // What the compile command writes and reads besides the plan.
  t.push_back(row("--report", &C::report,
                  "Print the per-rank memory and communication report")
                  .inGroup(kOutput));
  t.push_back(row("--report-json", &C::reportJson,
                  "Write the report as JSON to this file")
                  .inGroup(kOutput));
  t.push_back(row("--ds-config", &C::dsConfig,
                  "Read the settings of a DeepSpeed JSON config "
                  "(docs/ds-config.md); flags given on the command line win")
                  .inGroup(kOutput));
  return t;
}

const std::vector<OptionRow> &table() {
  static const std::vector<OptionRow> rows = buildTable();
  return rows;
}

const OptionRow *findRow(llvm::StringRef flag) {
  for (const OptionRow &r : table())
    if (r.flag == flag)
      return &r;
  return nullptr;
}

std::string numberText(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// The value of a row, as text; strings quoted when `quote`.
std::string valueText(const CompileConfig &c, const OptionRow &r, bool quote) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(c.*member);
        else if constexpr (std::is_same_v<T, double>)
          return numberText(c.*member);
        else if constexpr (std::is_same_v<T, bool>)
          return c.*member ? "true" : "false";
        else
          return quote ? "'" + c.*member + "'" : c.*member;
      },
      r.field);
}

/// "a, b or c".
std::string listChoices(const std::vector<std::string> &choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i)
      out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i];
  }
  return out;
}

std::string describe(const CompileConfig &c, const OptionRow &r) {
  Origin o = c.origin(r.flag);
  bool isString = std::holds_alternative<std::string CompileConfig::*>(r.field);
  if (o.source == Source::DsConfig)
    return c.dsConfig + ": " + o.field + " = " + valueText(c, r, isString) +
           " (" + r.flag + ")";
  return r.flag + " " + valueText(c, r, isString);
}

/// The row's own check; returns an error message or "".
std::string checkRow(const CompileConfig &c, const OptionRow &r) {
  if (r.check == Check::None)
    return {};
  std::string text = valueText(c, r, /*quote=*/false);
  std::string what = describe(c, r);
  auto withNote = [&](std::string msg) {
    return r.note.empty() ? msg : msg + " " + r.note;
  };
  switch (r.check) {
  case Check::None:
    return {};
  case Check::AtLeast: {
    int64_t v = c.*std::get<int64_t CompileConfig::*>(r.field);
    if (v < r.least)
      return what + " must be at least " + std::to_string(r.least);
    return {};
  }
  case Check::Choice:
    if (llvm::is_contained(r.choices, text))
      return {};
    return withNote(what + " must be " + listChoices(r.choices));
  case Check::NonNegative: {
    double v = std::visit(
        [&](auto member) -> double {
          using T = std::decay_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>)
            return double(c.*member);
          else
            return 0.0;
        },
        r.field);
    // Written so that NaN fails too.
    if (!(v >= 0))
      return what + " must not be negative";
    return {};
  }
  case Check::UnitInterval: {
    double v = c.*std::get<double CompileConfig::*>(r.field);
    if (!(v >= 0 && v < 1))
      return what + " must be in [0, 1)";
    return {};
  }
  case Check::Bytes:
  case Check::BytesOrAuto: {
    uint64_t ignored;
    if (text.empty() || (r.check == Check::BytesOrAuto && text == "auto") ||
        parseBytes(text, ignored))
      return {};
    return withNote(what + " is not a byte count");
  }
  case Check::CudaArch:
    if (cudaArchNumber(text) >= 0)
      return {};
    return withNote(what + " is not a CUDA architecture");
  }
  return {};
}

template <typename T>
bool setField(CompileConfig &config, llvm::StringRef flag, const T &value,
              const Origin &origin) {
  const OptionRow *r = findRow(flag);
  if (!r)
    return false;
  auto *member = std::get_if<T CompileConfig::*>(&r->field);
  if (!member)
    return false;
  config.*(*member) = value;
  config.origins[flag] = origin;
  return true;
}

} // namespace

llvm::StringRef sourceName(Source source) {
  switch (source) {
  case Source::Default:
    return "default";
  case Source::Flag:
    return "flag";
  case Source::DsConfig:
    return "ds-config";
  }
  return "default";
}

Origin CompileConfig::origin(llvm::StringRef flag) const {
  auto it = origins.find(flag);
  return it == origins.end() ? Origin{} : it->second;
}

int64_t cudaArchNumber(const std::string &text) {
  llvm::StringRef s(text);
  if (!s.consume_front("sm_"))
    return -1;
  s.consume_back("a");
  int64_t n = 0;
  // Two or three digits: sm_80 ... sm_120.
  if (s.size() < 2 || s.size() > 3 || s.getAsInteger(10, n) || n < 10)
    return -1;
  return n;
}

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

void CompileFlagSet::addTo(CLI::App &app, CompileConfig &config,
                           unsigned groups) {
  for (const OptionRow &r : table()) {
    if (!(r.group & groups))
      continue;
    CLI::Option *opt = std::visit(
        [&](auto member) -> CLI::Option * {
          using T = std::decay_t<decltype(config.*member)>;
          if constexpr (std::is_same_v<T, bool>)
            return app.add_flag(r.flag, config.*member, r.help);
          else
            return app.add_option(r.flag, config.*member, r.help);
        },
        r.field);
    options.emplace_back(r.flag, opt);
  }
}

void CompileFlagSet::recordFlagOrigins(CLI::App &app,
                                       CompileConfig &config) const {
  for (const auto &[flag, opt] : options)
    if (opt->count() > 0)
      config.origins[flag] = Origin{Source::Flag, ""};
  CLI::Option *batch = nullptr;
  try {
    batch = app.get_option("--batch");
  } catch (const CLI::OptionNotFound &) {
  }
  if (batch && batch->count() > 0)
    config.origins["--batch"] = Origin{Source::Flag, ""};
}

bool setInteger(CompileConfig &config, llvm::StringRef flag, int64_t value,
                const Origin &origin) {
  return setField<int64_t>(config, flag, value, origin);
}
bool setNumber(CompileConfig &config, llvm::StringRef flag, double value,
               const Origin &origin) {
  return setField<double>(config, flag, value, origin);
}
bool setText(CompileConfig &config, llvm::StringRef flag,
             const std::string &value, const Origin &origin) {
  return setField<std::string>(config, flag, value, origin);
}
bool setBool(CompileConfig &config, llvm::StringRef flag, bool value,
             const Origin &origin) {
  return setField<bool>(config, flag, value, origin);
}

std::string settingText(const CompileConfig &config,
                        const CommonOptions &common, llvm::StringRef flag) {
  if (flag == "--batch")
    return common.import.batch < 0 ? "(the model's)"
                                   : std::to_string(common.import.batch);
  if (flag == "--world")
    return std::to_string(config.worldSize());
  const OptionRow *r = findRow(flag);
  return r ? valueText(config, *r, /*quote=*/false) : "";
}

std::vector<std::string> reportedSettings(const CompileConfig &config) {
  std::vector<std::string> flags;
  for (const OptionRow &r : table()) {
    if (r.group == kOutput || (r.trainOnly && !config.train))
      continue;
    flags.push_back(r.flag);
    if (r.flag == "--world")
      flags.push_back("--batch");
  }
  return flags;
}

std::string describeSetting(const CompileConfig &config,
                            const CommonOptions &common, llvm::StringRef flag) {
  if (flag == "--batch") {
    Origin o = config.origin(flag);
    std::string value = settingText(config, common, flag);
    if (o.source == Source::DsConfig)
      return config.dsConfig + ": " + o.field + " = " + value + " (--batch)";
    return "--batch " + value;
  }
  const OptionRow *r = findRow(flag);
  return r ? describe(config, *r) : flag.str();
}

std::string validateConfig(const CompileConfig &f, const CommonOptions &o,
                           ByteLimits &limits, bool needOutput) {
  if (needOutput) {
    if (o.output.empty())
      return "no output: give the plan file with -o PLAN";
    if (llvm::sys::fs::is_directory(o.output))
      return "-o '" + o.output + "' is a directory";
  }
  for (const OptionRow &r : table()) {
    // A setting nobody gave keeps its default, which is valid by
    // construction (--world 0 means "as many as --tp").
    if (f.origin(r.flag).source == Source::Default)
      continue;
    std::string err = checkRow(f, r);
    if (!err.empty())
      return err;
  }
  int64_t world = f.worldSize();
  if (world % f.tp != 0)
    return "--world " + std::to_string(world) + " is not a multiple of --tp " +
           std::to_string(f.tp) + " (world = tp x dp)";
  if (!f.gpuMem.empty())
    parseBytes(f.gpuMem, limits.gpuMem);
  if (!f.hostMem.empty())
    parseBytes(f.hostMem, limits.hostMem);
  parseBytes(f.cudaContextBytes, limits.cudaContext);
  limits.commOverride = f.commReserveBytes != "auto";
  if (limits.commOverride)
    parseBytes(f.commReserveBytes, limits.commReserve);
  parseBytes(f.commBytesPerGroup, limits.commPerGroup);
  parseBytes(f.linkBandwidth, limits.linkBandwidth);
  parseBytes(f.nvmeBandwidth, limits.nvmeBandwidth);
  const bool nvme = f.offloadParam == "nvme" || f.offloadOptimizer == "nvme";
  if (nvme && f.nvmePath.empty())
    return describeSetting(f, o,
                           f.offloadParam == "nvme" ? "--offload-param"
                                                    : "--offload-optimizer") +
           " needs --nvme-path DIR: the folder of the NVMe files";
  if (!nvme && !f.nvmePath.empty())
    return describeSetting(f, o, "--nvme-path") +
           " needs --offload-param nvme or --offload-optimizer nvme";
  if (limits.nvmeBandwidth == 0)
    return "--nvme-bandwidth must be more than 0 bytes per second";

  for (const char *flag : {"--cuda-arch", "--attention-kernel"})
    if (f.origin(flag).source != Source::Default && f.target != "cuda")
      return describeSetting(f, o, flag) +
             " needs --target cuda (the cpu target has one attention kernel)";
  if (const zk::cuda::AttentionKernel *k =
          zk::cuda::attention_kernel(f.attentionKernel.c_str())) {
    const int64_t arch = cudaArchNumber(f.cudaArch);
    if (!zk::cuda::attention_kernel_runs_on(*k, int(arch / 10), int(arch % 10)))
      return describeSetting(f, o, "--attention-kernel") + " needs " +
             zk::cuda::attention_kernel_needs(*k) + ", but --cuda-arch is " +
             f.cudaArch;
  }
  int64_t dp = world / f.tp;
  int64_t batch = o.import.batch;
  if (batch == 0)
    return describeSetting(f, o, "--batch") + " must be at least 1";
  if (batch > 0 && batch % dp != 0)
    return describeSetting(f, o, "--batch") +
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
    if (batch < 0 && dp > 1)
      return "--generate over dp = " + std::to_string(dp) +
             " ranks needs --batch (a multiple of dp)";
  } else if (f.maxSeq != 0) {
    return "--max-seq needs --generate";
  } else {
    // The decode program's fusions: nothing to fuse without one.
    for (const char *flag : {"--decode-fusion", "--decode-layer"})
      if (f.origin(flag).source != Source::Default)
        return std::string(flag) + " needs --generate";
  }
  if (!f.train) {
    for (const OptionRow &r : table())
      if (r.trainOnly && f.origin(r.flag).source != Source::Default)
        return (f.origin(r.flag).source == Source::DsConfig ? describe(f, r)
                                                            : r.flag) +
               " needs --train" +
               (r.trainNote.empty() ? "" : " (" + r.trainNote + ")");
    return {};
  }
  bool scaleGiven = false;
  for (const char *flag : {"--loss-scale", "--initial-loss-scale",
                           "--loss-scale-window", "--loss-scale-min"})
    scaleGiven |= f.origin(flag).source != Source::Default;
  if (scaleGiven && f.dtype != "fp16")
    return "--loss-scale, --initial-loss-scale, --loss-scale-window and "
           "--loss-scale-min need --dtype fp16 (only fp16 gradients need a "
           "loss scale)";
  if (!std::isfinite(f.lossScale))
    return "--loss-scale must be 0 (dynamic) or a positive finite scale";
  if (!(f.initialLossScale > 0) || !std::isfinite(f.initialLossScale) ||
      !(f.lossScaleMin > 0) || f.lossScaleMin > f.initialLossScale)
    return "--initial-loss-scale and --loss-scale-min must be positive, "
           "with --loss-scale-min <= --initial-loss-scale";
  if (f.recompute == "auto" && f.gpuMem.empty())
    return "--recompute auto picks the least recomputation that fits "
           "--gpu-mem: pass --gpu-mem";
  if (f.offloadOptimizer != "none" && f.zero == 0 && dp > 1)
    return "--offload-optimizer " + f.offloadOptimizer + " over dp = " +
           std::to_string(dp) +
           " needs --zero 1 or more (each rank updates its part on its host)";
  if (f.offloadParam == "nvme" &&
      (f.zero != 3 || dp < 2 || f.offloadOptimizer == "none"))
    return describeSetting(f, o, "--offload-param") +
           " with --train needs --zero 3 over dp > 1 (the parameters kept "
           "on NVMe are the ZeRO-3 shards) and --offload-optimizer cpu or "
           "nvme (the shards are updated on the host)";
  if (f.offloadParam == "cpu")
    return describeSetting(f, o, "--offload-param") +
           " with --train is not built yet (the training step keeps "
           "parameters on the device; --offload-optimizer cpu moves the "
           "optimizer state to the host)";
  if ((f.warmupSteps != 0 || f.totalSteps != 0) && f.lrSchedule == "constant")
    return "--warmup-steps and --total-steps need --lr-schedule warmup or "
           "warmup-decay";
  if (f.lrSchedule == "warmup" && (f.warmupSteps < 0 || f.totalSteps != 0))
    return "--lr-schedule warmup needs --warmup-steps >= 0 and no "
           "--total-steps (the rate stays at --lr after the warmup)";
  if (f.lrSchedule == "warmup-decay" &&
      (f.warmupSteps < 0 || f.totalSteps <= f.warmupSteps))
    return "--lr-schedule warmup-decay needs 0 <= --warmup-steps < "
           "--total-steps";
  if (batch > 0 && batch % (dp * f.microBatches) != 0)
    return describeSetting(f, o, "--batch") + " does not split into " +
           std::to_string(f.microBatches) +
           " micro-batches on each of dp = " + std::to_string(dp) + " ranks";
  return {};
}

} // namespace zplan::driver
