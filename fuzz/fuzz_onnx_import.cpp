//===- fuzz_onnx_import.cpp - libFuzzer target: ONNX bytes -> importer ----===//
//
// Feeds arbitrary bytes to the ONNX importer (zplan::import::importOnnxFile)
// and, when the import succeeds, to the recognition pipeline. Any crash,
// sanitizer report, abort or hang is a finding: a model file is untrusted
// input and must only ever produce a diagnostic. So is a refusal without an
// error diagnostic, or an accepted module that fails the MLIR verifier: the
// target aborts on those (fuzz_common.h, "Outcomes").
//
// The importer reads models from disk (it resolves external data against the
// model's folder), so every input is written to `model.onnx` in a private
// temporary folder. That folder also holds `data.bin` (4 KiB), which
// external-data references can name, and `escape.bin`, a symbolic link to a
// file outside the folder, which the importer must refuse to follow.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Import.h"
#include "compiler/transforms/Passes.h"

#include "fuzz_common.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

using zfuzz::write_file;

namespace {

std::string gDir;

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // /dev/shm keeps the per-input file write off the disk.
  gDir = zfuzz::make_dir("onnx");
  std::string blob(4096, '\0');
  for (size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<char>(i * 37 + 11);
  write_file(gDir + "/data.bin",
            reinterpret_cast<const uint8_t *>(blob.data()), blob.size());
  // The link target lives outside the folder: a location that names the link
  // must be refused (the importer compares real paths).
  write_file(gDir + ".outside",
            reinterpret_cast<const uint8_t *>(blob.data()), blob.size());
  if (symlink((gDir + ".outside").c_str(), (gDir + "/escape.bin").c_str()) !=
      0) {
    std::perror("symlink");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string model = gDir + "/model.onnx";
  write_file(model, data, size);

  // A fresh context per input: interned names and types of one input must
  // not grow the next one's memory.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  // Diagnostics are the expected outcome for almost every input; keep them
  // off stderr so that the fuzzer's own output stays readable, and keep the
  // first error as the refusal's message.
  std::string firstError;
  mlir::ScopedDiagnosticHandler quiet(
      &context, [&](mlir::Diagnostic &diag) {
        if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
            firstError.empty())
          firstError = diag.str();
        return mlir::success();
      });
  zplan::import::ImportOptions opts;
  opts.batch = 2;
  opts.seq = 8;
  // Graph-only import keeps inputs whose external files are absent on the
  // interesting path; the location and range checks still run.
  opts.allowMissingData = true;
  auto module = zplan::import::importOnnxFile(context, model, opts);
  if (!module) {
    if (firstError.empty())
      zfuzz::unexpected("fuzz_onnx_import",
                        "the import failed without an error diagnostic");
    zfuzz::refused(firstError);
    return 0;
  }
  if (mlir::failed(mlir::verify(*module)))
    zfuzz::unexpected("fuzz_onnx_import",
                      "the imported module fails the MLIR verifier");
  mlir::PassManager pm(&context);
  zplan::transforms::buildRecognitionPipeline(pm);
  if (mlir::failed(pm.run(*module))) {
    if (firstError.empty())
      zfuzz::unexpected("fuzz_onnx_import",
                        "recognition failed without an error diagnostic");
    zfuzz::refused(firstError);
    return 0;
  }
  zfuzz::accepted();
  return 0;
}
