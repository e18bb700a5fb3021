//===- Compile.h - the compile path of zplan --------------------*- C++ -*-===//
//
// `zplan MODEL.onnx --tp N --zero Z ... -o PLAN` is implemented by the
// planner (compiler/driver/Compile.cpp); Driver.cpp parses the options every
// command shares and calls in here. compilePlan() is the pipeline itself,
// shared with `zplan estimate` (Estimate.cpp), which compiles many
// configurations in one process.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_COMPILE_H
#define ZPLAN_COMPILER_DRIVER_COMPILE_H

#include "compiler/driver/Options.h"
#include "compiler/import/Import.h"
#include "compiler/plan/EmitPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace zplan::driver {

/// What Driver.cpp parses for every command.
struct CommonOptions {
  std::string model;            ///< path of the .onnx file
  std::string output;           ///< -o; empty when not given
  import::ImportOptions import; ///< --batch, --seq, --dim, --graph-only
};

/// One compiled plan, in memory.
struct CompiledPlan {
  std::vector<uint8_t> payload;
  plan::PlanSummary summary;
  /// Seconds spent importing, in the passes and emitting.
  double importSeconds = 0, passSeconds = 0, emitSeconds = 0;
};

/// Imported modules by the batch they were imported at, so that a caller
/// compiling many configurations of one model imports it once per batch.
struct ImportCache {
  std::map<int64_t, mlir::OwningOpRef<mlir::ModuleOp>> modules;
};

/// Runs the pipeline for a validated config (validateConfig()) and emits the
/// plan in memory; diagnostics go to the context's handlers. `cache`: reuse
/// imports across calls. `figuresOnly`: the caller wants the summary, not a
/// runnable payload (EmitOptions::figuresOnly). Returns failure after a
/// diagnostic.
mlir::FailureOr<CompiledPlan>
compilePlan(mlir::MLIRContext &context, const CommonOptions &options,
            const CompileConfig &config, const ByteLimits &limits,
            ImportCache *cache = nullptr, bool figuresOnly = false);

/// `zplan MODEL.onnx ...`: reads --ds-config, validates, compiles, writes the
/// plan (and the JSON report) atomically and prints the report; returns the
/// process exit code. Diagnostics go to stderr; no output file is left
/// behind on failure.
int compileCommand(mlir::MLIRContext &context, const CommonOptions &options,
                   CompileConfig &config);

/// The equivalent command line of a configuration (the plan's producer
/// string, and the estimator's rows).
std::string commandLine(const CompileConfig &config,
                        const CommonOptions &options);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_COMPILE_H
