// replay_main.cpp - runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer.
//
//   TARGET_replay FILE_OR_DIR...
//
// The normal (gcc, no sanitizer) build and the sanitizer stage of CI (clang, ASan + UBSan) link each fuzz
// target with this main, so that they replay the crash-regression inputs and the seeds through exactly the
// code the fuzzer ran. A crash, a sanitizer report or an unexpected outcome (fuzz_common.h) ends the
// process with a signal. A folder that holds expected.txt documents the outcome of each of its inputs:
//
//   NAME accept            the input must be accepted
//   NAME refuse REGEX      it must be refused, with a first error that REGEX (ECMAScript) finds
//
// (blank lines and lines starting with # are notes). Every input of such a folder must be listed, and
// every listed input must exist; a mismatch is reported and the exit status is 1.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

struct Expected {
  bool accept = false;
  std::string regex;
  bool seen = false;
};
// Folder -> input name -> its documented outcome.
std::map<std::string, std::map<std::string, Expected>> g_expected;

bool read_expected(const std::string &dir) {
  std::ifstream in(dir + "/expected.txt");
  if (!in) return false;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, what;
    ls >> name >> what;
    Expected e;
    if (what == "accept") {
      e.accept = true;
    } else if (what == "refuse") {
      std::getline(ls >> std::ws, e.regex);
    } else {
      std::fprintf(stderr, "replay: %s/expected.txt:%d: expected 'accept' or 'refuse', got '%s'\n", dir.c_str(), n,
                   what.c_str());
      std::exit(2);
    }
    g_expected[dir][name] = e;
  }
  return true;
}

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
    if (n == "." || n == ".." || n == "expected.txt" || (n.size() > 3 && n.compare(n.size() - 3, 3, ".md") == 0))
      continue;
    names.push_back(n);
  }
  closedir(d);
  read_expected(path);
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
  int mismatches = 0, checked = 0;
  for (const std::string &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    zfuzz::last_outcome() = zfuzz::Outcome{};
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    const size_t slash = f.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : f.substr(0, slash), name = f.substr(slash + 1);
    auto folder = g_expected.find(dir);
    if (folder == g_expected.end()) continue;
    const zfuzz::Outcome &o = zfuzz::last_outcome();
    auto e = folder->second.find(name);
    std::string bad;
    if (e == folder->second.end()) {
      bad = "no documented outcome in " + dir + "/expected.txt";
    } else {
      e->second.seen = true;
      ++checked;
      if (!o.recorded) bad = "the target recorded no outcome";
      else if (e->second.accept && !o.accepted) bad = "expected accepted, got refused: " + o.message;
      else if (!e->second.accept && o.accepted) bad = "expected refused (/" + e->second.regex + "/), got accepted";
      else if (!e->second.accept && !std::regex_search(o.message, std::regex(e->second.regex)))
        bad = "expected a refusal matching /" + e->second.regex + "/, got: " + o.message;
    }
    if (!bad.empty()) {
      std::fprintf(stderr, "replay: MISMATCH %s: %s\n", f.c_str(), bad.c_str());
      ++mismatches;
    }
  }
  for (const auto &folder : g_expected)
    for (const auto &e : folder.second)
      if (!e.second.seen) {
        std::fprintf(stderr, "replay: MISMATCH %s/expected.txt lists '%s', which is not there\n", folder.first.c_str(),
                     e.first.c_str());
        ++mismatches;
      }
  std::printf("replay: %zu inputs, no crash; %d outcomes checked against expected.txt, %d mismatches\n", files.size(),
              checked, mismatches);
  return mismatches ? 1 : 0;
}
