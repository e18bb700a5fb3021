//===- Consolidate.h - zplan consolidate ------------------------*- C++ -*-===//
//
// zplan consolidate CHECKPOINT [-o OUT] [--model MODEL.onnx]
//                   [--format onnx|safetensors [--hf-names]] [--no-progress]
//
// Writes the full trained parameters of a sharded checkpoint
// (docs/checkpoint-format.md), tensor by tensor, either into the source ONNX
// model (the model with every trained initializer as external data in
// OUT.data) or as a safetensors file.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_DRIVER_CONSOLIDATE_H
#define ZPLAN_COMPILER_DRIVER_CONSOLIDATE_H

#include <string>

namespace CLI {
class App;
} // namespace CLI

namespace zplan::driver {

struct ConsolidateOptions {
  std::string checkpoint;
  std::string output;
  std::string model;
  std::string format = "onnx";
  bool hfNames = false;
  bool noProgress = false;
};

/// Declares the `consolidate` subcommand on `app`; returns it so that the
/// caller can tell whether it was given.
CLI::App *addConsolidateCommand(CLI::App &app, ConsolidateOptions &opts);

/// Runs it; returns the process exit code.
int consolidateCommand(const ConsolidateOptions &opts);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_CONSOLIDATE_H
