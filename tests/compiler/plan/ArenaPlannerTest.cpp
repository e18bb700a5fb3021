// Tests the arena planner against brute force: no two buffers live at the same
// step share a byte, offsets are aligned, and the reported peak equals the
// largest per-step sum of live bytes counted step by step.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compiler/plan/ArenaPlanner.h"

using namespace zplan::plan;

namespace {

uint64_t bruteForcePeak(const std::vector<BufferRequest>& reqs, Space space) {
  int64_t lo = 0, hi = 0;
  for (const auto& r : reqs) {
    lo = std::min(lo, r.begin);
    hi = std::max(hi, r.end);
  }
  uint64_t peak = 0;
  for (int64_t t = lo; t <= hi; ++t) {
    uint64_t live = 0;
    for (const auto& r : reqs)
      if (r.space == space && r.begin <= t && t <= r.end) live += (r.bytes + 255) / 256 * 256;
    peak = std::max(peak, live);
  }
  return peak;
}

void checkPlan(const std::vector<BufferRequest>& reqs, const ArenaPlan& plan) {
  ASSERT_EQ(plan.offsets.size(), reqs.size());
  uint64_t top[kNumSpaces] = {0, 0};
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % 256, 0u) << "buffer " << i;
    uint64_t size = (reqs[i].bytes + 255) / 256 * 256;
    EXPECT_EQ(plan.alignedBytes[i], size);
    unsigned s = static_cast<unsigned>(reqs[i].space);
    top[s] = std::max(top[s], plan.offsets[i] + size);
    for (size_t j = 0; j < i; ++j) {
      if (reqs[i].space != reqs[j].space || reqs[i].bytes == 0 || reqs[j].bytes == 0) continue;
      bool timeOverlap = !(reqs[i].end < reqs[j].begin || reqs[j].end < reqs[i].begin);
      uint64_t sj = (reqs[j].bytes + 255) / 256 * 256;
      bool addrOverlap = plan.offsets[i] < plan.offsets[j] + sj && plan.offsets[j] < plan.offsets[i] + size;
      EXPECT_FALSE(timeOverlap && addrOverlap) << "buffers " << j << " and " << i << " overlap";
    }
  }
  for (unsigned s = 0; s < kNumSpaces; ++s) {
    EXPECT_EQ(plan.arenaBytes[s], top[s]);
    EXPECT_EQ(plan.peakLiveBytes[s], bruteForcePeak(reqs, Space(s)));
    EXPECT_GE(plan.arenaBytes[s], plan.peakLiveBytes[s]);
  }
}

TEST(ArenaPlanner, EmptyInput) {
  ArenaPlan plan = planArenas({});
  EXPECT_EQ(plan.arenaBytes[0], 0u);
  EXPECT_EQ(plan.arenaBytes[1], 0u);
}

// A chain where each buffer is read only by the next step needs exactly two
// slots: the lower bound is reached.
TEST(ArenaPlanner, ChainReusesTwoSlots) {
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back({1000, Space::Device, i, i + 1});
  ArenaPlan plan = planArenas(reqs);
  checkPlan(reqs, plan);
  EXPECT_EQ(plan.arenaBytes[0], 2 * 1024u);
  EXPECT_EQ(plan.peakLiveBytes[0], 2 * 1024u);
}

// Whole-run buffers (weights, inputs) are stacked at the bottom in request
// order, each space separately.
TEST(ArenaPlanner, WholeRunBuffersStackInOrder) {
  std::vector<BufferRequest> reqs = {{300, Space::Device, 0, 9},
                                     {10, Space::Host, 0, 9},
                                     {256, Space::Device, 0, 9},
                                     {512, Space::Device, 3, 4},
                                     {100, Space::Host, 2, 2}};
  ArenaPlan plan = planArenas(reqs);
  checkPlan(reqs, plan);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[2], 512u);
  EXPECT_EQ(plan.offsets[1], 0u);
  EXPECT_EQ(plan.offsets[3], 768u);
  EXPECT_EQ(plan.offsets[4], 256u);
  EXPECT_EQ(plan.arenaBytes[0], 1280u);
  EXPECT_EQ(plan.arenaBytes[1], 512u);
}

// A buffer goes into the smallest gap that holds it, not the first one: at
// steps 5..6 the bytes [0, 4096) of a short-lived buffer and [7168, 7936) of
// another are free; the 512-byte buffer takes the tighter second gap.
TEST(ArenaPlanner, BestFitPicksSmallestGap) {
  std::vector<BufferRequest> reqs = {
      {4096, Space::Device, 0, 2},  // offset 0, free from step 3
      {2048, Space::Device, 0, 9},  // 4096
      {1024, Space::Device, 0, 9},  // 6144
      {768, Space::Device, 0, 2},   // 7168, free from step 3
      {512, Space::Device, 0, 9},   // 7936
      {512, Space::Device, 5, 6},   // best fit: 7168 (first fit would be 0)
      // Runs the schedule to step 10, so that [0, 9] is not the whole run
      // (whole-run buffers are stacked apart).
      {256, Space::Host, 10, 10},
  };
  ArenaPlan plan = planArenas(reqs);
  checkPlan(reqs, plan);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[3], 7168u);
  EXPECT_EQ(plan.offsets[4], 7936u);
  EXPECT_EQ(plan.offsets[5], 7168u);
  EXPECT_EQ(plan.arenaBytes[0], 8448u);
}

TEST(ArenaPlanner, ZeroByteBuffersTakeNoSpace) {
  std::vector<BufferRequest> reqs = {{0, Space::Device, 0, 3}, {100, Space::Device, 1, 2}};
  ArenaPlan plan = planArenas(reqs);
  checkPlan(reqs, plan);
  EXPECT_EQ(plan.arenaBytes[0], 256u);
}

class ArenaPlannerRandom : public ::testing::TestWithParam<int> {};

TEST_P(ArenaPlannerRandom, NeverOverlapsAndPeakIsExact) {
  std::mt19937_64 rng(GetParam());
  std::uniform_int_distribution<int> count(1, 120);
  std::uniform_int_distribution<int64_t> step(0, 60);
  std::uniform_int_distribution<uint64_t> size(0, 1 << 16);
  std::bernoulli_distribution host(0.25), whole(0.1);
  std::vector<BufferRequest> reqs(count(rng));
  for (auto& r : reqs) {
    r.bytes = size(rng);
    r.space = host(rng) ? Space::Host : Space::Device;
    if (whole(rng)) {
      r.begin = 0;
      r.end = 60;
    } else {
      r.begin = step(rng);
      r.end = r.begin + step(rng) / 4;
    }
  }
  ArenaPlan plan = planArenas(reqs);
  checkPlan(reqs, plan);
  // Determinism: the same input gives the same offsets.
  EXPECT_EQ(planArenas(reqs).offsets, plan.offsets);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ArenaPlannerRandom, ::testing::Range(0, 200));

}  // namespace
