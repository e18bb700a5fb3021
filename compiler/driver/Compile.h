//===- Compile.h - the compile path of zplan --------------------*- C++ -*-===//
//
// `zplan MODEL.onnx --tp N --zero Z ... -o PLAN` is implemented by the
// planner (compiler/driver/Compile.cpp); Driver.cpp parses the options every
// command shares and calls in here.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_COMPILE_H
#define ZPLAN_COMPILER_DRIVER_COMPILE_H

#include "compiler/import/Import.h"

#include <string>

namespace CLI {
class App;
} // namespace CLI

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace zplan::driver {

/// What Driver.cpp parses for every command.
struct CommonOptions {
  std::string model;          ///< path of the .onnx file
  std::string output;         ///< -o; empty when not given
  import::ImportOptions import; ///< --batch, --seq, --dim, --graph-only
};

/// Adds the compile path's own flags (--tp, --zero, ...) to the top-level
/// command. Called once, before parsing.
void addCompileFlags(CLI::App &app);

/// Runs the compile path; returns the process exit code. Diagnostics go to
/// stderr; no output file is left behind on failure.
int compileCommand(mlir::MLIRContext &context, const CommonOptions &options);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_COMPILE_H
