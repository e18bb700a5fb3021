//===- Driver.cpp - the zplan command line --------------------------------===//
//
// zplan import MODEL.onnx [--batch B] [--seq S] [--dim NAME=V]... [-o OUT]
//     imports the model, runs the recognition pipeline and prints the zg
//     graph as MLIR.
// zplan estimate MODEL.onnx --world N ...
//     compiles every ZeRO stage x tp x offload configuration and prints what
//     each plan holds (compiler/driver/Estimate.cpp).
// zplan MODEL.onnx --tp N ... -o PLAN
//     the compile path (compiler/driver/Compile.cpp); its flags are the
//     table in compiler/driver/Options.cpp.
// zplan consolidate CHECKPOINT [-o OUT] [--format onnx|safetensors]
//     the trained model of a checkpoint (compiler/driver/Consolidate.cpp).
//
// Output is written only after everything succeeded, so a failing run never
// leaves a partial file behind.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Driver.h"
#include "compiler/driver/Compile.h"
#include "compiler/driver/Consolidate.h"
#include "compiler/driver/Estimate.h"
#include "compiler/driver/InitAll.h"
#include "compiler/generate/Generate.h"
#include "compiler/import/Import.h"
#include "compiler/transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <iostream>

using namespace zplan;

namespace {

/// Adds the flags every command shares to `cmd`.
void addCommonFlags(CLI::App &cmd, driver::CommonOptions &opts,
                    std::vector<std::string> &dims) {
  cmd.add_option("-o,--output", opts.output, "Output file");
  cmd.add_option("--batch", opts.import.batch,
                 "Batch size: binds the dim named 'batch', else dim 0 of the "
                 "first integer graph input")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--seq", opts.import.seq,
                 "Sequence length: binds the dim named 'seq', else dim 1 of "
                 "the first integer graph input")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--dim", dims, "Bind a symbolic dim: NAME=VALUE (repeatable)");
  cmd.add_flag("--graph-only", opts.import.allowMissingData,
               "Accept external-data files that are not present (the plan "
               "refers to them by name; without this flag a missing file is "
               "an error)");
}

/// Parses NAME=VALUE pairs into the import options.
bool parseDims(const std::vector<std::string> &dims,
               driver::CommonOptions &opts) {
  for (const std::string &d : dims) {
    size_t eq = d.find('=');
    llvm::StringRef value = eq == std::string::npos
                                ? llvm::StringRef()
                                : llvm::StringRef(d).substr(eq + 1);
    int64_t v;
    if (eq == std::string::npos || eq == 0 || value.getAsInteger(10, v) ||
        v < 0) {
      std::cerr << "zplan: --dim '" << d
                << "' is not NAME=VALUE with a non-negative integer VALUE\n";
      return false;
    }
    opts.import.dims[d.substr(0, eq)] = v;
  }
  return true;
}

/// Prints one diagnostic as "FILE: severity: message" (or
/// "FILE:LINE:COL: ..." for a location in an MLIR file).
void printDiagnostic(mlir::Diagnostic &diag) {
  std::string where;
  mlir::Location loc = diag.getLocation();
  if (auto name = mlir::dyn_cast<mlir::NameLoc>(loc))
    loc = name.getChildLoc();
  if (auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc)) {
    where = file.getFilename().str();
    if (file.getLine() != 0)
      where += ":" + std::to_string(file.getLine()) + ":" +
               std::to_string(file.getColumn());
    where += ": ";
  }
  const char *sev = "error";
  switch (diag.getSeverity()) {
  case mlir::DiagnosticSeverity::Warning:
    sev = "warning";
    break;
  case mlir::DiagnosticSeverity::Note:
    sev = "note";
    break;
  case mlir::DiagnosticSeverity::Remark:
    sev = "remark";
    break;
  default:
    break;
  }
  llvm::errs() << where << sev << ": " << diag.str() << "\n";
}

int importCommand(mlir::MLIRContext &context, const driver::CommonOptions &opts,
                  bool recognise, int64_t generateMaxSeq) {
  // --generate --max-seq L: the generation module (@prefill, @decode) that
  // zplan --generate plans, before sharding.
  if (generateMaxSeq > 0) {
    import::ImportOptions io = opts.import;
    if (io.batch < 0)
      io.batch = 1;
    auto module =
        generate::importForGeneration(context, opts.model, io, generateMaxSeq);
    if (!module)
      return 1;
    module->print(llvm::outs());
    return 0;
  }
  auto module = import::importOnnxFile(context, opts.model, opts.import);
  if (!module)
    return 1;
  if (recognise) {
    mlir::PassManager pm(&context);
    transforms::buildRecognitionPipeline(pm);
    if (mlir::failed(pm.run(*module)))
      return 1;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  os.flush();
  if (opts.output.empty() || opts.output == "-") {
    llvm::outs() << text;
    return 0;
  }
  std::string err;
  auto out = mlir::openOutputFile(opts.output, &err);
  if (!out) {
    std::cerr << "zplan: cannot write '" << opts.output << "': " << err << "\n";
    return 1;
  }
  out->os() << text;
  out->keep();
  return 0;
}

} // namespace

int driver::run(int argc, char **argv) {
  CLI::App app{"zplan: ahead-of-time sharding planner for transformers"};
  app.require_subcommand(0, 1);
  CommonOptions compileOpts, importOpts, estimateOpts;
  std::vector<std::string> compileDims, importDims, estimateDims;
  bool noRecognise = false;
  CompileConfig compileConfig;
  CompileFlagSet compileFlags, estimateFlags;
  EstimateOptions estimate;

  CLI::App *imp = app.add_subcommand(
      "import", "Import an ONNX model and print the recognised zg graph");
  imp->add_option("model", importOpts.model, "ONNX model")->required();
  addCommonFlags(*imp, importOpts, importDims);
  imp->add_flag("--no-recognise", noRecognise,
                "Print the graph before the recognition passes");
  bool importGenerate = false;
  int64_t importMaxSeq = 0;
  imp->add_flag("--generate", importGenerate,
                "Print the generation module (@prefill, @decode) of "
                "--max-seq positions");
  imp->add_option("--max-seq", importMaxSeq,
                  "--generate: positions of the KV cache");

  driver::ConsolidateOptions consolidateOpts;
  CLI::App *consolidate = driver::addConsolidateCommand(app, consolidateOpts);

  CLI::App *est = app.add_subcommand(
      "estimate", "Compile every ZeRO stage x tp x offload configuration and "
                  "print each plan's memory and communication");
  est->add_option("model", estimateOpts.model, "ONNX model")->required();
  addCommonFlags(*est, estimateOpts, estimateDims);
  addEstimateFlags(*est, estimate, estimateFlags);

  app.add_option("model", compileOpts.model, "ONNX model to compile");
  addCommonFlags(app, compileOpts, compileDims);
  compileFlags.addTo(app, compileConfig, kSwept | kPlan | kOutput);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }

  if (consolidate->parsed())
    return driver::consolidateCommand(consolidateOpts);

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Diagnostics read "FILE: error: message": the importer locates them at
  // the model file (and names the node in the message); ops created from a
  // node carry its name as well.
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &diag) {
    printDiagnostic(diag);
    for (mlir::Diagnostic &note : diag.getNotes())
      printDiagnostic(note);
    return mlir::success();
  });

  if (imp->parsed()) {
    if (!parseDims(importDims, importOpts))
      return 2;
    if (importGenerate != (importMaxSeq > 0)) {
      std::cerr << "zplan import: --generate and --max-seq L (L >= 1) go "
                   "together\n";
      return 2;
    }
    return importCommand(context, importOpts, !noRecognise,
                         importGenerate ? importMaxSeq : 0);
  }
  if (est->parsed()) {
    if (!parseDims(estimateDims, estimateOpts))
      return 2;
    estimateFlags.recordFlagOrigins(*est, estimate.base);
    return estimateCommand(context, estimateOpts, estimate);
  }
  if (compileOpts.model.empty()) {
    std::cerr << app.help();
    return 2;
  }
  if (!parseDims(compileDims, compileOpts))
    return 2;
  compileFlags.recordFlagOrigins(app, compileConfig);
  return compileCommand(context, compileOpts, compileConfig);
}
