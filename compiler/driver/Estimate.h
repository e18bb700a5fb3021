//===- Estimate.h - zplan estimate ------------------------------*- C++ -*-===//
//
// `zplan estimate MODEL.onnx --world N [--batch B --seq S] [--gpu-mem X]
// [--train] [--json]` compiles every configuration of ZeRO stage x tp x
// offload (x recompute with --train) in this process and prints what each
// plan holds per GPU and per host, its planned peak, its communication per
// step and whether it fits --gpu-mem. The figures are the plans' own: each
// row is the report of the plan `zplan` would write for the same flags.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_ESTIMATE_H
#define ZPLAN_COMPILER_DRIVER_ESTIMATE_H

#include "compiler/driver/Compile.h"
#include "compiler/driver/Options.h"

namespace CLI {
class App;
} // namespace CLI

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace zplan::driver {

struct EstimateOptions {
  /// The settings every row shares (dtype, target, training...); the
  /// estimator sets tp, zero, world, offload and recompute per row.
  CompileConfig base;
  int64_t world = 0;
  /// Ranks per host: the per-host figures are per rank times this (default:
  /// every rank on one host, as DeepSpeed's "per CPU" with one node).
  int64_t gpusPerNode = 0;
  bool json = false;
  /// Show progress on stderr: "auto" (when it is a terminal), "on" or "off".
  std::string progress = "auto";
};

/// Adds the estimator's own flags (and the table's plan flags) to `cmd`.
void addEstimateFlags(CLI::App &cmd, EstimateOptions &options,
                      CompileFlagSet &flags);

/// Runs the estimator; returns the process exit code. The table (or JSON)
/// goes to -o or stdout.
int estimateCommand(mlir::MLIRContext &context, const CommonOptions &common,
                    EstimateOptions &options);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_ESTIMATE_H
