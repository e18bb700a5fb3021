//===- fuzz_compile.cpp - libFuzzer target: ONNX bytes -> the whole zplan ---===//
//
// A model is untrusted input to every phase, not only to the importer: a graph
// the importer accepts still reaches recognition, tensor-parallel propagation
// and partition, ZeRO, the schedule, the memory plan and plan emission. This
// target runs the zplan command line itself (zplan::driver::run) on each
// input, with a mesh picked from the input's size so that tp 1 / 2 and ZeRO 0
// / 3 all get inputs: `zplan model.onnx --batch 2 --seq 8 --graph-only --tp T
// --world W --zero Z -o plan`. Any crash, sanitizer report or hang is a
// finding; an error exit is the expected outcome for most inputs.
//
// zplan prints its diagnostics on stderr; they go to a file during the call
// (unless ZPLAN_FUZZ_VERBOSE is set, as triage.sh does when it replays a
// crash), and the first error line is the refusal's message. An exit status
// other than 0, 1 or 2, a refusal without an error line, a refusal that
// leaves a plan behind or a success without one is a finding: the target
// aborts (fuzz_common.h, "Outcomes").
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Driver.h"
#include "fuzz_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::string gDir;

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  gDir = zfuzz::make_dir("compile");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string model = gDir + "/model.onnx", plan = gDir + "/plan.zplan";
  zfuzz::write_file(model, data, size);
  const int tp = 1 + int(size % 2), dp = 1 + int((size / 2) % 2);
  const std::string tpS = std::to_string(tp), worldS = std::to_string(tp * dp),
                    zeroS = dp > 1 ? "3" : "0";
  std::vector<std::string> args = {"zplan",  model,  "--batch", "2",
                                   "--seq",  "8",    "--graph-only",
                                   "--tp",   tpS,    "--world", worldS,
                                   "--zero", zeroS,  "-o",      plan};
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  unlink(plan.c_str());
  zfuzz::StderrTo capture(gDir + "/stderr.txt");
  const int rc = zplan::driver::run(int(args.size()), argv.data());
  const std::string err = zfuzz::first_error_line(capture.take());
  struct stat st;
  const bool wrote = stat(plan.c_str(), &st) == 0;
  unlink(plan.c_str());
  if (rc == 0) {
    if (!wrote)
      zfuzz::unexpected("fuzz_compile", "zplan exited 0 but wrote no plan");
    zfuzz::accepted();
    return 0;
  }
  if (rc != 1 && rc != 2)
    zfuzz::unexpected("fuzz_compile",
                      "zplan exited " + std::to_string(rc) + "; errors exit 1 or 2");
  if (wrote)
    zfuzz::unexpected("fuzz_compile", "zplan failed but left a plan behind");
  // Without ZPLAN_FUZZ_VERBOSE the diagnostics were captured: a refusal must
  // say why.
  if (err.empty() && !std::getenv("ZPLAN_FUZZ_VERBOSE"))
    zfuzz::unexpected("fuzz_compile", "zplan failed without an error message");
  zfuzz::refused(err);
  return 0;
}
