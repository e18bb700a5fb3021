// The MPI communicator: tp and dp groups by MPI_Comm_split over the mesh rule, collectives on host memory,
// bf16/f16 sums through user-defined reductions that widen to fp32.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/communicator.h"

namespace zrt {

Status status_from_mpi(int rc, const char *expr, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  return error(Code::comm_error, std::string("MPI error ") + std::to_string(rc) + " (" + std::string(msg, len) + ") in " +
                                     expr + " at " + file + ":" + std::to_string(line));
}

namespace {

bool g_we_initialized = false;

void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) b[i] = zk::f32_to_bf16(zk::bf16_to_f32(a[i]) + zk::bf16_to_f32(b[i]));
}

void f16_sum(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) b[i] = zk::f32_to_f16(zk::f16_to_f32(a[i]) + zk::f16_to_f32(b[i]));
}

// Max and min of 16-bit floats compare the decoded values (the bit patterns do not order negatives).
template <float (*Load)(uint16_t), bool Max>
void half_extreme(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    if (Max ? x > y : x < y) b[i] = a[i];
  }
}

Status check_count(size_t n, const char *what) {
  if (n > static_cast<size_t>(INT_MAX))
    return error(Code::comm_error, std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int count");
  return {};
}

class MpiCommunicator final : public Communicator {
 public:
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (tp_ != MPI_COMM_NULL) MPI_Comm_free(&tp_);
    if (dp_ != MPI_COMM_NULL) MPI_Comm_free(&dp_);
    if (bf16_op_ != MPI_OP_NULL) MPI_Op_free(&bf16_op_);
    if (f16_op_ != MPI_OP_NULL) MPI_Op_free(&f16_op_);
    for (MPI_Op *o : {&bf16_max_, &bf16_min_, &f16_max_, &f16_min_})
      if (*o != MPI_OP_NULL) MPI_Op_free(o);
  }

  Status init() {
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    ZRT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    ZRT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    ZRT_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &bf16_op_));
    ZRT_MPI_CHECK(MPI_Op_create(&f16_sum, 1, &f16_op_));
    ZRT_MPI_CHECK(MPI_Op_create(&half_extreme<zk::bf16_to_f32, true>, 1, &bf16_max_));
    ZRT_MPI_CHECK(MPI_Op_create(&half_extreme<zk::bf16_to_f32, false>, 1, &bf16_min_));
    ZRT_MPI_CHECK(MPI_Op_create(&half_extreme<zk::f16_to_f32, true>, 1, &f16_max_));
    ZRT_MPI_CHECK(MPI_Op_create(&half_extreme<zk::f16_to_f32, false>, 1, &f16_min_));
    return {};
  }

  const char *name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  Status set_mesh(int tp, int dp) override {
    ZRT_RETURN_IF_ERROR(check_mesh(tp, dp, world_));
    if (tp_ != MPI_COMM_NULL) MPI_Comm_free(&tp_);
    if (dp_ != MPI_COMM_NULL) MPI_Comm_free(&dp_);
    // Rank r has tp index r % tp and dp index r / tp (docs/design.md): a tp group is the consecutive ranks
    // of one dp index, a dp group the ranks that share a tp index. The key orders members by their index.
    ZRT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank_ / tp, rank_ % tp, &tp_));
    ZRT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank_ % tp, rank_ / tp, &dp_));
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(tp_, MPI_ERRORS_RETURN));
    ZRT_MPI_CHECK(MPI_Comm_set_errhandler(dp_, MPI_ERRORS_RETURN));
    tp_size_ = tp;
    dp_size_ = dp;
    return {};
  }

  int group_size(Axis a) const override { return a == Axis::world ? world_ : mesh_group_size(a, tp_size_, dp_size_); }
  int group_rank(Axis a) const override { return mesh_group_rank(a, rank_, tp_size_); }

  Status all_reduce(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *,
                    Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_reduce, axis, count * dtype_size(dtype), dtype, -1));
    ZRT_RETURN_IF_ERROR(check_count(count, "all_reduce"));
    MPI_Datatype t;
    MPI_Op op = MPI_SUM;
    ZRT_RETURN_IF_ERROR(reduce_type(dtype, red, &t, &op));
    const void *s = send == recv ? MPI_IN_PLACE : send;
    ZRT_MPI_CHECK(MPI_Allreduce(s, recv, static_cast<int>(count), t, op, comm(axis)));
    return {};
  }

  Status all_gather(Axis axis, const void *send, void *recv, size_t bytes, void *) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::all_gather, axis, bytes, DType::bool8, -1));
    ZRT_RETURN_IF_ERROR(check_count(bytes, "all_gather"));
    ZRT_MPI_CHECK(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                                comm(axis)));
    return {};
  }

  Status reduce_scatter(Axis axis, const void *send, void *recv, size_t count, DType dtype, void *,
                        Reduction red) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::reduce_scatter, axis, count * dtype_size(dtype) * group_size(axis),
                                    dtype, -1));
    ZRT_RETURN_IF_ERROR(check_count(count, "reduce_scatter"));
    MPI_Datatype t;
    MPI_Op op = MPI_SUM;
    ZRT_RETURN_IF_ERROR(reduce_type(dtype, red, &t, &op));
    ZRT_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), t, op, comm(axis)));
    return {};
  }

  Status broadcast(Axis axis, void *buf, size_t bytes, int root, void *) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::broadcast, axis, bytes, DType::bool8, root));
    ZRT_RETURN_IF_ERROR(check_count(bytes, "broadcast"));
    ZRT_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm(axis)));
    return {};
  }

  Status barrier(Axis axis) override {
    ZRT_RETURN_IF_ERROR(check_order(CollectiveOp::barrier, axis, 0, DType::bool8, -1));
    ZRT_MPI_CHECK(MPI_Barrier(comm(axis)));
    return {};
  }

  Status agree(const uint64_t *in, uint64_t *mn, uint64_t *mx, int n) override {
    ZRT_MPI_CHECK(MPI_Allreduce(in, mn, n, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
    ZRT_MPI_CHECK(MPI_Allreduce(in, mx, n, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
    return {};
  }

  Status broadcast_host(void *buf, size_t bytes, int root) override {
    ZRT_RETURN_IF_ERROR(check_count(bytes, "broadcast_host"));
    ZRT_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
    return {};
  }

  Status gather_host(const void *send, void *recv, const size_t *counts, int root) override {
    std::vector<int> c(world_), d(world_);
    size_t at = 0;
    for (int r = 0; r < world_; ++r) {
      ZRT_RETURN_IF_ERROR(check_count(at + counts[r], "gather_host"));
      c[r] = static_cast<int>(counts[r]);
      d[r] = static_cast<int>(at);
      at += counts[r];
    }
    ZRT_MPI_CHECK(MPI_Gatherv(send, c[rank_], MPI_BYTE, recv, c.data(), d.data(), MPI_BYTE, root, MPI_COMM_WORLD));
    return {};
  }

  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  MPI_Comm comm(Axis a) const {
    switch (a) {
      case Axis::tp: return tp_;
      case Axis::dp: return dp_;
      case Axis::world: return MPI_COMM_WORLD;
      default: return MPI_COMM_SELF;
    }
  }

  /// The MPI type and operation of a reduction over `d`.
  Status reduce_type(DType d, Reduction red, MPI_Datatype *t, MPI_Op *op) const {
    const bool sum = red == Reduction::sum, max = red == Reduction::max;
    *op = sum ? MPI_SUM : max ? MPI_MAX : MPI_MIN;
    switch (d) {
      case DType::f32: *t = MPI_FLOAT; return {};
      case DType::i64: *t = MPI_INT64_T; return {};
      case DType::i32: *t = MPI_INT32_T; return {};
      case DType::bf16: *t = MPI_UINT16_T; *op = sum ? bf16_op_ : max ? bf16_max_ : bf16_min_; return {};
      case DType::f16: *t = MPI_UINT16_T; *op = sum ? f16_op_ : max ? f16_max_ : f16_min_; return {};
      default: return error(Code::comm_error, std::string("no reduction for dtype ") + dtype_name(d));
    }
  }

  int rank_ = 0, world_ = 1, tp_size_ = 1, dp_size_ = 1;
  MPI_Comm tp_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL;
  MPI_Op bf16_op_ = MPI_OP_NULL, f16_op_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL, bf16_min_ = MPI_OP_NULL, f16_max_ = MPI_OP_NULL, f16_min_ = MPI_OP_NULL;
};

}  // namespace

Status make_mpi_communicator(std::unique_ptr<Communicator> *out) {
  int inited = 0;
  ZRT_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    int provided = 0;
    // Funneled: only the main thread calls MPI (zrun's watchdog thread never does).
    ZRT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    g_we_initialized = true;
  }
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  ZRT_RETURN_IF_ERROR(c->init());
  c->set_check_collectives(check_collectives_from_env());
  *out = std::move(c);
  return {};
}

void finalize_mpi() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (g_we_initialized && inited && !finalized) MPI_Finalize();
}

}  // namespace zrt

#include "zrt/zrt.h"

namespace zrt {

void shutdown() { finalize_mpi(); }

void abort_job(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace zrt
