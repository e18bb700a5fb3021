// The staging rule for collectives, shared by the runtime (which takes the staged path and sizes the buffer
// once at plan load) and the compiler (which plans those bytes with the workspace, so that the plan's peak
// counts them). One rule in one place: if the two disagreed, the plan's peak would be wrong or the runtime
// would write past its staging.
#pragma once

#include <cstdint>

namespace zrt {

enum class StagedCollective { all_gather, reduce_scatter, gather_param };

/// Where a collective's operand and result sit: byte addresses in one address space (device pointers, or
/// arena offsets with `same_space` saying whether both live in the same arena).
struct CollectiveExtent {
  uint64_t in_begin = 0, in_bytes = 0;
  uint64_t out_begin = 0, out_bytes = 0;
  /// The bytes reserved for the result (at least out_bytes; more where the arena rounds up).
  uint64_t out_reserved = 0;
  bool same_space = true;
};

/// The staging bytes a collective needs; 0 when it runs directly on its operand and result.
/// - all_gather along a dimension with more than one outer row (or onto a result that overlaps its operand)
///   is gathered contiguously per rank, then interleaved: staging of the result's size;
/// - reduce_scatter likewise packs the operand per rank first: staging of the operand's size;
/// - a ZeRO gather (gather_param) whose result reserves fewer bytes than the padded flat gather of `dp`
///   shards, or overlaps its shard, lands in staging first: staging of the flat gather's size.
/// `outer` is the product of the dimensions before the gathered / scattered one (unused for gather_param).
inline uint64_t collective_staging_bytes(StagedCollective kind, const CollectiveExtent &e, int64_t outer,
                                         int64_t dp) {
  auto overlap = [&](uint64_t out_span) {
    return e.same_space && e.in_begin < e.out_begin + out_span && e.out_begin < e.in_begin + e.in_bytes;
  };
  switch (kind) {
    case StagedCollective::all_gather: return outer != 1 || overlap(e.out_bytes) ? e.out_bytes : 0;
    case StagedCollective::reduce_scatter: return outer != 1 || overlap(e.out_bytes) ? e.in_bytes : 0;
    case StagedCollective::gather_param: {
      const uint64_t total = e.in_bytes * static_cast<uint64_t>(dp);
      return e.out_reserved < total || overlap(total) ? total : 0;
    }
  }
  return 0;
}

}  // namespace zrt
