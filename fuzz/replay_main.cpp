// replay_main.cpp - runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer.
//
//   TARGET_replay FILE_OR_DIR...
//
// The normal (gcc, no sanitizer) build links each fuzz target with this main, so that CI replays the
// crash-regression inputs and the seeds through exactly the code the fuzzer ran, on machines without
// clang. A crash or abort ends the process with a signal, which ctest reports as a failure.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

void collect(const std::string &path, std::vector<std::string> *files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "replay: cannot stat '%s'\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  DIR *d = opendir(path.c_str());
  if (!d) {
    std::fprintf(stderr, "replay: cannot open folder '%s'\n", path.c_str());
    std::exit(2);
  }
  std::vector<std::string> names;
  while (dirent *e = readdir(d)) {
    const std::string n = e->d_name;
    // README and other notes beside the inputs are not inputs.
    if (n == "." || n == ".." || n.size() > 3 && n.compare(n.size() - 3, 3, ".md") == 0) continue;
    names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string &n : names) collect(path + "/" + n, files);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) collect(argv[i], &files);
  LLVMFuzzerInitialize(&argc, &argv);
  for (const std::string &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", files.size());
  return 0;
}
