// The plan verifier as the verifier tests call it (test_verifier.cpp, test_format2.cpp, test_registry.cpp):
// a plan file or a built plan through zrt::verify_plan, and the check that a status is a rejection whose
// message says what is wrong.
#ifndef ZRT_TESTS_VERIFY_HELPERS_H
#define ZRT_TESTS_VERIFY_HELPERS_H

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"
#include "plan_builder.h"

namespace zrt_test {

/// Verifies the plan file `file` as rank `rank` of a job of `world` ranks on backend `be`.
inline zrt::Status verify(const std::vector<uint8_t> &file, int world, zrt::BackendKind be = zrt::BackendKind::cpu,
                          int rank = 0) {
  zrt::Launch l;
  l.world = world;
  l.rank = rank;
  l.backend = be;
  const fb::Plan *plan = nullptr;
  uint64_t h = 0;
  return zrt::verify_plan(file.data(), file.size(), l, &plan, &h);
}

/// Verifies the plan `p` builds, as rank 0 of its world on the CPU backend.
inline zrt::Status verify(const PlanBuilder &p) { return verify(p.file(), p.world()); }

/// Expects `s` to be a rejection whose message contains `needle`.
inline void expect_reject(const zrt::Status &s, const std::string &needle) {
  ASSERT_FALSE(s.ok()) << "expected a rejection mentioning '" << needle << "'";
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message was: " << s.message();
}

}  // namespace zrt_test

#endif  // ZRT_TESTS_VERIFY_HELPERS_H
