// The NCCL communicator (see nccl_communicator.h).
//
// Groups follow docs/design.md: rank r has tp index r % tp and dp index r / tp; the tp group of dp index d
// is ranks [d * tp, (d + 1) * tp) in order, the dp group of tp index t is ranks t, t + tp, ... in order.
// NCCL ranks inside each communicator are the group ranks, so "group order" is NCCL rank order.
#include "nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../cuda/cuda_hooks.h"
#include "../cuda/cuda_status.h"
#include "nccl_status.h"

namespace zrt {
namespace {

ncclRedOp_t nccl_op(Reduction r) { return r == Reduction::max ? ncclMax : r == Reduction::min ? ncclMin : ncclSum; }

Status nccl_type(DType t, ncclDataType_t *out) {
  switch (t) {
    case DType::f32: *out = ncclFloat32; return {};
    case DType::bf16: *out = ncclBfloat16; return {};
    case DType::f16: *out = ncclFloat16; return {};
    case DType::i64: *out = ncclInt64; return {};
    case DType::i32: *out = ncclInt32; return {};
    case DType::bool8: *out = ncclUint8; return {};
  }
  return error(Code::invalid_argument, "nccl: unknown dtype");
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<Communicator> control) : ctl_(std::move(control)) {
    const char *t = std::getenv("ZRT_NCCL_TIMEOUT_S");
    timeout_s_ = t ? std::atof(t) : 600.0;
    // The order check moves here from the control-plane communicator: the barrier below goes through it,
    // and one count of collectives (this one's) keeps the headers' sequence numbers those of the data plane.
    set_check_collectives(ctl_->check_collectives());
    ctl_->set_check_collectives(false);
    // NCCL's device buffers are part of the plan (the compiler's --comm-bytes-per-group, measured with this
    // configuration; docs/gpu-plan-runs.md), so they must not depend on which collectives run or on their
    // sizes: every algorithm and protocol connects when a communicator is made (NCCL_RUNTIME_CONNECT=0)
    // rather than at first use, over a fixed number of channels (ZRT_NCCL_CTAS, default kDefaultCtas).
    // A value the user set in the environment wins (and the plan's figure may then be off).
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    const char *c = std::getenv("ZRT_NCCL_CTAS");
    ctas_ = c ? std::atoi(c) : kDefaultCtas;
  }
  ~NcclCommunicator() override {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    set_comm_watch(nullptr, nullptr);
    for (ncclComm_t &c : comms_)
      if (c) ncclCommDestroy(c);
  }

  const char *name() const override { return "nccl"; }
  int rank() const override { return ctl_->rank(); }
  int world_size() const override { return ctl_->world_size(); }

  Status set_mesh(int tp, int dp) override {
    ZRT_RETURN_IF_ERROR(ctl_->set_mesh(tp, dp));
    ZRT_RETURN_IF_ERROR(select_cuda_device(nullptr));
    tp_ = tp;
    dp_ = dp;
    const int r = rank();
    // One unique id per group: dp tp-groups, tp dp-groups, one world group. World rank 0 makes them all.
    const int ngroups = dp + tp + 1;
    ids_.resize(static_cast<size_t>(ngroups));
    if (r == 0)
      for (ncclUniqueId &id : ids_) ZRT_NCCL_CHECK(ncclGetUniqueId(&id));
    ZRT_RETURN_IF_ERROR(ctl_->broadcast_host(ids_.data(), ids_.size() * sizeof(ncclUniqueId), 0));
    // Every rank's process id and host, so that a failure can name the peer that is gone or stopped.
    peers_.assign(static_cast<size_t>(world_size()), Peer{});
    for (int k = 0; k < world_size(); ++k) {
      Peer me;
      if (k == r) {
        me.pid = static_cast<int64_t>(getpid());
        gethostname(me.host, sizeof(me.host) - 1);
      }
      ZRT_RETURN_IF_ERROR(ctl_->broadcast_host(&me, sizeof(me), k));
      peers_[static_cast<size_t>(k)] = me;
    }
    // The NCCL communicators themselves are made at a group's first collective (comm_of), in the SPMD
    // order every rank follows: a group the plan never uses holds no NCCL buffers, and a group of one needs
    // no communicator at all (a collective over it is a copy).
    return {};
  }

  int group_size(Axis a) const override { return a == Axis::tp ? tp_ : a == Axis::dp ? dp_ : world_size(); }
  int group_rank(Axis a) const override {
    return a == Axis::tp ? rank() % tp_ : a == Axis::dp ? rank() / tp_ : rank();
  }

  Status all_reduce(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream,
                    Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_reduce, axis, count * dtype_size(dtype), dtype, -1));
    if (group_size(axis) == 1) return self_copy(send, recv, count * dtype_size(dtype), stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ncclDataType_t t;
    ZRT_RETURN_IF_ERROR(nccl_type(dtype, &t));
    {
      InCall guard(this);
      ZRT_NCCL_CHECK(ncclAllReduce(send, recv, count, t, nccl_op(red), c, static_cast<cudaStream_t>(stream)));
    }
    return {};
  }
  Status all_gather(Axis axis, const void *send, void *recv, size_t bytes, void *stream) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_gather, axis, bytes, DType::bool8, -1));
    if (group_size(axis) == 1) return self_copy(send, recv, bytes, stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    {
      InCall guard(this);
      ZRT_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, c, static_cast<cudaStream_t>(stream)));
    }
    return {};
  }
  Status reduce_scatter(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream,
                        Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::reduce_scatter, axis, count * dtype_size(dtype) * group_size(axis),
                                    dtype, -1));
    if (group_size(axis) == 1) return self_copy(send, recv, count * dtype_size(dtype), stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ncclDataType_t t;
    ZRT_RETURN_IF_ERROR(nccl_type(dtype, &t));
    {
      InCall guard(this);
      ZRT_NCCL_CHECK(ncclReduceScatter(send, recv, count, t, nccl_op(red), c, static_cast<cudaStream_t>(stream)));
    }
    return {};
  }
  Status broadcast(Axis axis, void *buf, size_t bytes, int root, void *stream) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::broadcast, axis, bytes, DType::bool8, root));
    if (group_size(axis) == 1) return {};
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    {
      InCall guard(this);
      ZRT_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, c, static_cast<cudaStream_t>(stream)));
    }
    return {};
  }
  Status barrier(Axis axis) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::barrier, axis, 0, DType::bool8, -1));
    // Device work first (the plan's barrier orders everything before it), then the host barrier.
    ZRT_CUDA_CHECK(cudaDeviceSynchronize());
    return ctl_->barrier(axis);
  }

  Status agree(const uint64_t *in, uint64_t *mn, uint64_t *mx, int n) override { return ctl_->agree(in, mn, mx, n); }
  Status broadcast_host(void *buf, size_t bytes, int root) override { return ctl_->broadcast_host(buf, bytes, root); }
  Status gather_host(const void *send, void *recv, const size_t *counts, int root) override {
    return ctl_->gather_host(send, recv, counts, root);
  }
  void abort(int code) override {
    abort_all();
    ctl_->abort(code);
  }

 private:
  static Status self_copy(const void *send, void *recv, size_t bytes, void *stream) {
    if (send != recv && bytes)
      ZRT_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
    return {};
  }

  Status comm_of(Axis a, ncclComm_t *c) {
    const int i = a == Axis::tp ? 0 : a == Axis::dp ? 1 : 2;
    if (ids_.empty()) return error(Code::comm_error, "nccl: set_mesh() has not run");
    if (!comms_[i]) {
      const int r = rank(), ti = r % tp_, di = r / tp_;
      const size_t id = i == 0 ? static_cast<size_t>(di) : i == 1 ? static_cast<size_t>(dp_ + ti) : static_cast<size_t>(dp_ + tp_);
      const int n = i == 0 ? tp_ : i == 1 ? dp_ : world_size();
      const int me = i == 0 ? ti : i == 1 ? di : r;
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      // A fixed number of channels fixes the communicator's buffers, which the plan counts; 0 leaves the
      // choice to NCCL (which picks a count per machine).
      if (ctas_ > 0) {
        config.minCTAs = ctas_;
        config.maxCTAs = ctas_;
      }
      ZRT_NCCL_CHECK(ncclCommInitRankConfig(&comms_[i], n, ids_[id], me, &config));
      // Only a run with peers can hang on them; a single rank keeps the plain blocking stream wait.
      set_comm_watch(&NcclCommunicator::watch, this);
      if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watchdog(); });
    }
    *c = comms_[i];
    return {};
  }

  /// The other members of communicator `i`, each with what the host can see of it: exited, stopped, or
  /// apparently running (another host, or still alive here).
  std::string peers_of(int i) const {
    const int r = rank(), ti = r % tp_, di = r / tp_;
    std::vector<int> members;
    if (i == 0)
      for (int t = 0; t < tp_; ++t) members.push_back(di * tp_ + t);
    else if (i == 1)
      for (int d = 0; d < dp_; ++d) members.push_back(d * tp_ + ti);
    else
      for (int k = 0; k < world_size(); ++k) members.push_back(k);
    std::string failed, others;
    for (int m : members) {
      if (m == r || m >= static_cast<int>(peers_.size())) continue;
      const Peer &p = peers_[static_cast<size_t>(m)];
      const std::string who = "rank " + std::to_string(m) + " (pid " + std::to_string(p.pid) + " on " + p.host + ")";
      std::string state;
      if (std::strcmp(p.host, peers_[static_cast<size_t>(r)].host) == 0 && p.pid > 0) {
        if (kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH) {
          state = "has exited";
        } else {
          // /proc/PID/stat: "pid (comm) S ...": the state letter follows the last ')'.
          std::ifstream f("/proc/" + std::to_string(p.pid) + "/stat");
          std::string line;
          std::getline(f, line);
          const size_t k = line.rfind(')');
          const char st = k != std::string::npos && k + 2 < line.size() ? line[k + 2] : '?';
          if (st == 'Z' || st == 'X') state = "has exited";
          else if (st == 'T' || st == 't') state = "is stopped";
        }
      }
      if (!state.empty()) failed += (failed.empty() ? "" : ", ") + who + " " + state;
      else others += (others.empty() ? "" : ", ") + who;
    }
    if (!failed.empty()) return "failed peer: " + failed;
    return "no peer is seen gone from here; the group's other ranks: " + (others.empty() ? std::string("none") : others);
  }

  /// Aborts every communicator once; the handles are gone afterwards (the destructor must not free them
  /// again).
  void abort_all() {
    if (aborted_.exchange(true)) return;
    for (ncclComm_t &c : comms_)
      if (c) {
        ncclCommAbort(c);
        c = nullptr;
      }
  }

  /// Polled while the backend waits for its stream: a failed peer or a collective that outlives the
  /// timeout aborts every communicator (which also unblocks the stream) and fails the run.
  static Status watch(void *ctx, double waited_s) {
    auto *self = static_cast<NcclCommunicator *>(ctx);
    static const char *const kGroup[] = {"tp", "dp", "world"};
    for (int i = 0; i < 3; ++i) {
      ncclComm_t c = self->comms_[i];
      if (!c) continue;
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c, &async);
      if (r != ncclSuccess || async != ncclSuccess) {
        const ncclResult_t bad = r != ncclSuccess ? r : async;
        const std::string peers = self->peers_of(i);
        self->abort_all();
        return error(Code::comm_error, std::string("nccl: asynchronous error on the ") + kGroup[i] +
                                           " communicator: " + ncclGetErrorString(bad) + "; " + peers +
                                           "; communicators aborted (ncclCommAbort)");
      }
    }
    if (waited_s > self->timeout_s_) {
      std::string peers;
      for (int i = 0; i < 3; ++i)
        if (self->comms_[i]) peers += std::string(peers.empty() ? "" : "; ") + kGroup[i] + " group: " + self->peers_of(i);
      self->abort_all();
      return error(Code::comm_error, "nccl: the device stream has not finished after " +
                                         std::to_string(static_cast<int>(self->timeout_s_)) +
                                         " s (ZRT_NCCL_TIMEOUT_S); " + peers + "; communicators aborted (ncclCommAbort)");
    }
    return {};
  }

  /// Marks the host thread as inside an NCCL call: an enqueue can block on the host (a full work queue
  /// behind a collective whose peer is gone), where the stream watch never runs.
  struct InCall {
    explicit InCall(NcclCommunicator *c) : self(c) {
      self->call_start_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
    }
    ~InCall() { self->call_start_ns_ = 0; }
    NcclCommunicator *self;
  };

  /// A thread that ends the job when an NCCL call has blocked the host for longer than the timeout: it
  /// names the failed peer on stderr, aborts the communicators (ncclCommAbort) and stops every rank through
  /// the control plane, as the stream watch's error would through zrun.
  void watchdog() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const int64_t t0 = call_start_ns_;
      if (!t0 || aborted_) continue;
      const double s = static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() - t0) * 1e-9;
      if (s <= timeout_s_) continue;
      std::string peers;
      static const char *const kGroup[] = {"tp", "dp", "world"};
      for (int i = 0; i < 3; ++i)
        if (comms_[i]) peers += std::string(peers.empty() ? "" : "; ") + kGroup[i] + " group: " + peers_of(i);
      std::fprintf(stderr,
                   "zrt: rank %d: error: nccl: a collective call has not returned after %d s (ZRT_NCCL_TIMEOUT_S); %s; "
                   "communicators aborted (ncclCommAbort)\n",
                   rank(), static_cast<int>(timeout_s_), peers.c_str());
      std::fflush(stderr);
      abort_all();
      ctl_->abort(1);
      return;
    }
  }

  struct Peer {
    int64_t pid = 0;
    char host[64] = {};
  };

  std::unique_ptr<Communicator> ctl_;
  std::vector<ncclUniqueId> ids_;  // per group, from world rank 0 (see set_mesh)
  std::vector<Peer> peers_;        // indexed by world rank
  ncclComm_t comms_[3] = {nullptr, nullptr, nullptr};
  int tp_ = 1, dp_ = 1;
  double timeout_s_ = 600.0;
  static constexpr int kDefaultCtas = 32;
  int ctas_ = kDefaultCtas;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> call_start_ns_{0};  // steady-clock ns when the host entered an NCCL call, or 0
  std::thread watchdog_;
};

}  // namespace

Status make_nccl_communicator(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> *out) {
  if (!control) return error(Code::invalid_argument, "nccl: a control-plane (MPI or TCP) communicator is required");
  out->reset(new NcclCommunicator(std::move(control)));
  return {};
}

}  // namespace zrt
