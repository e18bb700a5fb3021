// The collective order check shared by the communicators (communicator.h says what it guards).
//
// It runs on the control plane only (agree, gather_host, broadcast_host: world-wide host exchanges), so
// the MPI and NCCL communicators check alike: the headers never travel on the data plane they guard.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "zrt/communicator.h"

namespace zrt {
namespace {

constexpr int kWords = 4;

// The header as four words; unpack() is its inverse. The small fields share one word (root + 1 keeps
// "no root" at zero), so one agree() of four values compares everything.
void pack(const CollectiveHeader &h, uint64_t *w) {
  w[0] = h.seq;
  w[1] = h.step;
  w[2] = static_cast<uint64_t>(h.op) | static_cast<uint64_t>(h.axis) << 8 | static_cast<uint64_t>(h.dtype) << 16 |
         static_cast<uint64_t>(static_cast<uint32_t>(h.root + 1)) << 32;
  w[3] = h.bytes;
}

CollectiveHeader unpack(const uint64_t *w) {
  CollectiveHeader h;
  h.seq = w[0];
  h.step = w[1];
  h.op = static_cast<CollectiveOp>(w[2] & 0xff);
  h.axis = static_cast<Axis>((w[2] >> 8) & 0xff);
  h.dtype = static_cast<DType>((w[2] >> 16) & 0xff);
  h.root = static_cast<int>(static_cast<uint32_t>(w[2] >> 32)) - 1;
  h.bytes = w[3];
  return h;
}

}  // namespace

const char *collective_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::barrier: return "barrier";
  }
  return "unknown collective";
}

const char *axis_name(Axis a) {
  switch (a) {
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
    case Axis::world: return "world";
    case Axis::none: return "none";
  }
  return "unknown axis";
}

Status check_mesh(int tp, int dp, int world) {
  if (tp < 1 || dp < 1 || tp * dp != world)
    return error(Code::mismatch, "mesh tp " + std::to_string(tp) + " x dp " + std::to_string(dp) +
                                     " does not cover the " + std::to_string(world) + " ranks of the job");
  return {};
}

std::string describe(const CollectiveHeader &h) {
  std::string s = std::string(collective_name(h.op)) + " over " + axis_name(h.axis);
  if (h.op != CollectiveOp::barrier) s += " of " + std::to_string(h.bytes) + " B";
  if (h.op == CollectiveOp::all_reduce || h.op == CollectiveOp::reduce_scatter)
    s += std::string(" ") + dtype_name(h.dtype);
  if (h.op == CollectiveOp::broadcast) s += " from group rank " + std::to_string(h.root);
  s += " (collective #" + std::to_string(h.seq);
  if (h.step != ~uint64_t{0}) s += ", plan step " + std::to_string(h.step);
  return s + ")";
}

bool check_collectives_from_env() {
  const char *v = std::getenv("ZRT_CHECK_COLLECTIVES");
  return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0 || std::strcmp(v, "true") == 0);
}

Status Communicator::check_order(CollectiveOp op, Axis axis, uint64_t bytes, DType dtype, int root) {
  CollectiveHeader h;
  h.seq = seq_++;
  h.step = step_;
  h.op = op;
  h.axis = axis;
  h.dtype = dtype;
  h.root = root;
  h.bytes = bytes;
  if (!check_) return {};
  uint64_t mine[kWords], lo[kWords], hi[kWords];
  pack(h, mine);
  ZRT_RETURN_IF_ERROR(agree(mine, lo, hi, kWords));
  if (std::memcmp(lo, hi, sizeof lo) == 0) return {};
  // Some rank differs. Every rank takes the same slow path (agree gave all the same minima and maxima):
  // rank 0 gathers every header and sends the table back, so that each rank names the same two sides.
  const int world = world_size();
  std::vector<uint64_t> table(static_cast<size_t>(world) * kWords);
  std::vector<size_t> counts(static_cast<size_t>(world), sizeof mine);
  ZRT_RETURN_IF_ERROR(gather_host(mine, table.data(), counts.data(), 0));
  ZRT_RETURN_IF_ERROR(broadcast_host(table.data(), table.size() * sizeof(uint64_t), 0));
  int other = 1;
  while (other < world && std::memcmp(&table[0], &table[static_cast<size_t>(other) * kWords], sizeof mine) == 0) ++other;
  if (other == world) other = 0;  // cannot happen when the minima and maxima differ; kept total
  return error(Code::comm_error,
               "collective order check: the ranks would issue different collectives: rank 0 issues " +
                   describe(unpack(&table[0])) + ", rank " + std::to_string(other) + " issues " +
                   describe(unpack(&table[static_cast<size_t>(other) * kWords])));
}

}  // namespace zrt
