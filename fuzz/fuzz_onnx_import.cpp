//===- fuzz_onnx_import.cpp - libFuzzer target: ONNX bytes -> importer ----===//
//
// Feeds arbitrary bytes to the ONNX importer (zplan::import::importOnnxFile)
// and, when the import succeeds, to the recognition pipeline. Any crash,
// sanitizer report, abort or hang is a finding: a model file is untrusted
// input and must only ever produce a diagnostic.
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

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {

std::string gDir;

/// Writes `n` bytes to `path`, replacing it; aborts on failure, since a
/// fuzzer that cannot write its input tests nothing.
void writeFile(const std::string &path, const uint8_t *data, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (n && std::fwrite(data, 1, n, f) != n) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // /dev/shm keeps the per-input file write off the disk.
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = std::string(base) + "/zplan-fuzz-onnx-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    std::abort();
  }
  gDir = tmpl;
  std::string blob(4096, '\0');
  for (size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<char>(i * 37 + 11);
  writeFile(gDir + "/data.bin",
            reinterpret_cast<const uint8_t *>(blob.data()), blob.size());
  // The link target lives outside the folder: a location that names the link
  // must be refused (the importer compares real paths).
  writeFile(gDir + ".outside",
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
  writeFile(model, data, size);

  // A fresh context per input: interned names and types of one input must
  // not grow the next one's memory.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  // Diagnostics are the expected outcome for almost every input; keep them
  // off stderr so that the fuzzer's own output stays readable.
  mlir::ScopedDiagnosticHandler quiet(&context,
                                      [](mlir::Diagnostic &) {
                                        return mlir::success();
                                      });
  zplan::import::ImportOptions opts;
  opts.batch = 2;
  opts.seq = 8;
  // Graph-only import keeps inputs whose external files are absent on the
  // interesting path; the location and range checks still run.
  opts.allowMissingData = true;
  auto module = zplan::import::importOnnxFile(context, model, opts);
  if (!module)
    return 0;
  mlir::PassManager pm(&context);
  zplan::transforms::buildRecognitionPipeline(pm);
  (void)pm.run(*module);
  return 0;
}
