// zrt/communicator.h - the interface a communicator implements (MPI here; NCCL in runtime/src/nccl/).
//
// A communicator has two planes:
//  - the data plane: collectives on arena memory of its backend (host pointers for MPI and TCP, device
//    pointers plus a stream for NCCL), over the tp, dp or world group of the mesh;
//  - the control plane: small host-memory exchanges on the world group used at start-up (agreement on the
//    plan and on errors) and to assemble outputs on rank 0. The NCCL communicator keeps the MPI or TCP
//    communicator it was made with for this plane.
//
// Which one a job gets depends on its launcher (make_communicator_from_env): mpirun gives an MPI world;
// torchrun gives only environment variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), from which the
// TCP communicator (runtime/src/tcp/) builds its own connections (docs/dist-contract.md, "TCP transport").
//
// Groups follow docs/design.md: world = tp x dp, rank r has tp index r % tp and dp index r / tp; a tp group
// is the ranks of one dp index, in tp-index order; a dp group the ranks of one tp index, in dp-index order.
// "Group order" below means that order.
//
// The collective order check (zrun --check-collectives, or ZRT_CHECK_COLLECTIVES=1 in the environment when
// the communicator is made): before each data-plane collective, every rank of the job agrees a small header
// over the control plane: its count of collectives so far, the plan step issuing it, the op, the axis, the
// bytes, the dtype and the root. Every rank runs the same plan, so every rank issues the same sequence of
// collectives (on its own tp/dp group); a rank that skips or changes one makes the headers differ, and every
// rank then returns the same comm_error naming both sides instead of waiting in a collective that never
// matches. The check is world-wide, so it also catches a divergence that a per-group exchange would turn
// into a wait on another group.
#ifndef ZRT_COMMUNICATOR_H
#define ZRT_COMMUNICATOR_H

#include <cstdint>
#include <memory>
#include <string>

#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

/// The data-plane collectives, as the order check names them.
enum class CollectiveOp : uint8_t { all_reduce = 1, all_gather, reduce_scatter, broadcast, barrier };

/// What a rank is about to issue, as the order check compares it.
struct CollectiveHeader {
  uint64_t seq = 0;                     // data-plane collectives this communicator issued before this one
  uint64_t step = ~uint64_t{0};         // the plan step issuing it (set_step); all ones when none was set
  CollectiveOp op = CollectiveOp::barrier;
  Axis axis = Axis::none;
  DType dtype = DType::bool8;           // the element type of reductions; bytes-only collectives say bool8
  int root = -1;                        // broadcast's root group rank, -1 otherwise
  uint64_t bytes = 0;                   // this rank's send bytes
};
/// "all_reduce over tp of 4096 B f32 (collective #3, plan step 17)".
std::string describe(const CollectiveHeader &h);
/// "all_reduce", "all_gather", ..., as messages name a collective.
const char *collective_name(CollectiveOp op);
/// "tp", "dp", "world" or "none", as messages name an axis.
const char *axis_name(Axis a);
/// set_mesh's check, alike for every communicator: a tp x dp mesh must cover the job's `world` ranks.
Status check_mesh(int tp, int dp, int world);

/// The size of `axis`'s group on a tp x dp mesh (the group rules above); 1 for Axis::none.
inline int mesh_group_size(Axis axis, int tp, int dp) {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::dp: return dp;
    case Axis::world: return tp * dp;
    default: return 1;
  }
}
/// World rank `rank`'s index in its `axis` group on a mesh of tp ranks per dp index; 0 for Axis::none.
inline int mesh_group_rank(Axis axis, int rank, int tp) {
  switch (axis) {
    case Axis::tp: return rank % tp;
    case Axis::dp: return rank / tp;
    case Axis::world: return rank;
    default: return 0;
  }
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char *name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Sets up the tp and dp groups for a mesh (tp * dp must equal world_size()).
  virtual Status set_mesh(int tp, int dp) = 0;
  virtual int group_size(Axis axis) const = 0;
  virtual int group_rank(Axis axis) const = 0;

  // --- data plane. `stream` is the backend's native stream (nullptr on cpu). send may equal recv.
  /// Element-wise sum (or max, min) of `count` elements over the group, result on every member.
  virtual Status all_reduce(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream,
                            Reduction red = Reduction::sum) = 0;
  /// Concatenates every member's `bytes` in group order into recv (group_size * bytes).
  virtual Status all_gather(Axis axis, const void *send, void *recv, size_t bytes, void *stream) = 0;
  /// Sums (or maxes, mins) send (group_size blocks of `count` elements) over the group; member i keeps
  /// block i.
  virtual Status reduce_scatter(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream,
                                Reduction red = Reduction::sum) = 0;
  /// Copies `bytes` from the member with group rank `root` to every member.
  virtual Status broadcast(Axis axis, void *buf, size_t bytes, int root, void *stream) = 0;
  virtual Status barrier(Axis axis) = 0;

  // --- control plane (host memory, world group).
  /// Element-wise min and max of n u64 values over the world.
  virtual Status agree(const uint64_t *in, uint64_t *min, uint64_t *max, int n) = 0;
  /// Copies `bytes` from world rank `root` to every rank.
  virtual Status broadcast_host(void *buf, size_t bytes, int root) = 0;
  /// Rank `root` receives counts[r] bytes from every rank r, concatenated in rank order into recv
  /// (counts is read on every rank; send holds counts[rank()] bytes).
  virtual Status gather_host(const void *send, void *recv, const size_t *counts, int root) = 0;
  /// Ends every rank of the job (used when a rank cannot continue and the others may be blocked).
  virtual void abort(int code) = 0;

  // --- collective order check (see the top of this file). Collective over the world when on: every rank
  // must turn it on or off alike, before its first collective.
  void set_check_collectives(bool on) { check_ = on; }
  bool check_collectives() const { return check_; }
  /// Data-plane collectives issued so far (counted whether or not the check is on).
  uint64_t collectives_issued() const { return seq_; }
  /// Names the plan step whose collectives follow, so that skipping one of two equal collectives shows as
  /// a different step rather than as a shifted but identical header.
  void set_step(uint64_t step) { step_ = step; }

 protected:
  /// Called by each implementation at the top of every data-plane collective: counts it and, with the check
  /// on, agrees its header with every rank of the job; a mismatch returns comm_error naming both sides (the
  /// same message on every rank).
  Status check_order(CollectiveOp op, Axis axis, uint64_t bytes, DType dtype, int root);

 private:
  bool check_ = false;
  uint64_t seq_ = 0;
  uint64_t step_ = ~uint64_t{0};
};

/// Whether ZRT_CHECK_COLLECTIVES asks for the order check ("1", "on", "true"; anything else or unset: off).
bool check_collectives_from_env();

/// Initialises MPI if nobody has (MPI_Init_thread, MPI_THREAD_SERIALIZED) and returns a communicator over
/// MPI_COMM_WORLD. Errors on MPI calls are returned as Status, not fatal.
Status make_mpi_communicator(std::unique_ptr<Communicator> *out);
/// Finalises MPI if make_mpi_communicator initialised it.
void finalize_mpi();
/// The NCCL communicator of the cuda backend (built with ZRT_HAVE_CUDA only): NCCL for the data plane on
/// device pointers and streams, the given host communicator (MPI or TCP) for the control plane and for
/// creating the NCCL communicators (unique ids broadcast over it). The Session calls it when
/// Options::backend is cuda.
Status make_nccl_communicator(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> *out);

/// Where the ranks of a TCP job meet (torchrun's variables) and how long any wait may last.
struct TcpConfig {
  int rank = 0;
  int world = 1;
  std::string master_addr;  // a host name or address that every rank resolves to rank 0
  int master_port = 0;      // rank 0 listens there for the rendezvous
  double timeout_s = 600;   // the rendezvous' connect window, and the longest wait on a peer afterwards
};
/// The configuration of this process from its environment: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
/// (torchrun's); ZRT_TCP_PORT overrides the port, and under torchrun's agent store (which holds
/// MASTER_PORT itself: TORCHELASTIC_USE_AGENT_STORE=True) the rendezvous uses MASTER_PORT + 1;
/// ZRT_TCP_TIMEOUT_S sets timeout_s. A missing or malformed variable is an invalid_argument naming it.
Status tcp_config_from_env(TcpConfig *out);
/// Runs the rendezvous and returns a communicator over plain TCP sockets, on host memory (no MPI).
/// Collective: every rank of the job must call it with the same world, address and port.
Status make_tcp_communicator(const TcpConfig &config, std::unique_ptr<Communicator> *out);
/// The host communicator the launcher's environment asks for: ZRT_COMM=mpi|tcp when set; else MPI under an
/// MPI launcher (OMPI_COMM_WORLD_*, PMI_*, PMIX_* variables); else TCP when torchrun's WORLD_SIZE is above
/// 1; else a single-rank MPI world (MPI's singleton start), as without any launcher.
Status make_communicator_from_env(std::unique_ptr<Communicator> *out);

}  // namespace zrt

#endif  // ZRT_COMMUNICATOR_H
