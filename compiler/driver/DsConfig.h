//===- DsConfig.h - Settings from a DeepSpeed JSON config -------*- C++ -*-===//
//
// `zplan MODEL.onnx --ds-config ds_config.json` reads the fields of a
// DeepSpeed config that have a zplan setting (docs/ds-config.md): the ZeRO
// stage and offload, the stage-3 knobs, the batch arithmetic, clipping,
// bf16 / fp16, AdamW's parameters and the warmup schedules. A flag given on
// the command line wins over the config; "auto" takes the command line's
// value. Every field zplan does not honour is named with the reason: a
// warning when the plan computes the same thing anyway, an error when the
// field changes what training computes and zplan cannot do it.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_DSCONFIG_H
#define ZPLAN_COMPILER_DRIVER_DSCONFIG_H

#include "compiler/driver/Options.h"

#include <string>
#include <vector>

namespace zplan::driver {

struct CommonOptions;

struct DsConfigResult {
  /// "FILE: FIELD: ..." lines, in field order: fields ignored or overridden.
  std::vector<std::string> warnings;
  /// "FILE: FIELD: ...": fields that already do what the config asks.
  std::vector<std::string> notes;
  /// The first field zplan cannot honour (or a file that does not parse);
  /// empty when the config was applied.
  std::string error;
};

/// Reads `config.dsConfig` and sets every setting whose flag was not given
/// (config.origins says which were), recording Source::DsConfig with the
/// field. --batch lands in `common`.
DsConfigResult applyDsConfig(CompileConfig &config, CommonOptions &common);

/// applyDsConfig, with its notes and warnings printed on stderr the way the
/// command line prints them ("zplan: note: ..."); prints the error and
/// returns false when the config cannot be honoured.
bool applyDsConfigPrinting(CompileConfig &config, CommonOptions &common);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_DSCONFIG_H
