//===- ArenaPlanner.h - Static offsets for buffers with known lifetimes ---===//
//
// The memory planner's core, free of MLIR so that it can be tested against
// brute-force checks: every buffer has a size, a memory space and an interval
// of schedule steps during which it is live; the planner gives each buffer a
// fixed offset in its space's arena such that buffers live at the same time
// never overlap.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_ARENAPLANNER_H
#define ZPLAN_COMPILER_PLAN_ARENAPLANNER_H

#include <cstdint>
#include <vector>

namespace zplan::plan {

/// The alignment of every buffer offset and size, in bytes. 256 bytes covers
/// every CUDA kernel's vector loads and cuBLAS's preferred alignment.
constexpr uint64_t kArenaAlignment = 256;

/// Memory spaces, numbered as plan.fbs's MemSpace enum.
/// Nvme (plan 2.3) is the rank's NVMe file: its "arena" is the file layout.
enum class Space : unsigned { Device = 0, Host = 1, Nvme = 2 };
constexpr unsigned kNumSpaces = 3;

/// One buffer to place. It is live in the closed interval [begin, end] of
/// schedule steps; two buffers may share bytes only when their intervals are
/// disjoint.
struct BufferRequest {
  uint64_t bytes = 0;
  Space space = Space::Device;
  int64_t begin = 0;
  int64_t end = 0;
};

/// The result: an offset per request (in request order), the size of each
/// space's arena and, for comparison, the largest number of bytes live at any
/// one step (a lower bound no placement can beat).
struct ArenaPlan {
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> alignedBytes;
  uint64_t arenaBytes[kNumSpaces] = {0, 0, 0};
  uint64_t peakLiveBytes[kNumSpaces] = {0, 0, 0};
};

/// Rounds `bytes` up to a multiple of kArenaAlignment (0 stays 0).
inline uint64_t alignArena(uint64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Places every request. Buffers live over the whole schedule (the smallest
/// begin to the largest end) are stacked first, in request order; the others
/// are placed greedily by decreasing size, each into the smallest gap between
/// the time-overlapping buffers already placed that holds it (best fit), or
/// past their end. Deterministic: equal inputs give equal offsets.
ArenaPlan planArenas(const std::vector<BufferRequest> &requests);

/// The largest sum of aligned sizes of the buffers of `space` live at one
/// step, by a sweep over interval end points.
uint64_t peakLiveBytes(const std::vector<BufferRequest> &requests, Space space);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_ARENAPLANNER_H
