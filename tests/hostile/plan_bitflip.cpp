// plan_bitflip.cpp - flips bits of a real plan file and checks that the runtime's loader refuses every
// damaged copy before anything runs.
//
//   hostile_plan_bitflip PLAN --all-bits     every bit of the file, one at a time
//   hostile_plan_bitflip PLAN --every-byte   one bit of every byte (bit index = byte offset mod 8)
//
// Each damaged image goes through zrt::Session::open_buffer, the loader zrun uses (zrun reads the file and
// opens it the same way), with the plan's own folder as the base of its weight paths. The undamaged plan
// must open (the control); every damaged one must fail with a message. Exit 0 when all are refused, else 1
// with the offending offsets. MPI starts once, in this process, as a one-rank job.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zrt/zrt.h"

int main(int argc, char **argv) {
  if (argc != 3 || (std::string(argv[2]) != "--all-bits" && std::string(argv[2]) != "--every-byte")) {
    std::fprintf(stderr, "usage: %s PLAN --all-bits|--every-byte\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const bool all_bits = std::string(argv[2]) == "--all-bits";
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> plan((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (plan.empty()) {
    std::fprintf(stderr, "cannot read plan '%s'\n", path.c_str());
    return 2;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);

  zrt::Options opts;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(plan.data(), plan.size(), dir, opts, &s);
  if (!st.ok()) {
    std::fprintf(stderr, "FAIL: the undamaged plan does not open: %s\n", st.message().c_str());
    return 1;
  }
  s.reset();

  // Messages are grouped by their first words, so that the summary shows which check caught what.
  std::map<std::string, size_t> caught_by;
  std::vector<std::string> missed;
  size_t tried = 0;
  std::vector<uint8_t> damaged = plan;
  for (size_t byte = 0; byte < plan.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      if (!all_bits && bit != static_cast<int>(byte % 8)) continue;
      damaged[byte] ^= static_cast<uint8_t>(1u << bit);
      st = zrt::Session::open_buffer(damaged.data(), damaged.size(), dir, opts, &s);
      damaged[byte] = plan[byte];
      ++tried;
      if (st.ok() || st.message().empty()) {
        s.reset();
        missed.push_back("byte " + std::to_string(byte) + " bit " + std::to_string(bit));
        continue;
      }
      const std::string &m = st.message();
      const size_t colon = m.find(": ", m.find("'<memory>'"));
      std::string key = m.substr(colon == std::string::npos ? 0 : colon + 2);
      // Numbers and what follows them differ from flip to flip; the words before them name the check.
      size_t cut = key.find_first_of("([");
      for (size_t k = 1; k < key.size() && k < cut; ++k)
        if (key[k - 1] == ' ' && key[k] >= '0' && key[k] <= '9') cut = k;
      key = key.substr(0, std::min(cut, size_t{48}));
      ++caught_by[key];
    }
  }
  std::printf("%s: %zu bytes, %zu damaged copies tried, %zu refused, %zu accepted\n", path.c_str(), plan.size(),
              tried, tried - missed.size(), missed.size());
  for (const auto &kv : caught_by) std::printf("  %8zu  %s...\n", kv.second, kv.first.c_str());
  for (size_t i = 0; i < missed.size() && i < 20; ++i)
    std::printf("FAIL: a flip at %s was not detected\n", missed[i].c_str());
  zrt::shutdown();
  if (!missed.empty()) return 1;
  std::printf("PASS\n");
  return 0;
}
