//===- DsConfig.cpp - Settings from a DeepSpeed JSON config ---------------===//
//
// --ds-config FILE. The file is parsed with llvm::json; each object of the
// config has a table of the keys DeepSpeed documents, each key either mapped
// onto a zplan setting (by flag name, through Options.h) or named as ignored
// with the reason. Keys nobody knows are named as unknown. docs/ds-config.md
// lists every field and what zplan does with it.
//
// DeepSpeed's stage-3 sizes count parameters (elements); zplan's count bytes
// of the graph's weights as the sharding passes see them, which are the
// model's fp32 weights (--dtype applies later, at the memory plan), so one
// element is 4 bytes here.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/DsConfig.h"

#include <iostream>
#include "compiler/driver/Compile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <functional>
#include <optional>
#include <sstream>

namespace zplan::driver {
namespace {

using llvm::StringRef;
using llvm::json::Object;
using llvm::json::Value;

/// Bytes per parameter element in the graph the sharding passes plan.
constexpr int64_t kParamElementBytes = 4;

std::string numberText(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// The value as the config wrote it, for messages.
std::string jsonText(const Value &v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << v;
  return os.str();
}

bool isAuto(const Value &v) {
  std::optional<StringRef> s = v.getAsString();
  return s && *s == "auto";
}

/// Keys of an object in a fixed (sorted) order, so that messages come out
/// the same way every run.
std::vector<std::string> sortedKeys(const Object &obj) {
  std::vector<std::string> keys;
  for (const auto &kv : obj)
    keys.push_back(StringRef(kv.first).str());
  llvm::sort(keys);
  return keys;
}

std::string join(StringRef path, StringRef key) {
  return path.empty() ? key.str() : (path + "." + key).str();
}

class Reader {
public:
  Reader(CompileConfig &config, CommonOptions &common, DsConfigResult &out)
      : c(config), common(common), out(out) {}

  void run(const Object &top);

private:
  using Handler = std::function<void(const Value &, const std::string &)>;
  struct Rule {
    StringRef key;
    Handler handle;
  };

  // ---- messages -----------------------------------------------------------
  void warn(StringRef path, const std::string &msg) {
    out.warnings.push_back(c.dsConfig + ": " + path.str() + ": " + msg);
  }
  void note(StringRef path, const std::string &msg) {
    out.notes.push_back(c.dsConfig + ": " + path.str() + ": " + msg);
  }
  void fail(StringRef path, const std::string &msg) {
    if (out.error.empty())
      out.error = c.dsConfig + ": " + path.str() + ": " + msg;
  }
  bool failed() const { return !out.error.empty(); }

  // ---- typed reads (a wrong type is an error naming the field) -----------
  std::optional<int64_t> integer(const Value &v, StringRef path) {
    if (std::optional<int64_t> i = v.getAsInteger())
      return i;
    fail(path, "expected an integer, got " + jsonText(v));
    return std::nullopt;
  }
  std::optional<double> number(const Value &v, StringRef path) {
    if (std::optional<double> d = v.getAsNumber())
      return d;
    fail(path, "expected a number, got " + jsonText(v));
    return std::nullopt;
  }
  std::optional<bool> boolean(const Value &v, StringRef path) {
    if (std::optional<bool> b = v.getAsBoolean())
      return b;
    fail(path, "expected true or false, got " + jsonText(v));
    return std::nullopt;
  }
  std::optional<std::string> text(const Value &v, StringRef path) {
    if (std::optional<StringRef> s = v.getAsString())
      return s->str();
    fail(path, "expected a string, got " + jsonText(v));
    return std::nullopt;
  }
  const Object *object(const Value &v, StringRef path) {
    if (const Object *o = v.getAsObject())
      return o;
    fail(path, "expected an object, got " + jsonText(v));
    return nullptr;
  }

  // ---- settings -----------------------------------------------------------
  bool flagGiven(StringRef flag) const {
    return c.origin(flag).source == Source::Flag;
  }

  /// Sets `flag` from the config unless the command line gave it; then the
  /// flag wins, and a differing config value is named.
  template <typename Setter>
  void assign(StringRef flag, StringRef path, Setter set,
              const std::string &shown) {
    Origin origin{Source::DsConfig, path.str()};
    if (flagGiven(flag)) {
      CompileConfig probe = c;
      set(probe, origin);
      std::string mine = settingText(c, common, flag);
      std::string theirs = settingText(probe, common, flag);
      if (mine != theirs)
        warn(path, shown + " is overridden by " + flag.str() + " " + mine +
                       " on the command line");
      return;
    }
    set(c, origin);
  }
  void assignInteger(StringRef flag, StringRef path, int64_t v,
                     const std::string &shown) {
    assign(
        flag, path,
        [&](CompileConfig &cfg, const Origin &o) {
          setInteger(cfg, flag, v, o);
        },
        shown);
  }
  void assignNumber(StringRef flag, StringRef path, double v) {
    assign(
        flag, path,
        [&](CompileConfig &cfg, const Origin &o) {
          setNumber(cfg, flag, v, o);
        },
        numberText(v));
  }
  void assignText(StringRef flag, StringRef path, const std::string &v) {
    assign(
        flag, path,
        [&](CompileConfig &cfg, const Origin &o) { setText(cfg, flag, v, o); },
        "\"" + v + "\"");
  }
  /// "auto": the command line's value (or zplan's default) stays; the report
  /// says the config asked for it.
  void keepForAuto(StringRef flag, StringRef path) {
    if (!flagGiven(flag))
      c.origins[flag] = Origin{Source::Default, path.str() + " = auto"};
  }

  // ---- rule tables ----------------------------------------------------------
  /// Runs the rule of each key of `obj`; unknown keys are named.
  void apply(const Object &obj, const std::string &path,
             const std::vector<Rule> &rules) {
    for (const std::string &key : sortedKeys(obj)) {
      if (failed())
        return;
      const Value &v = *obj.get(key);
      std::string p = join(path, key);
      auto rule =
          llvm::find_if(rules, [&](const Rule &r) { return r.key == key; });
      if (rule == rules.end()) {
        // A misspelt field is the usual reason: name the nearest known one.
        std::string hint;
        unsigned best = 3;
        for (const Rule &r : rules) {
          unsigned d = StringRef(key).edit_distance(r.key, true, best);
          if (d < best) {
            best = d;
            hint = " (did you mean \"" + r.key.str() + "\"?)";
          }
        }
        warn(p, "ignored: not a field zplan knows" + hint +
                    "; docs/ds-config.md lists the fields it reads");
        continue;
      }
      rule->handle(v, p);
    }
  }
  /// A field named as ignored, with the reason.
  Handler ignored(std::string reason) {
    return [this, reason](const Value &, const std::string &p) {
      warn(p, "ignored: " + reason);
    };
  }
  /// A boolean whose `ok` value zplan always does (a note); the other value
  /// is ignored with a warning.
  Handler alwaysOn(bool ok, std::string what) {
    return [this, ok, what](const Value &v, const std::string &p) {
      std::optional<bool> b = boolean(v, p);
      if (!b)
        return;
      if (*b == ok)
        note(p, "zplan does this anyway: " + what);
      else
        warn(p, "ignored: " + what);
    };
  }
  /// A boolean that changes what is computed when true: an error.
  Handler refusedWhenTrue(std::string reason) {
    return [this, reason](const Value &v, const std::string &p) {
      std::optional<bool> b = boolean(v, p);
      if (b && *b)
        fail(p, "true is not supported: " + reason);
    };
  }
  /// A training-only block or field outside --train.
  bool needsTrain(StringRef path) {
    if (c.train)
      return true;
    warn(path, "ignored without --train (it configures the training step)");
    return false;
  }

  void readZero(const Value &v, const std::string &p);
  void readOffload(const Value &v, const std::string &p, bool optimizer);
  void readPrecision(const Value &v, const std::string &p, bool fp16);
  void readOptimizer(const Value &v, const std::string &p);
  void readScheduler(const Value &v, const std::string &p);
  void readCheckpointing(const Value &v, const std::string &p);
  void resolveBatch();

  CompileConfig &c;
  CommonOptions &common;
  DsConfigResult &out;

  /// The three batch fields: present, "auto", value, path.
  struct BatchField {
    bool present = false, automatic = false;
    int64_t value = 0;
    std::string path;
  };
  BatchField trainBatch, microBatch, accumulation;
  // The first offload section that named an NVMe folder, and the folder.
  std::string nvmePathField, nvmePathValue;
  bool fp16Enabled = false, bf16Enabled = false;
  std::string fp16Path, bf16Path;
};

// ---- zero_optimization --------------------------------------------------

void Reader::readOffload(const Value &v, const std::string &p, bool optimizer) {
  if (v.getAsNull())
    return;
  const Object *obj = object(v, p);
  if (!obj)
    return;
  const StringRef flag = optimizer ? "--offload-optimizer" : "--offload-param";
  std::string device = "none";
  if (const Value *d = obj->get("device"))
    if (std::optional<std::string> s = text(*d, join(p, "device")))
      device = *s;
  // NVMe offload (docs/nvme.md) needs its folder, as DeepSpeed does; zplan
  // keeps the parameters' and the optimizer's files in one folder.
  if (device == "nvme" && !obj->get("nvme_path")) {
    fail(join(p, "nvme_path"), "device \"nvme\" needs nvme_path (the folder "
                               "of the NVMe files)");
    return;
  }
  const std::string nvmeOnly = "used only with device \"nvme\"";
  const std::string nvmeMachinery =
      "ignored: DeepSpeed's NVMe swapper setting; zplan plans its own "
      "staging buffers (two per stream of reads, each the size of its tensor) "
      "and issues every read one use ahead";
  auto nvmeRule = [&](const std::string &reason) -> Handler {
    return [this, reason, device](const Value &, const std::string &path) {
      warn(path, device == "nvme" ? reason : "ignored: used only with device "
                                             "\"nvme\"");
    };
  };
  std::vector<Rule> rules = {
      {"device",
       [&](const Value &, const std::string &path) {
         if (device != "cpu" && device != "none" && device != "nvme") {
           fail(path, "\"" + device +
                          "\" must be \"none\", \"cpu\" or "
                          "\"nvme\"");
           return;
         }
         if (optimizer && device == "cpu" && !needsTrain(path))
           return;
         assignText(flag, path, device);
       }},
      {"pin_memory",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && !*b)
           warn(path, "ignored: zplan always pins the host memory it "
                      "offloads to (its copies run asynchronously)");
       }},
      {"nvme_path",
       [&](const Value &val, const std::string &path) {
         std::optional<std::string> dir = text(val, path);
         if (!dir)
           return;
         if (device != "nvme") {
           warn(path, "ignored: " + nvmeOnly);
           return;
         }
         if (optimizer && !needsTrain(path))
           return;
         // Both sections may name a folder; zplan has one.
         if (!nvmePathField.empty() && nvmePathValue != *dir) {
           fail(path, "\"" + *dir + "\" differs from " + nvmePathField +
                          " \"" + nvmePathValue +
                          "\": zplan keeps every NVMe file in one folder");
           return;
         }
         nvmePathField = path;
         nvmePathValue = *dir;
         assignText("--nvme-path", path, *dir);
       }},
      {"buffer_count", nvmeRule(nvmeMachinery)},
      {"buffer_size", nvmeRule(nvmeMachinery)},
      {"max_in_cpu",
       nvmeRule("ignored: zplan keeps every offloaded tensor on NVMe (none "
                "stays in host memory)")},
      {"pipeline_read", nvmeRule(nvmeMachinery)},
      {"pipeline_write", nvmeRule(nvmeMachinery)},
      {"fast_init", nvmeRule("ignored: zplan writes the initial values to "
                             "the files once, when the plan is loaded")},
      {"ratio",
       [&](const Value &val, const std::string &path) {
         std::optional<double> r = number(val, path);
         if (r && *r != 1.0)
           warn(path, "ignored: zplan offloads all of the optimizer state "
                      "(no partial offload)");
       }},
      {"super_offload", refusedWhenTrue("SuperOffload's speculative CPU "
                                        "updates are not built")},
      {"cpuadam_cores_perc",
       ignored("zplan's host AdamW uses the rank's own threads")},
  };
  apply(*obj, p, rules);
}

void Reader::readZero(const Value &v, const std::string &p) {
  // DeepSpeed's oldest form: "zero_optimization": true means stage 1.
  if (std::optional<bool> b = v.getAsBoolean()) {
    warn(p, std::string("the boolean form is deprecated in DeepSpeed: read "
                        "as stage ") +
                (*b ? "1" : "0"));
    assignInteger("--zero", p, *b ? 1 : 0, *b ? "true" : "false");
    return;
  }
  const Object *obj = object(v, p);
  if (!obj)
    return;
  // A stage-3 element count mapped onto a zplan byte setting. The prefetch
  // window and the live cap bound the ZeRO-3 gathers of every program, the
  // training step's included (--zplan-prefetch-gathers).
  auto elements = [&](StringRef flag, bool plusOne) {
    return [this, flag, plusOne](const Value &val, const std::string &path) {
      if (isAuto(val)) {
        keepForAuto(flag, path);
        return;
      }
      std::optional<int64_t> n = integer(val, path);
      if (!n)
        return;
      if (*n < 0) {
        fail(path, std::to_string(*n) + " must not be negative");
        return;
      }
      // DeepSpeed keeps a parameter whole when numel <= threshold, zplan when
      // bytes < threshold: (n + 1) elements of bytes is the same rule.
      int64_t bytes = (*n + (plusOne ? 1 : 0)) * kParamElementBytes;
      assignInteger(flag, path, bytes,
                    std::to_string(*n) + " elements (" + std::to_string(bytes) +
                        " bytes)");
    };
  };
  const std::string notHonoured = "changes what is computed, and zplan "
                                  "communicates in the plan's own dtype";
  std::vector<Rule> rules = {
      {"stage",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return keepForAuto("--zero", path);
         if (std::optional<int64_t> s = integer(val, path))
           assignInteger("--zero", path, *s, std::to_string(*s));
       }},
      {"offload_param",
       [&](const Value &val, const std::string &path) {
         readOffload(val, path, /*optimizer=*/false);
       }},
      {"offload_optimizer",
       [&](const Value &val, const std::string &path) {
         readOffload(val, path, /*optimizer=*/true);
       }},
      // DeepSpeed's deprecated spellings of the two offloads.
      {"cpu_offload",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && *b && needsTrain(path))
           assignText("--offload-optimizer", path, "cpu");
       }},
      {"cpu_offload_params",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && *b)
           assignText("--offload-param", path, "cpu");
       }},
      {"cpu_offload_use_pin_memory",
       alwaysOn(true, "offloaded host memory is always pinned")},
      {"reduce_bucket_size",
       ignored("zplan reduces each gradient in one collective as the "
               "schedule places it; the plan's reduction buffers are its "
               "bucket bytes in the report")},
      {"allgather_bucket_size",
       ignored("zplan gathers each parameter (or updated part) in one "
               "collective; the plan sizes its buffers")},
      {"stage3_prefetch_bucket_size",
       elements("--prefetch-bytes", /*plusOne=*/false)},
      {"stage3_max_live_parameters",
       elements("--max-live-bytes", /*plusOne=*/false)},
      {"stage3_param_persistence_threshold",
       elements("--persist-threshold", /*plusOne=*/true)},
      {"stage3_gather_16bit_weights_on_model_save",
       ignored("a zplan plan saves no 16-bit model at save time; its "
               "checkpoints hold the shards")},
      {"stage3_gather_fp16_weights_on_model_save",
       ignored("a zplan plan saves no 16-bit model at save time; its "
               "checkpoints hold the shards")},
      {"contiguous_gradients",
       alwaysOn(true, "the memory plan places every gradient at a planned "
                      "offset, so there is no fragmentation to avoid")},
      {"overlap_comm",
       alwaysOn(true, "collectives run on their own stream and the schedule "
                      "overlaps them with compute")},
      {"reduce_scatter",
       alwaysOn(true, "stages 1-3 reduce-scatter the gradients")},
      {"allgather_partitions",
       alwaysOn(true, "updated parts are all-gathered")},
      {"sub_group_size",
       ignored("zplan updates each parameter's part on its own")},
      {"stage3_max_reuse_distance",
       ignored("the schedule decides when a gathered parameter is released")},
      {"stage3_model_persistence_threshold",
       ignored("zplan's persistence is per parameter "
               "(stage3_param_persistence_threshold)")},
      {"round_robin_gradients",
       ignored("gradient placement is planned ahead of time")},
      {"ignore_unused_parameters",
       ignored("parameters that do not reach the loss get no gradient")},
      {"load_from_fp32_weights",
       ignored("checkpoints are not read through the ds-config")},
      {"elastic_checkpoint",
       ignored("checkpoints are not read through the ds-config")},
      {"memory_efficient_linear", ignored("a DeepSpeed module option")},
      {"use_multi_rank_bucket_allreduce",
       ignored("zplan does not bucket gradients")},
      {"stage3_module_granularity_threshold",
       ignored("zplan gathers per parameter, not per module")},
      {"stage3_use_all_reduce_for_fetch_params",
       ignored("zplan gathers parameters with all-gather")},
      {"stage3_allgather_sequential",
       ignored("the schedule orders the gathers")},
      {"legacy_stage1", ignored("zplan has one stage-1 implementation")},
      {"log_trace_cache_warnings", ignored("a DeepSpeed logging option")},
      {"enable_sanity_checks", ignored("a DeepSpeed debugging option")},
      {"override_module_apply", ignored("a DeepSpeed module option")},
      {"pipeline_loading_checkpoint",
       ignored("checkpoints are not read through the ds-config")},
      {"leaf_module", ignored("zplan gathers per parameter, not per module")},
      {"save_muon_momentum_buffer_in_memory",
       ignored("zplan's optimizer is AdamW")},
      {"zero_hpz_partition_size",
       [&](const Value &val, const std::string &path) {
         std::optional<int64_t> n = integer(val, path);
         if (n && *n > 1)
           warn(path, "ignored: zplan partitions over all dp ranks (no "
                      "secondary hpZ partition)");
       }},
      {"mics_shard_size",
       [&](const Value &val, const std::string &path) {
         std::optional<int64_t> n = integer(val, path);
         if (n && *n > 0)
           warn(path, "ignored: zplan partitions over all dp ranks (no MiCS "
                      "shard groups)");
       }},
      {"mics_hierarchical_params_gather",
       ignored("zplan partitions over all dp ranks")},
      {"zero_quantized_weights", refusedWhenTrue(notHonoured)},
      {"zero_quantized_nontrainable_weights", refusedWhenTrue(notHonoured)},
      {"zero_quantized_gradients", refusedWhenTrue(notHonoured)},
      {"zeropp_loco_param",
       [&](const Value &val, const std::string &path) {
         if (!val.getAsNull())
           fail(path, "is not supported: " + notHonoured);
       }},
      {"zenflow",
       [&](const Value &val, const std::string &path) {
         if (!val.getAsNull())
           fail(path, "is not supported: ZenFlow's delayed updates change "
                      "what each step computes");
       }},
  };
  apply(*obj, p, rules);
}

// ---- fp16 / bf16 ----------------------------------------------------------

void Reader::readPrecision(const Value &v, const std::string &p, bool fp16) {
  const Object *obj = object(v, p);
  if (!obj)
    return;
  bool enabled = false;
  if (const Value *e = obj->get("enabled")) {
    if (isAuto(*e)) {
      // "auto": the command line's --dtype decides.
      enabled = c.dtype == (fp16 ? "fp16" : "bf16");
      keepForAuto("--dtype", join(p, "enabled"));
    } else if (std::optional<bool> b = boolean(*e, join(p, "enabled"))) {
      enabled = *b;
    }
  }
  if (failed())
    return;
  (fp16 ? fp16Enabled : bf16Enabled) = enabled;
  (fp16 ? fp16Path : bf16Path) = join(p, "enabled");
  // The loss scaler's fields (fp16 only): DeepSpeed's dynamic scaler maps onto
  // --loss-scale (0 = dynamic), --initial-loss-scale (2^initial_scale_power),
  // --loss-scale-window and --loss-scale-min. "enabled" sorts before them, so
  // --dtype is decided when they are read.
  auto scalerUsed = [&](const std::string &path) {
    if (!fp16 || !enabled)
      return false;
    if (!c.train) {
      warn(path, "ignored without --train (loss scaling is a training "
                 "setting)");
      return false;
    }
    if (c.dtype != "fp16") {
      warn(path, "ignored: --dtype " + c.dtype +
                     " on the command line has no loss scaling");
      return false;
    }
    return true;
  };
  auto scaleNumber = [&](StringRef flag) {
    return [this, flag, scalerUsed](const Value &val, const std::string &path) {
      if (!scalerUsed(path))
        return;
      if (isAuto(val))
        return keepForAuto(flag, path);
      if (std::optional<double> d = number(val, path))
        assignNumber(flag, path, *d);
    };
  };
  std::vector<Rule> rules = {
      {"enabled",
       [&](const Value &val, const std::string &path) {
         if (!enabled || isAuto(val))
           return;
         assignText("--dtype", path, fp16 ? "fp16" : "bf16");
       }},
      {"auto_cast",
       ignored("zplan casts the whole graph to --dtype (the plan's storage "
               "dtype)")},
      // 0 is DeepSpeed's dynamic scaling, as zplan's --loss-scale 0.
      {"loss_scale",
       [&](const Value &val, const std::string &path) {
         if (!scalerUsed(path))
           return;
         if (isAuto(val))
           return keepForAuto("--loss-scale", path);
         std::optional<double> d = number(val, path);
         if (!d)
           return;
         if (*d < 0 || !std::isfinite(*d)) {
           fail(path, numberText(*d) + " must be 0 (dynamic) or a positive "
                                       "scale");
           return;
         }
         assignNumber("--loss-scale", path, *d);
       }},
      {"initial_scale_power",
       [&](const Value &val, const std::string &path) {
         if (!scalerUsed(path))
           return;
         if (isAuto(val))
           return keepForAuto("--initial-loss-scale", path);
         std::optional<int64_t> n = integer(val, path);
         if (!n)
           return;
         if (*n < 0 || *n > 127) {
           fail(path, std::to_string(*n) +
                          " is out of range: the scale 2^power must be a "
                          "finite fp32 number (0 <= power <= 127)");
           return;
         }
         assign(
             "--initial-loss-scale", path,
             [&](CompileConfig &cfg, const Origin &o) {
               setNumber(cfg, "--initial-loss-scale", std::ldexp(1.0, *n), o);
             },
             "2^" + std::to_string(*n));
       }},
      {"loss_scale_window",
       [&](const Value &val, const std::string &path) {
         if (!scalerUsed(path))
           return;
         if (isAuto(val))
           return keepForAuto("--loss-scale-window", path);
         if (std::optional<int64_t> n = integer(val, path))
           assignInteger("--loss-scale-window", path, *n, std::to_string(*n));
       }},
      {"min_loss_scale", scaleNumber("--loss-scale-min")},
      // DeepSpeed's hysteresis H lowers the scale on the H-th overflow (an
      // overflow before that only skips the step); zplan's scaler lowers it
      // on every overflow, which is DeepSpeed's hysteresis 1.
      {"hysteresis",
       [&](const Value &val, const std::string &path) {
         if (!scalerUsed(path) || isAuto(val))
           return;
         std::optional<int64_t> n = integer(val, path);
         if (n && *n != 1)
           warn(path, std::to_string(*n) +
                          " is not built: zplan halves the scale on every "
                          "overflow (hysteresis 1), so it drops sooner than "
                          "DeepSpeed's; overflowing steps are skipped either "
                          "way");
       }},
      {"consecutive_hysteresis",
       [&](const Value &val, const std::string &path) {
         if (!scalerUsed(path))
           return;
         std::optional<bool> b = boolean(val, path);
         if (b && *b)
           warn(path, "ignored: it resets a hysteresis above 1, and zplan's "
                      "is 1");
       }},
      {"raise_error_at_min_scale",
       ignored("zplan keeps training at --loss-scale-min, skipping the "
               "steps that overflow")},
      {"fp16_master_weights_and_grads",
       refusedWhenTrue("zplan keeps fp32 master weights and reduces "
                       "gradients in fp32")},
      {"bf16_master_weights_and_grads",
       refusedWhenTrue("zplan keeps fp32 master weights and reduces "
                       "gradients in fp32")},
      {"bf16_optimizer_states",
       refusedWhenTrue("zplan keeps AdamW's moments in fp32")},
      {"immediate_grad_update",
       ignored("the schedule places each gradient's reduction")},
      {"check_grad_overflow",
       ignored("bf16 needs no overflow check; zplan checks fp16 gradients "
               "for overflow whenever it scales the loss")},
  };
  apply(*obj, p, rules);
  // DeepSpeed's default hysteresis is 2 when the block does not name it.
  if (!failed() && fp16 && enabled && c.train && c.dtype == "fp16" &&
      !obj->get("hysteresis") && c.lossScale == 0)
    warn(join(p, "hysteresis"),
         "absent, DeepSpeed's default 2: zplan halves the scale on every "
         "overflow (hysteresis 1), so it drops sooner than DeepSpeed's");
}

// ---- optimizer and scheduler ----------------------------------------------

void Reader::readOptimizer(const Value &v, const std::string &p) {
  const Object *obj = object(v, p);
  if (!obj || !needsTrain(p))
    return;
  std::string type;
  if (const Value *t = obj->get("type"))
    if (std::optional<std::string> s = text(*t, join(p, "type")))
      type = StringRef(*s).lower();
  if (failed())
    return;
  // DeepSpeed's "Adam" is AdamW unless params.adam_w_mode is false.
  if (type != "adamw" && type != "adam") {
    fail(join(p, "type"),
         "\"" + type +
             "\" is not supported: zplan's training step uses "
             "AdamW (\"AdamW\", or \"Adam\" with adam_w_mode true)");
    return;
  }
  std::vector<Rule> paramRules = {
      {"lr",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return keepForAuto("--lr", path);
         if (std::optional<double> d = number(val, path))
           assignNumber("--lr", path, *d);
       }},
      {"betas",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val)) {
           keepForAuto("--beta1", path);
           keepForAuto("--beta2", path);
           return;
         }
         const llvm::json::Array *a = val.getAsArray();
         if (!a || a->size() != 2) {
           fail(path, "expected [beta1, beta2], got " + jsonText(val));
           return;
         }
         std::optional<double> b1 = number((*a)[0], path + "[0]");
         std::optional<double> b2 = number((*a)[1], path + "[1]");
         if (b1 && b2) {
           assignNumber("--beta1", path + "[0]", *b1);
           assignNumber("--beta2", path + "[1]", *b2);
         }
       }},
      {"eps",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return keepForAuto("--eps", path);
         if (std::optional<double> d = number(val, path))
           assignNumber("--eps", path, *d);
       }},
      {"weight_decay",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return keepForAuto("--weight-decay", path);
         if (std::optional<double> d = number(val, path))
           assignNumber("--weight-decay", path, *d);
       }},
      {"adam_w_mode",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && !*b && type == "adam")
           fail(path, "false (Adam with L2 regularisation) is not supported: "
                      "zplan's update is AdamW's decoupled weight decay");
       }},
      {"torch_adam",
       ignored("an implementation choice; zplan runs its own AdamW")},
      {"fused", ignored("an implementation choice; zplan runs its own AdamW")},
      {"bias_correction",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && !*b)
           fail(path, "false is not supported: zplan's AdamW always "
                      "corrects the moments' bias");
       }},
      {"amsgrad", refusedWhenTrue("zplan's AdamW keeps no maximum of the "
                                  "second moment")},
      {"fp32_optimizer_states", alwaysOn(true, "AdamW's moments are fp32")},
  };
  std::vector<Rule> rules = {
      {"type", [](const Value &, const std::string &) {}},
      {"params",
       [&](const Value &val, const std::string &path) {
         if (const Object *params = object(val, path))
           apply(*params, path, paramRules);
       }},
  };
  apply(*obj, p, rules);
}

void Reader::readScheduler(const Value &v, const std::string &p) {
  const Object *obj = object(v, p);
  if (!obj || !needsTrain(p))
    return;
  if (flagGiven("--lr-schedule")) {
    warn(p, "overridden by --lr-schedule " + c.lrSchedule +
                " on the command line");
    return;
  }
  std::string type;
  if (const Value *t = obj->get("type"))
    if (std::optional<std::string> s = text(*t, join(p, "type")))
      type = *s;
  if (failed())
    return;
  if (type != "WarmupDecayLR" && type != "WarmupLR") {
    fail(join(p, "type"),
         "\"" + type +
             "\" is not supported: zplan's schedules are constant, warmup "
             "(WarmupLR) and warmup-decay (WarmupDecayLR)");
    return;
  }
  // WarmupLR warms up and then holds the rate; WarmupDecayLR then decays it
  // to 0 at total_num_steps. Both take the same warmup fields.
  const bool decays = type == "WarmupDecayLR";
  const Object *params = nullptr;
  if (const Value *pv = obj->get("params"))
    params = object(*pv, join(p, "params"));
  if (failed())
    return;
  std::string pp = join(p, "params");
  // DeepSpeed's defaults where the config is silent.
  std::string warmupType = "log";
  if (params)
    if (const Value *wt = params->get("warmup_type"))
      if (std::optional<std::string> s = text(*wt, join(pp, "warmup_type")))
        warmupType = *s;
  if (failed())
    return;
  if (warmupType != "linear") {
    fail(join(pp, "warmup_type"),
         "\"" + warmupType +
             "\" is not supported (DeepSpeed's default is \"log\"): zplan "
             "warms up linearly; set \"warmup_type\": \"linear\"");
    return;
  }
  assignText("--lr-schedule", join(p, "type"),
             decays ? "warmup-decay" : "warmup");
  bool haveTotal = false;
  std::vector<Rule> rules = {
      {"warmup_type", [](const Value &, const std::string &) {}},
      {"warmup_min_lr",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return;
         std::optional<double> d = number(val, path);
         if (d && *d != 0.0)
           fail(path, numberText(*d) + " is not supported: zplan's warmup "
                                       "starts from 0");
       }},
      {"warmup_max_lr",
       [&](const Value &val, const std::string &path) {
         // The scheduler sets the rate DeepSpeed's optimizer runs at.
         if (isAuto(val))
           return keepForAuto("--lr", path);
         if (std::optional<double> d = number(val, path))
           assignNumber("--lr", path, *d);
       }},
      {"warmup_num_steps",
       [&](const Value &val, const std::string &path) {
         if (isAuto(val))
           return keepForAuto("--warmup-steps", path);
         if (std::optional<int64_t> n = integer(val, path))
           // DeepSpeed warms up over at least 2 steps.
           assignInteger("--warmup-steps", path, std::max<int64_t>(2, *n),
                         std::to_string(*n));
       }},
      {"total_num_steps",
       [&](const Value &val, const std::string &path) {
         if (!decays) {
           warn(path, "ignored: WarmupLR holds the rate after the warmup "
                      "(only WarmupDecayLR reads it)");
           return;
         }
         haveTotal = true;
         if (isAuto(val))
           return keepForAuto("--total-steps", path);
         if (std::optional<int64_t> n = integer(val, path))
           assignInteger("--total-steps", path, *n, std::to_string(*n));
       }},
      {"last_batch_iteration",
       [&](const Value &val, const std::string &path) {
         std::optional<int64_t> n = integer(val, path);
         if (n && *n != -1)
           fail(path, "resuming a schedule from the config is not "
                      "supported (zrun passes the step)");
       }},
  };
  if (params)
    apply(*params, pp, rules);
  if (failed())
    return;
  // WarmupLR and WarmupDecayLR pass their own default peak rate (0.001) to
  // the optimizer, whatever the optimizer block said.
  if (!params || !params->get("warmup_max_lr"))
    assign(
        "--lr", join(pp, "warmup_max_lr") + " (absent: DeepSpeed's default)",
        [&](CompileConfig &cfg, const Origin &o) {
          setNumber(cfg, "--lr", 0.001, o);
        },
        "0.001 (DeepSpeed's default)");
  if (!params || !params->get("warmup_num_steps"))
    assignInteger("--warmup-steps",
                  join(pp, "warmup_num_steps") +
                      " (absent: DeepSpeed's default)",
                  1000, "1000 (DeepSpeed's default)");
  if (decays && !haveTotal && !flagGiven("--total-steps"))
    fail(join(pp, "total_num_steps"),
         "missing: WarmupDecayLR needs the step at which the rate reaches 0");
  if (failed())
    return;
  // DeepSpeed's engine steps the scheduler after each optimizer step, from
  // an initial rate of warmup_min_lr: its step k (1-based) runs at
  // factor(k - 2). zplan's step k runs at factor(k).
  warn(p, std::string("zplan's step k (1-based) runs at lr x ") +
              (decays ? "min(k / warmup, (total - k) / (total - warmup))"
                      : "min(k / warmup, 1)") +
              "; DeepSpeed's engine steps its scheduler after each update, "
              "so its step k runs at the factor of k - 2: zplan's rates lead "
              "DeepSpeed's by two steps");
}

// ---- activation_checkpointing ----------------------------------------------

/// DeepSpeed's block configures deepspeed.checkpointing.checkpoint(), which
/// a model calls around each layer it wants recomputed (Megatron and the
/// Hugging Face models wrap every transformer layer). zplan has no calls to
/// wrap: the block's presence maps to --recompute full, each layer
/// recomputed from its input in the backward. Its fields tune where the kept
/// inputs live; zplan plans them in the device arena.
void Reader::readCheckpointing(const Value &v, const std::string &p) {
  const Object *obj = object(v, p);
  if (!obj || !needsTrain(p))
    return;
  assign(
      "--recompute", p,
      [&](CompileConfig &cfg, const Origin &o) {
        setText(cfg, "--recompute", "full", o);
      },
      "\"full\" (each layer recomputed from its input)");
  std::vector<Rule> rules = {
      {"partition_activations",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && *b)
           warn(path, "ignored: zplan keeps each layer's input whole on "
                      "every tp rank (not split over the tp ranks)");
       }},
      {"cpu_checkpointing",
       [&](const Value &val, const std::string &path) {
         std::optional<bool> b = boolean(val, path);
         if (b && *b)
           warn(path, "ignored: the kept layer inputs stay in device memory "
                      "(moving them to the host is not built)");
       }},
      {"contiguous_memory_optimization",
       alwaysOn(true, "the memory plan places the kept inputs at planned "
                      "offsets of one arena")},
      {"number_checkpoints",
       ignored("zplan recomputes every layer (found from the graph), not a "
               "given number of them")},
      {"synchronize_checkpoint_boundary",
       ignored("the plan's stream order decides; there is no host "
               "synchronisation to add")},
      {"profile", ignored("monitoring and logging are zrun's")},
  };
  apply(*obj, p, rules);
}

// ---- the batch arithmetic -------------------------------------------------

void Reader::resolveBatch() {
  std::vector<BatchField *> fields = {&trainBatch, &microBatch, &accumulation};
  bool any = llvm::any_of(fields, [](BatchField *f) { return f->present; });
  if (!any)
    return;
  for (BatchField *f : fields)
    if (f->present && !f->automatic && f->value <= 0) {
      fail(f->path, std::to_string(f->value) + " must be greater than 0");
      return;
    }
  const int64_t dp = c.dpSize();
  const std::string dpText = "dp " + std::to_string(dp) + " (--world " +
                             std::to_string(c.worldSize()) + " / --tp " +
                             std::to_string(c.tp) + ")";
  const bool batchFlag = flagGiven("--batch");
  const bool accFlag = flagGiven("--micro-batches");
  std::optional<int64_t> T, m, G;
  std::string tFrom = trainBatch.path, gFrom = accumulation.path;
  if (batchFlag)
    T = common.import.batch;
  else if (trainBatch.present && !trainBatch.automatic)
    T = trainBatch.value;
  if (accFlag)
    G = c.microBatches;
  else if (accumulation.present && !accumulation.automatic)
    G = accumulation.value;
  if (microBatch.present && !microBatch.automatic)
    m = microBatch.value;
  if (batchFlag && trainBatch.present && !trainBatch.automatic &&
      trainBatch.value != *T)
    warn(trainBatch.path, std::to_string(trainBatch.value) +
                              " is overridden by --batch " +
                              std::to_string(*T) + " on the command line");
  if (accFlag && accumulation.present && !accumulation.automatic &&
      accumulation.value != *G)
    warn(accumulation.path, std::to_string(accumulation.value) +
                                " is overridden by --micro-batches " +
                                std::to_string(*G) + " on the command line");

  // All three known: DeepSpeed's check. When a flag replaced one of them,
  // the flags win and the micro batch follows from them.
  if (T && m && G && *T != *m * *G * dp) {
    if (batchFlag || accFlag) {
      warn(microBatch.path, std::to_string(*m) +
                                " does not agree with the command line "
                                "(--batch " +
                                std::to_string(*T) + ", --micro-batches " +
                                std::to_string(*G) + ", " + dpText +
                                "): the flags win");
      m.reset();
    } else {
      fail(trainBatch.path,
           std::to_string(*T) + " != train_micro_batch_size_per_gpu " +
               std::to_string(*m) + " x gradient_accumulation_steps " +
               std::to_string(*G) + " x " + dpText + " = " +
               std::to_string(*m * *G * dp) +
               " (DeepSpeed requires train_batch_size = micro batch x "
               "accumulation steps x data-parallel size)");
      return;
    }
  }
  // DeepSpeed's completion rules (floor division, then the same check).
  std::string derived;
  if (T && m && !G) {
    G = *T / *m / dp;
    gFrom = trainBatch.path + " / (" + microBatch.path + " x dp)";
    derived = "gradient_accumulation_steps";
  } else if (T && G && !m) {
    m = *T / dp / *G;
  } else if (m && G && !T) {
    T = *m * *G * dp;
    tFrom = microBatch.path + " x " + accumulation.path + " x dp";
    derived = "train_batch_size";
  } else if (T && !m && !G) {
    G = 1;
    m = *T / dp;
    gFrom = "";
  } else if (m && !T && !G) {
    G = 1;
    T = *m * dp;
    tFrom = microBatch.path + " x dp";
    gFrom = "";
    derived = "train_batch_size";
  } else if (!T && !m) {
    // Only the accumulation steps (or nothing but "auto"): the command
    // line's --batch (or the model's own batch) stays.
    if (G && !accFlag)
      assignInteger("--micro-batches", accumulation.path, *G,
                    std::to_string(*G));
    return;
  }
  if (*G <= 0 || *m <= 0 || *T != *m * *G * dp) {
    const std::string &blame = !derived.empty() && !microBatch.path.empty()
                                   ? microBatch.path
                               : !trainBatch.path.empty() ? trainBatch.path
                               : !microBatch.path.empty() ? microBatch.path
                                                          : accumulation.path;
    fail(blame, "the batch does not split: train_batch_size " +
                    std::to_string(*T) + ", train_micro_batch_size_per_gpu " +
                    std::to_string(*m) + ", gradient_accumulation_steps " +
                    std::to_string(*G) + ", " + dpText +
                    " (DeepSpeed requires train_batch_size = micro batch x "
                    "accumulation steps x data-parallel size)");
    return;
  }
  if (!batchFlag) {
    common.import.batch = *T;
    c.origins["--batch"] = Origin{Source::DsConfig, tFrom};
  }
  if (!accFlag) {
    c.microBatches = *G;
    // One accumulation step because the config left it out (or "auto") is
    // zplan's default too.
    if (!gFrom.empty())
      c.origins["--micro-batches"] = Origin{Source::DsConfig, gFrom};
    else if (accumulation.automatic)
      keepForAuto("--micro-batches", accumulation.path);
  }
}

void Reader::run(const Object &top) {
  auto batchField = [&](BatchField &f) {
    return [this, &f](const Value &v, const std::string &p) {
      if (!c.train) {
        warn(p, "ignored without --train (the batch of a forward plan is "
                "--batch)");
        return;
      }
      f.present = true;
      f.path = p;
      if (isAuto(v)) {
        f.automatic = true;
        return;
      }
      if (std::optional<int64_t> n = integer(v, p))
        f.value = *n;
    };
  };
  const std::string monitoring =
      "monitoring and logging are zrun's (--report, its timing lines)";
  std::vector<Rule> rules = {
      {"train_batch_size", batchField(trainBatch)},
      {"train_micro_batch_size_per_gpu", batchField(microBatch)},
      {"gradient_accumulation_steps", batchField(accumulation)},
      {"gradient_clipping",
       [&](const Value &v, const std::string &p) {
         if (!needsTrain(p))
           return;
         if (isAuto(v))
           return keepForAuto("--clip-grad", p);
         if (std::optional<double> d = number(v, p))
           assignNumber("--clip-grad", p, *d);
       }},
      {"zero_optimization",
       [&](const Value &v, const std::string &p) { readZero(v, p); }},
      {"fp16",
       [&](const Value &v, const std::string &p) {
         readPrecision(v, p, /*fp16=*/true);
       }},
      {"bf16",
       [&](const Value &v, const std::string &p) {
         readPrecision(v, p, /*fp16=*/false);
       }},
      // DeepSpeed's older name of the bf16 block.
      {"bfloat16",
       [&](const Value &v, const std::string &p) {
         readPrecision(v, p, /*fp16=*/false);
       }},
      {"optimizer",
       [&](const Value &v, const std::string &p) { readOptimizer(v, p); }},
      {"scheduler",
       [&](const Value &v, const std::string &p) { readScheduler(v, p); }},
      {"zero_allow_untested_optimizer",
       ignored("zplan's optimizer is its own AdamW")},
      {"zero_force_ds_cpu_optimizer",
       ignored("zplan's host optimizer is its own AdamW")},
      {"steps_per_print", ignored(monitoring)},
      {"wall_clock_breakdown", ignored(monitoring)},
      {"dump_state", ignored(monitoring)},
      {"memory_breakdown", ignored(monitoring)},
      {"tensorboard", ignored(monitoring)},
      {"wandb", ignored(monitoring)},
      {"csv_monitor", ignored(monitoring)},
      {"comet", ignored(monitoring)},
      {"flops_profiler", ignored(monitoring)},
      {"comms_logger", ignored(monitoring)},
      {"timers", ignored(monitoring)},
      {"prescale_gradients",
       ignored("zplan averages gradients over dp as one sum x 1/dp")},
      {"gradient_predivide_factor",
       ignored("zplan averages gradients over dp as one sum x 1/dp")},
      {"gradient_allreduce_op",
       [&](const Value &v, const std::string &p) {
         std::optional<std::string> s = text(v, p);
         if (s && *s != "mean")
           fail(p, "\"" + *s +
                       "\" is not supported: zplan averages "
                       "gradients over dp (\"mean\")");
       }},
      {"communication_data_type",
       [&](const Value &v, const std::string &p) {
         if (v.getAsNull())
           return;
         std::optional<std::string> s = text(v, p);
         if (s && *s != "fp32")
           warn(p, "ignored: zplan reduces gradients in fp32 (also under "
                   "bf16)");
       }},
      {"data_types", ignored("zplan accumulates gradients in fp32")},
      {"activation_checkpointing",
       [&](const Value &v, const std::string &p) { readCheckpointing(v, p); }},
      {"sparse_gradients", ignored("zplan's gradients are dense")},
      {"checkpoint", ignored("checkpoints are not read through the "
                             "ds-config")},
      {"aio", ignored("DeepSpeed's libaio settings; zrun's NVMe I/O uses "
                      "direct I/O with --nvme-threads threads")},
      {"amp",
       [&](const Value &v, const std::string &p) {
         const Object *o = v.getAsObject();
         const Value *e = o ? o->get("enabled") : nullptr;
         if (e && e->getAsBoolean().value_or(false))
           fail(p, "Apex AMP is not supported: use \"bf16\" (or --dtype)");
       }},
      {"torch_autocast",
       [&](const Value &v, const std::string &p) {
         const Object *o = v.getAsObject();
         const Value *e = o ? o->get("enabled") : nullptr;
         if (e && e->getAsBoolean().value_or(false))
           fail(p, "torch.autocast is not supported: zplan casts the whole "
                   "graph; use \"bf16\" (or --dtype)");
       }},
      {"elasticity",
       [&](const Value &v, const std::string &p) {
         const Object *o = v.getAsObject();
         const Value *e = o ? o->get("enabled") : nullptr;
         if (e && e->getAsBoolean().value_or(false))
           fail(p, "elastic training changes the batch at run time; a zplan "
                   "plan is compiled for one world size");
       }},
      {"sequence_parallel_size",
       [&](const Value &v, const std::string &p) {
         std::optional<int64_t> n = integer(v, p);
         if (n && *n > 1)
           fail(p, "sequence parallelism is not supported: zplan's mesh is "
                   "tp x dp");
       }},
      {"pipeline", ignored("zplan has no pipeline parallelism")},
      {"autotuning", ignored("zplan's plans are computed, not tuned")},
      {"compression_training",
       ignored("compression is not part of a zplan plan")},
      {"data_efficiency", ignored("data sampling is the caller's")},
      {"curriculum_learning", ignored("data sampling is the caller's")},
      {"train_steps", ignored("zrun --steps decides")},
  };
  apply(top, "", rules);
  if (failed())
    return;
  if (fp16Enabled && bf16Enabled) {
    fail(fp16Path, "fp16 and bf16 are both enabled (" + bf16Path + ")");
    return;
  }
  resolveBatch();
}

} // namespace

DsConfigResult applyDsConfig(CompileConfig &config, CommonOptions &common) {
  DsConfigResult result;
  const std::string &file = config.dsConfig;
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer) {
    result.error = "cannot read --ds-config '" + file +
                   "': " + buffer.getError().message();
    return result;
  }
  llvm::Expected<Value> parsed = llvm::json::parse((*buffer)->getBuffer());
  if (!parsed) {
    result.error =
        file + ": not valid JSON: " + llvm::toString(parsed.takeError());
    return result;
  }
  const Object *top = parsed->getAsObject();
  if (!top) {
    result.error = file + ": the config must be a JSON object";
    return result;
  }
  Reader(config, common, result).run(*top);
  return result;
}

bool applyDsConfigPrinting(CompileConfig &config, CommonOptions &common) {
  DsConfigResult ds = applyDsConfig(config, common);
  for (const std::string &n : ds.notes)
    std::cerr << "zplan: note: " << n << "\n";
  for (const std::string &w : ds.warnings)
    std::cerr << "zplan: warning: " << w << "\n";
  if (!ds.error.empty()) {
    std::cerr << "zplan: error: " << ds.error << "\n";
    return false;
  }
  return true;
}

} // namespace zplan::driver
