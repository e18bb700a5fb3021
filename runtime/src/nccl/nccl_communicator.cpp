// The NCCL communicator (see nccl_communicator.h).
//
// Groups follow docs/design.md: rank r has tp index r % tp and dp index r / tp; the tp group of dp index d
// is ranks [d * tp, (d + 1) * tp) in order, the dp group of tp index t is ranks t, t + tp, ... in order.
// NCCL ranks inside each communicator are the group ranks, so "group order" is NCCL rank order.
#include "nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../cuda/cuda_hooks.h"
#include "../cuda/cuda_status.h"
#include "nccl_status.h"

namespace zrt {
namespace {

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
  }
  ~NcclCommunicator() override {
    set_comm_watch(nullptr, nullptr);
    for (ncclComm_t &c : comms_)
      if (c) (aborted_ ? ncclCommAbort(c) : ncclCommDestroy(c));
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
    std::vector<ncclUniqueId> ids(static_cast<size_t>(ngroups));
    if (r == 0)
      for (ncclUniqueId &id : ids) ZRT_NCCL_CHECK(ncclGetUniqueId(&id));
    ZRT_RETURN_IF_ERROR(ctl_->broadcast_host(ids.data(), ids.size() * sizeof(ncclUniqueId), 0));
    const int ti = r % tp, di = r / tp;
    // Every rank creates its communicators in the same order (tp, dp, world), so no init waits on
    // a peer that is initialising another one.
    // A group of one needs no communicator (a collective over it is a copy), and skipping it keeps NCCL's
    // buffers out of a single-GPU run's memory.
    if (tp > 1) ZRT_NCCL_CHECK(ncclCommInitRank(&comms_[0], tp, ids[static_cast<size_t>(di)], ti));
    if (dp > 1) ZRT_NCCL_CHECK(ncclCommInitRank(&comms_[1], dp, ids[static_cast<size_t>(dp + ti)], di));
    if (world_size() > 1) ZRT_NCCL_CHECK(ncclCommInitRank(&comms_[2], world_size(), ids[static_cast<size_t>(dp + tp)], r));
    // Only a run with peers can hang on them; a single rank keeps the plain blocking stream wait.
    if (comms_[0] || comms_[1] || comms_[2]) set_comm_watch(&NcclCommunicator::watch, this);
    return {};
  }

  int group_size(Axis a) const override { return a == Axis::tp ? tp_ : a == Axis::dp ? dp_ : world_size(); }
  int group_rank(Axis a) const override {
    return a == Axis::tp ? rank() % tp_ : a == Axis::dp ? rank() / tp_ : rank();
  }

  Status all_reduce(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream) override {
    if (group_size(axis) == 1) return self_copy(send, recv, count * dtype_size(dtype), stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ncclDataType_t t;
    ZRT_RETURN_IF_ERROR(nccl_type(dtype, &t));
    ZRT_NCCL_CHECK(ncclAllReduce(send, recv, count, t, ncclSum, c, static_cast<cudaStream_t>(stream)));
    return {};
  }
  Status all_gather(Axis axis, const void *send, void *recv, size_t bytes, void *stream) override {
    if (group_size(axis) == 1) return self_copy(send, recv, bytes, stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ZRT_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, c, static_cast<cudaStream_t>(stream)));
    return {};
  }
  Status reduce_scatter(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *stream) override {
    if (group_size(axis) == 1) return self_copy(send, recv, count * dtype_size(dtype), stream);
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ncclDataType_t t;
    ZRT_RETURN_IF_ERROR(nccl_type(dtype, &t));
    ZRT_NCCL_CHECK(ncclReduceScatter(send, recv, count, t, ncclSum, c, static_cast<cudaStream_t>(stream)));
    return {};
  }
  Status broadcast(Axis axis, void *buf, size_t bytes, int root, void *stream) override {
    if (group_size(axis) == 1) return {};
    ncclComm_t c;
    ZRT_RETURN_IF_ERROR(comm_of(axis, &c));
    ZRT_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, c, static_cast<cudaStream_t>(stream)));
    return {};
  }
  Status barrier(Axis axis) override {
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

  Status comm_of(Axis a, ncclComm_t *c) const {
    const int i = a == Axis::tp ? 0 : a == Axis::dp ? 1 : 2;
    if (!comms_[i]) return error(Code::comm_error, "nccl: set_mesh() has not created the communicators");
    *c = comms_[i];
    return {};
  }

  void abort_all() {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_)
      if (c) ncclCommAbort(c);
  }

  /// Polled while the backend waits for its stream: a failed peer or a collective that outlives the
  /// timeout aborts every communicator (which also unblocks the stream) and fails the run.
  static Status watch(void *ctx, double waited_s) {
    auto *self = static_cast<NcclCommunicator *>(ctx);
    for (int i = 0; i < 3; ++i) {
      ncclComm_t c = self->comms_[i];
      if (!c) continue;
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c, &async);
      if (r != ncclSuccess || async != ncclSuccess) {
        const ncclResult_t bad = r != ncclSuccess ? r : async;
        self->abort_all();
        return error(Code::comm_error, std::string("nccl: asynchronous error on the ") +
                                           (i == 0 ? "tp" : i == 1 ? "dp" : "world") + " communicator: " +
                                           ncclGetErrorString(bad) + "; communicators aborted");
      }
    }
    if (waited_s > self->timeout_s_) {
      self->abort_all();
      return error(Code::comm_error, "nccl: the device stream has not finished after " +
                                         std::to_string(static_cast<int>(self->timeout_s_)) +
                                         " s (ZRT_NCCL_TIMEOUT_S); a peer is probably gone; communicators aborted");
    }
    return {};
  }

  std::unique_ptr<Communicator> ctl_;
  ncclComm_t comms_[3] = {nullptr, nullptr, nullptr};
  int tp_ = 1, dp_ = 1;
  double timeout_s_ = 600.0;
  bool aborted_ = false;
};

}  // namespace

Status make_nccl_communicator(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> *out) {
  if (!control) return error(Code::invalid_argument, "nccl: a control-plane (MPI) communicator is required");
  out->reset(new NcclCommunicator(std::move(control)));
  return {};
}

}  // namespace zrt
