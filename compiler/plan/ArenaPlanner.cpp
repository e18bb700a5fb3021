//===- ArenaPlanner.cpp - Static offsets for buffers with known lifetimes -===//

#include "compiler/plan/ArenaPlanner.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

namespace zplan::plan {

uint64_t peakLiveBytes(const std::vector<BufferRequest> &requests,
                       Space space) {
  // Events at begin add the size, events just after end remove it; removals
  // sort before additions at the same step because [b, e] is closed.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const BufferRequest &r : requests) {
    if (r.space != space || r.bytes == 0)
      continue;
    int64_t size = static_cast<int64_t>(alignArena(r.bytes));
    events.push_back({r.begin, size});
    events.push_back({r.end + 1, -size});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto &e : events) {
    live += e.second;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

ArenaPlan planArenas(const std::vector<BufferRequest> &requests) {
  ArenaPlan plan;
  size_t n = requests.size();
  plan.offsets.assign(n, 0);
  plan.alignedBytes.resize(n);
  int64_t first = std::numeric_limits<int64_t>::max();
  int64_t last = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < n; ++i) {
    plan.alignedBytes[i] = alignArena(requests[i].bytes);
    first = std::min(first, requests[i].begin);
    last = std::max(last, requests[i].end);
  }

  for (unsigned s = 0; s < kNumSpaces; ++s) {
    Space space = static_cast<Space>(s);
    // Whole-run buffers can never share bytes with anything: stack them at
    // the bottom of the arena in request order, so that weights sit in a
    // predictable block.
    uint64_t base = 0;
    std::vector<size_t> transient;
    for (size_t i = 0; i < n; ++i) {
      const BufferRequest &r = requests[i];
      if (r.space != space || plan.alignedBytes[i] == 0)
        continue;
      if (r.begin <= first && r.end >= last) {
        plan.offsets[i] = base;
        base += plan.alignedBytes[i];
      } else {
        transient.push_back(i);
      }
    }
    // Largest first: big buffers are the hardest to fit, small ones fill the
    // gaps they leave. Ties break by start step and index for determinism.
    std::stable_sort(transient.begin(), transient.end(),
                     [&](size_t a, size_t b) {
                       if (plan.alignedBytes[a] != plan.alignedBytes[b])
                         return plan.alignedBytes[a] > plan.alignedBytes[b];
                       if (requests[a].begin != requests[b].begin)
                         return requests[a].begin < requests[b].begin;
                       return a < b;
                     });
    // Placed buffers as (offset, size, begin, end), kept sorted by offset so
    // that gaps can be read off in one walk.
    struct Placed {
      uint64_t offset, size;
      int64_t begin, end;
    };
    std::vector<Placed> placed;
    uint64_t top = base;
    for (size_t i : transient) {
      const BufferRequest &r = requests[i];
      uint64_t size = plan.alignedBytes[i];
      uint64_t cursor = base;
      uint64_t bestOffset = 0, bestGap = std::numeric_limits<uint64_t>::max();
      bool found = false;
      for (const Placed &p : placed) {
        if (p.end < r.begin || r.end < p.begin)
          continue;
        if (p.offset > cursor) {
          uint64_t gap = p.offset - cursor;
          if (gap >= size && gap < bestGap) {
            bestGap = gap;
            bestOffset = cursor;
            found = true;
          }
        }
        cursor = std::max(cursor, p.offset + p.size);
      }
      uint64_t offset = found ? bestOffset : cursor;
      plan.offsets[i] = offset;
      top = std::max(top, offset + size);
      Placed entry{offset, size, r.begin, r.end};
      auto pos = std::upper_bound(
          placed.begin(), placed.end(), entry,
          [](const Placed &a, const Placed &b) { return a.offset < b.offset; });
      placed.insert(pos, entry);
    }
    plan.arenaBytes[s] = top;
    plan.peakLiveBytes[s] = peakLiveBytes(requests, space);
  }
  return plan;
}

} // namespace zplan::plan
