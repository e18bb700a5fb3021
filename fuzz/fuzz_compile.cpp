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
// zplan prints its diagnostics on stderr; they are silenced (fd 2 points at
// /dev/null during the call) unless ZPLAN_FUZZ_VERBOSE is set, as triage.sh
// does when it replays a crash.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Driver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::string gDir;
bool gQuiet = true;

void writeFile(const std::string &path, const uint8_t *data, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (n && std::fwrite(data, 1, n, f) != n) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = std::string(base) + "/zplan-fuzz-compile-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    std::abort();
  }
  gDir = tmpl;
  gQuiet = std::getenv("ZPLAN_FUZZ_VERBOSE") == nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string model = gDir + "/model.onnx", plan = gDir + "/plan.zplan";
  writeFile(model, data, size);
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

  int saved = -1;
  if (gQuiet) {
    std::fflush(stderr);
    saved = dup(2);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
  }
  (void)zplan::driver::run(int(args.size()), argv.data());
  if (gQuiet) {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
  }
  unlink(plan.c_str());
  return 0;
}
