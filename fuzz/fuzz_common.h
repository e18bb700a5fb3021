// fuzz_common.h - the set-up every fuzz target shares: a private scratch folder, writing an input to a
// file, silencing or capturing stderr, and the outcome of the last input.
//
// Outcomes. Each target classifies each input as accepted or refused (with the first error message); an
// input that fits neither (a refusal without a message, an output left behind by a refusal, an accepted
// result that breaks an invariant) is a finding: unexpected() reports it and aborts, which libFuzzer
// records as a crash and the replay tool as a failure. The replay tool (replay_main.cpp) compares the
// outcome of each regression input with the outcome its folder's expected.txt documents.
#ifndef ZPLAN_FUZZ_COMMON_H
#define ZPLAN_FUZZ_COMMON_H

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace zfuzz {

struct Outcome {
  bool recorded = false;
  bool accepted = false;
  std::string message;  // the first error of a refusal
};

/// The outcome of the input the target ran last (one per process: the targets are not reentrant).
inline Outcome &last_outcome() {
  static Outcome o;
  return o;
}

inline void accepted() { last_outcome() = Outcome{true, true, ""}; }
inline void refused(const std::string &message) { last_outcome() = Outcome{true, false, message}; }

/// An outcome that no correct loader produces: reported, then abort().
[[noreturn]] inline void unexpected(const char *target, const std::string &what) {
  std::fprintf(stderr, "%s: unexpected outcome: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// A fresh folder under /dev/shm (or /tmp) for one target's files: zplan-fuzz-TAG-XXXXXX.
inline std::string make_dir(const char *tag) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = std::string(base) + "/zplan-fuzz-" + tag + "-XXXXXX";
  if (!mkdtemp(&tmpl[0])) {
    std::perror("mkdtemp");
    std::abort();
  }
  return tmpl;
}

/// Writes `n` bytes to `path`, replacing it; aborts on failure, since a target that cannot write its input
/// tests nothing.
inline void write_file(const std::string &path, const uint8_t *data, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (n && std::fwrite(data, 1, n, f) != n) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

/// Sends fd 2 to `path` (truncated) for its lifetime, so that a tool's diagnostics can be read back
/// instead of flooding the fuzzer's output; ZPLAN_FUZZ_VERBOSE leaves stderr alone (triage.sh).
class StderrTo {
 public:
  explicit StderrTo(const std::string &path) : path_(path) {
    if (std::getenv("ZPLAN_FUZZ_VERBOSE")) return;
    std::fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
  }
  ~StderrTo() { restore(); }
  /// Restores stderr and returns what was written to it.
  std::string take() {
    restore();
    std::ifstream in(path_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

/// The first line of `text` that contains "error", without a trailing location; "" when there is none.
inline std::string first_error_line(const std::string &text) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (line.find("error") != std::string::npos) return line;
    at = end + 1;
  }
  return "";
}

}  // namespace zfuzz

#endif  // ZPLAN_FUZZ_COMMON_H
