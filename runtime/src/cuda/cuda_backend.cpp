// The CUDA backend: one device arena (cudaMalloc) and one pinned host arena (cudaHostAlloc) per rank, the
// zk::cuda kernels and cuBLASLt for every compute opcode, and CUDA graph replay of the whole step.
//
// Ordering is the plan's and nothing else. Each plan stream is one CUDA stream (compute, comm, copy) and
// each plan event one CUDA event: before an instruction its stream waits for the plan's `waits`, after it
// the plan's `signal` is recorded on that stream; collectives (issued by the communicator on
// native_stream(comm)) are ordered the same way through enter()/leave(). The backend tracks no dependencies
// of its own and rewrites no step. The only joins it adds are the run's edges: at the start of a run the comm
// and copy streams wait for the compute stream (so a run follows the previous one and the host's writes),
// and synchronize() joins them back into the compute stream (so outputs are complete when read, and a
// capture is closed).
//
// Host steps: an instruction whose outputs all lie in the pinned host arena (the optimizer step that
// --offload-optimizer cpu|nvme placed on the host: AdamW on the master part and moments, the fill of a moment at
// @init, the narrowing of an fp32 master part into a 16-bit parameter shard's NVMe staging buffer) runs on the
// CPU through the CPU backend's own kernels (its threaded AdamW included), so that both backends update the
// host state with the same code. The host waits for the step's stream, which enter() made wait for the plan's
// events, then runs the step; the step's signal is recorded after it, so the device work that follows sees its
// writes. Its scalar operands that live on the device (lr, step, the gradient scale) are copied down first. A
// program with a host step is not captured as a CUDA graph.
//
// Profiling (ZRT_CUDA_PROFILE=1, not with graphs): events around every step on its stream, summed per class
// (matrix products, attention, norms, elementwise, data movement, copies, collectives) and printed when the
// backend is destroyed. With several streams busy at once the classes overlap, so their sum can exceed the
// run's time.
//
// CUDA graphs (ZRT_CUDA_GRAPH=1, what zrun's --cuda-graph and --generate set): the second run of each program
// is captured from the compute stream, forking into the comm and copy streams through the plan's own events, NCCL's collectives
// included (NCCL supports stream capture; its connections were set up by the first run), and later runs
// replay it. A program with a host barrier is not captured (a barrier waits on the host). Each program has
// its own graph: a generation plan's decode program is captured on its second step and replayed for every
// later token, while its prefill, run once, is not.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda_hooks.h"
#include "cuda_status.h"
#include "kernel_args.h"
#include "zk/attention_kernels.h"
#include "zk/cuda_decode.h"
#include "zk/cuda_kernels.h"
#include "zk/cuda_rotary.h"
#include "zk/cuda_train_kernels.h"
#include "zk/cuda_workspace.h"
#include "zrt/backend.h"
#include "zrt/ops.h"
#include "zrt/plan_generated.h"

namespace zrt {

// --- the watch hook (cuda_hooks.h) --------------------------------------------------------------------------
namespace {
CommWatch g_watch = nullptr;
void *g_watch_ctx = nullptr;
}  // namespace

void set_comm_watch(CommWatch fn, void *ctx) {
  g_watch = fn;
  g_watch_ctx = ctx;
}

Status poll_comm_watch(double waited_s) { return g_watch ? g_watch(g_watch_ctx, waited_s) : Status(); }

Status wait_stream(void *stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (!g_watch) {
    ZRT_CUDA_CHECK(cudaStreamSynchronize(s));
    return {};
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return {};
    if (e != cudaErrorNotReady) return status_from_cuda(e, "cudaStreamQuery(stream)", __FILE__, __LINE__);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ZRT_RETURN_IF_ERROR(poll_comm_watch(waited));
    std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 5 : 50));
  }
}

Status select_cuda_device(int *device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::string why;
    zk::cuda::device_usable(0, &why);
    return error(Code::backend_error, "cuda backend: " + why);
  }
  int local = 0;
  for (const char *v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *s = std::getenv(v)) {
      local = std::atoi(s);
      break;
    }
  const int dev = local % n;
  ZRT_CUDA_CHECK(cudaSetDevice(dev));
  if (device) *device = dev;
  return {};
}

namespace {

using zk::cuda::Epilogue;

/// The attention's int that names its kernel (plan 2.11; ops.def): after causal, seq_major and the nine
/// packing ints.
constexpr size_t kAttentionKernelInt = 11;

/// decode_layer's sizes (plan 2.17, zrt/ops.def): x [B, (1,) d], the caches [B, Hkv, L, Dh], wq [d, Hq Dh],
/// w_gate [d, F]; the plan's verifier has checked them.
zk::cuda::workspace::DecodeLayerDims decode_layer_dims(const Step &s) {
  const TensorRef &x = s.inputs[0], &c = s.inputs[1];
  const int64_t d = x.shape[x.rank - 1], dh = c.shape[3];
  return {x.numel() / d, d, s.inputs[8].shape[1] / dh, c.shape[1], dh, s.inputs[13].shape[1],
          static_cast<int64_t>(dtype_size(x.dtype))};
}

/// decode_layer's kernel arguments (zk::cuda::decode_layer): the rows of x, the residual and the results as
/// [B, d]; the sync state's words. `early`: the weights may be read before the previous kernel has finished (the
/// plan's decision, Step::early).
zk::cuda::DecodeLayerArgs decode_layer_args(const Step &s, bool early) {
  const zk::cpu::DecodeLayerIn a = decode_layer_in(s);
  const zk::cuda::workspace::DecodeLayerDims dims = decode_layer_dims(s);
  auto rows = [&](auto t) {
    if (t.data) t.shape = zk::Dims{dims.rows, dims.dim};
    return t;
  };
  zk::cuda::DecodeLayerArgs g;
  g.x = rows(a.x), g.residual = rows(a.residual);
  g.norm1 = a.norm1, g.norm2 = a.norm2, g.wq = a.wq, g.wk = a.wk, g.wv = a.wv, g.wo = a.wo;
  g.w_gate = a.w_gate, g.w_up = a.w_up, g.w_down = a.w_down, g.cos = a.cos, g.sin = a.sin, g.pos = a.pos;
  g.k_cache = out_of(s.outputs[2]), g.v_cache = out_of(s.outputs[3]);
  g.out = rows(out_of(s.outputs[0])), g.residual_out = rows(out_of(s.outputs[1]));
  g.sync = s.outputs[4].data;
  g.heads = dims.heads;
  g.eps = static_cast<float>(s.floats[0]), g.scale = static_cast<float>(s.floats[1]);
  g.act = static_cast<zk::cpu::Unary>(s.ints[0]);
  g.early = early;
  return g;
}

/// Bytes of device workspace a training or run-time kernel needs for this step (0 for every other op).
size_t kernel_workspace(const Step &s) {
  switch (s.op) {
    case Op::attention_grad: return zk::cuda::attention_grad_workspace(in_of(s.inputs[0]));
    case Op::layer_norm_grad: return zk::cuda::layer_norm_grad_workspace(in_of(s.inputs[0]), static_cast<int>(s.ints[0]));
    case Op::rms_norm_grad: return zk::cuda::rms_norm_grad_workspace(in_of(s.inputs[0]));
    case Op::embedding_grad: return zk::cuda::embedding_grad_workspace(out_of(s.outputs[0]));
    case Op::sum_squares: return zk::cuda::sum_squares_workspace();
    case Op::cached_attention: {
      const zk::In q = in_of(s.inputs[0]), k = in_of(s.inputs[1]);
      if (q.shape.rank != 4 || k.shape.rank != 4) return 0;
      return zk::cuda::workspace::cached_attention(q.shape.d[0], q.shape.d[1], q.shape.d[2], q.shape.d[3],
                                                   k.shape.d[1], k.shape.d[2]);
    }
    case Op::rope_attention: {
      const zk::In q = in_of(s.inputs[0]), k = in_of(s.inputs[5]);
      if (q.shape.rank != 4 || k.shape.rank != 4) return 0;
      return zk::cuda::workspace::rope_attention(q.shape.d[0], q.shape.d[1], q.shape.d[2], q.shape.d[3],
                                                 k.shape.d[1], k.shape.d[2], static_cast<int64_t>(dtype_size(q.dtype)));
    }
    case Op::decode_layer: return zk::cuda::workspace::decode_layer(decode_layer_dims(s));
    default: return 0;
  }
}

/// The profile's class of an op (an index into kClassNames), from the op registry's category (zrt/ops.def)
/// and, for the compute ops, the op itself: no opcode numbers here, so that new ops land in a class by
/// their category.
int class_of(Op op) {
  const OpInfo *info = op_info(static_cast<uint16_t>(op));
  switch (op) {
    case Op::matmul:
    case Op::linear:
    case Op::linear_gelu:
    case Op::linear_residual:
    case Op::linear_multi:
    case Op::linear_gated:
    case Op::norm_products: return 0;
    case Op::attention:
    case Op::attention_grad:
    case Op::cached_attention:
    case Op::rope_attention:
    case Op::decode_layer: return 1;
    case Op::softmax:
    case Op::layer_norm:
    case Op::rms_norm:
    case Op::residual_norm:
    case Op::reduce_sum:
    case Op::reduce_mean:
    case Op::reduce_max: return 2;
    case Op::reshape: return 5;
    case Op::transpose:
    case Op::concat:
    case Op::slice:
    case Op::gather:
    case Op::expand:
    case Op::embedding:
    case Op::kv_write:
    case Op::rope_kv_write:
    case Op::take_rows: return 4;
    default: break;
  }
  if (!info) return 3;
  switch (info->category) {
    case OpCategory::transfer: return 5;
    case OpCategory::collective:
    case OpCategory::zero: return 6;
    default: return 3;
  }
}

const char *const kClassNames[] = {"gemm", "attention", "norm/softmax", "elementwise", "movement", "copy", "collective"};
constexpr int kClasses = 7;

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    if (profile_ && prof_runs_ > 0) {
      double total = 0;
      for (double t : class_ms_) total += t;
      std::fprintf(stderr, "zrt cuda: profile over %d runs, per run: total %.3f ms", prof_runs_, total / prof_runs_);
      for (int c = 0; c < kClasses; ++c)
        std::fprintf(stderr, "; %s %.3f ms (%.1f%%)", kClassNames[c], class_ms_[c] / prof_runs_,
                     total > 0 ? 100.0 * class_ms_[c] / total : 0.0);
      std::fprintf(stderr, "\n");
      // The ops that take the time, largest first (ZRT_CUDA_PROFILE_TOP of them, default 12).
      std::vector<int> order;
      for (int k = 0; k < 65536; ++k)
        if (op_n_[k] > 0) order.push_back(k);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return op_ms_[a] > op_ms_[b]; });
      const char *top = std::getenv("ZRT_CUDA_PROFILE_TOP");
      const size_t n = std::min(order.size(), static_cast<size_t>(top ? std::atoi(top) : 12));
      for (size_t k = 0; k < n; ++k)
        std::fprintf(stderr, "zrt cuda: profile op %-18s %9.3f ms per run (%5.1f%%) in %6.0f steps\n",
                     zrt::op_name(static_cast<uint16_t>(order[k])), op_ms_[order[k]] / prof_runs_,
                     total > 0 ? 100.0 * op_ms_[order[k]] / total : 0.0, op_n_[order[k]] / prof_runs_);
    }
    if (streams_[0]) cudaDeviceSynchronize();
    for (auto &e : prof_events_) {
      cudaEventDestroy(e.first);
      cudaEventDestroy(e.second);
    }
    if (report_) {
      std::fprintf(stderr,
                   "zrt cuda: device memory in use (cudaMemGetInfo) peak %.1f MiB (at start %.1f MiB); arenas + "
                   "workspace allocated by zrt %.1f MiB\n",
                   peak_used_ / 1048576.0, base_used_ / 1048576.0, allocated_ / 1048576.0);
    }
    for (Captured &c : captured_) {
      if (c.exec) cudaGraphExecDestroy(c.exec);
      if (c.graph) cudaGraphDestroy(c.graph);
    }
    if (workspace_) cudaFree(workspace_);
    if (kernel_ws_) cudaFree(kernel_ws_);
    blas_.reset();
    for (cudaEvent_t e : plan_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : edge_events_) cudaEventDestroy(e);
    for (cudaStream_t &st : streams_)
      if (st) cudaStreamDestroy(st);
  }

  const char *name() const override { return "cuda"; }
  BackendKind kind() const override { return BackendKind::cuda; }

  Status allocate(MemSpace space, size_t bytes, void **out) override {
    ZRT_RETURN_IF_ERROR(init());
    const size_t n = bytes ? bytes : 256;
    if (space == MemSpace::device) {
      std::string why;
      if (!zk::cuda::device_usable(n, &why))
        return error(Code::backend_error, "cuda backend: cannot allocate the " + std::to_string(bytes >> 20) +
                                              " MiB device arena: " + why);
      ZRT_CUDA_CHECK(cudaMalloc(out, n));
    } else {
      // Pinned, so that prefetch / evict copies run asynchronously on the stream.
      ZRT_CUDA_CHECK(cudaHostAlloc(out, n, cudaHostAllocDefault));
    }
    allocated_ += space == MemSpace::device ? n : 0;
    note_memory();
    return {};
  }

  void deallocate(MemSpace space, void *p) override {
    if (!p) return;
    if (streams_[0]) cudaDeviceSynchronize();
    if (space == MemSpace::device) cudaFree(p);
    else cudaFreeHost(p);
  }

  // Host traffic happens between runs: synchronize() has joined every stream into the compute stream.
  Status write(MemSpace space, void *dst, const void *src, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(streams_[0]));
    if (space == MemSpace::host) std::memcpy(dst, src, bytes);
    else ZRT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return {};
  }

  Status read(MemSpace space, void *dst, const void *src, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(streams_[0]));
    if (space == MemSpace::host) std::memcpy(dst, src, bytes);
    else ZRT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return {};
  }

  Status zero(MemSpace space, void *dst, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(streams_[0]));
    if (space == MemSpace::host) std::memset(dst, 0, bytes);
    else ZRT_CUDA_CHECK(cudaMemset(dst, 0, bytes));
    return {};
  }

  /// On the stream of the instruction being issued (a collective's permutation runs on the comm stream).
  Status copy_blocks(void *dst, size_t dst_stride, const void *src, size_t src_stride, size_t block,
                     size_t count) override {
    if (!block || !count) return {};
    if (count == 1) {
      ZRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, block, cudaMemcpyDefault, cur_));
      return {};
    }
    ZRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, block, count, cudaMemcpyDefault, cur_));
    return {};
  }

  Status set_num_events(int num_events) override {
    ZRT_RETURN_IF_ERROR(init());
    while (static_cast<int>(plan_events_.size()) < num_events) {
      cudaEvent_t e;
      ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      plan_events_.push_back(e);
    }
    return {};
  }

  Status prepare(const RankInfo &rank, const std::vector<Step> &steps, size_t *scratch_bytes) override {
    ZRT_RETURN_IF_ERROR(init());
    rank_ = rank;
    bool gemm = false;
    size_t kernel_ws = 0;
    std::vector<Step> host_steps;
    size_t host_scalars = 0;
    for (const Step &s : steps) {
      if (is_host_step(s)) {
        size_t n = 0;
        ZRT_RETURN_IF_ERROR(check_host_step(s, &n));
        host_scalars = std::max(host_scalars, n);
        host_steps.push_back(s);
        continue;
      }
      ZRT_RETURN_IF_ERROR(check_supported(s));
      const auto op = s.op;
      gemm = gemm || op == Op::matmul || op == Op::linear || op == Op::linear_gelu || op == Op::linear_residual ||
             op == Op::linear_multi ||
             op == Op::linear_gated || op == Op::norm_products || op == Op::decode_layer;
      kernel_ws = std::max(kernel_ws, kernel_workspace(s));
    }
    // The steps passed here are the compute steps; the executor holds the collectives. A barrier among
    // them is found in enter() and stops capture there, before any capture begins (see begin_run()).
    graph_ok_ = graph_wanted_ && !capture_forbidden_ && !steps.empty() && host_steps.empty();
    size_t scratch = 0;
    if (!host_steps.empty()) {
      host_ = make_cpu_backend();
      size_t host_scratch = 0;
      ZRT_RETURN_IF_ERROR(host_->prepare(rank, host_steps, &host_scratch));
      scratch += host_scratch;
      host_scalars_.assign(host_scalars, 0);
    }
    if (gemm) {
      // Which products read their weights before the wait for the previous kernel is the plan's (Step::early,
      // plan 2.18), passed at each launch: the backend declares no written ranges and decides nothing.
      ZRT_GPU_CHECK(zk::cuda::Blas::create(&blas_));
      ZRT_CUDA_CHECK(cudaMalloc(&workspace_, zk::cuda::kGemmWorkspaceBytes));
      workspace_bytes_ = zk::cuda::kGemmWorkspaceBytes;
      scratch += workspace_bytes_;
      allocated_ += workspace_bytes_;
    }
    // One workspace for the training kernels: compute steps run one at a time on the compute stream.
    if (kernel_ws) {
      kernel_ws_bytes_ = kernel_ws;
      ZRT_CUDA_CHECK(cudaMalloc(&kernel_ws_, kernel_ws));
      scratch += kernel_ws;
      allocated_ += kernel_ws;
    }
    note_memory();
    *scratch_bytes = scratch;
    if (report_)
      std::fprintf(stderr, "zrt cuda: %zu compute steps, %zu plan events, cuda graph %s\n", steps.size(),
                   plan_events_.size(), graph_ok_ ? "wanted" : "off");
    return {};
  }

  Status begin_run(int program, bool *replayed) override {
    ZRT_RETURN_IF_ERROR(init());
    // A captured graph holds one program's run; each program has its own.
    if (program < 0) return error(Code::backend_error, "cuda backend: program " + std::to_string(program));
    if (captured_.size() <= static_cast<size_t>(program)) captured_.resize(static_cast<size_t>(program) + 1);
    program_ = program;
    Captured &c = captured_[static_cast<size_t>(program)];
    *replayed = c.exec != nullptr;
    in_run_ = true;
    if (*replayed) return {};
    // The second run is captured: the first one has loaded modules, chosen GEMM algorithms and let NCCL
    // connect its peers, none of which may happen inside a capture.
    if (graph_ok_ && !c.barrier && c.runs == 1) {
      ZRT_CUDA_CHECK(cudaStreamBeginCapture(streams_[0], cudaStreamCaptureModeThreadLocal));
      capturing_ = true;
    }
    // The run's opening edge: comm and copy follow everything on the compute stream before this run.
    ZRT_CUDA_CHECK(cudaEventRecord(edge_events_[0], streams_[0]));
    ZRT_CUDA_CHECK(cudaStreamWaitEvent(streams_[1], edge_events_[0], 0));
    ZRT_CUDA_CHECK(cudaStreamWaitEvent(streams_[2], edge_events_[0], 0));
    cur_ = streams_[0];
    return {};
  }

  Status enter(const Step &s) override {
    if (s.stream > 2) return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) +
                                                            " names stream " + std::to_string(s.stream));
    if (s.op == Op::barrier) {
      if (program_ < static_cast<int>(captured_.size())) captured_[static_cast<size_t>(program_)].barrier = true;
      if (capturing_)
        return error(Code::backend_error, "cuda backend: a host barrier cannot be captured in a CUDA graph");
    }
    cur_ = streams_[s.stream];
    for (int w : s.waits) {
      if (w < 0 || w >= static_cast<int>(plan_events_.size()))
        return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " waits on event " +
                                              std::to_string(w) + " of " + std::to_string(plan_events_.size()));
      ZRT_CUDA_CHECK(cudaStreamWaitEvent(cur_, plan_events_[static_cast<size_t>(w)], 0));
    }
    if (profile_ && !graph_wanted_) ZRT_RETURN_IF_ERROR(profile_mark(s, true));
    return {};
  }

  // NVMe transfers (plan 2.3) run on the executor's I/O threads: a read may overwrite a staging buffer only
  // once the copy that last read it has finished, and a write may read one only once it is filled.
  Status host_wait(int event) override {
    if (event < 0 || event >= static_cast<int>(plan_events_.size()))
      return error(Code::backend_error, "cuda backend: waiting on event " + std::to_string(event) + " of " +
                                            std::to_string(plan_events_.size()));
    ZRT_CUDA_CHECK(cudaEventSynchronize(plan_events_[static_cast<size_t>(event)]));
    return {};
  }

  // A captured run would replay the device work without the transfers the executor issues between it.
  void disallow_capture() override { capture_forbidden_ = true; }

  Status leave(const Step &s) override {
    if (profile_ && !graph_wanted_) ZRT_RETURN_IF_ERROR(profile_mark(s, false));
    if (s.signal >= 0) {
      if (s.signal >= static_cast<int>(plan_events_.size()))
        return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " signals event " +
                                              std::to_string(s.signal) + " of " + std::to_string(plan_events_.size()));
      ZRT_CUDA_CHECK(cudaEventRecord(plan_events_[static_cast<size_t>(s.signal)], cur_));
    }
    return {};
  }

  Status execute(const Step &s) override {
    cur_ = streams_[s.stream <= 2 ? s.stream : 0];
    if (host_ && is_host_step(s)) return run_on_host(s);
    return dispatch(s);
  }

  Status synchronize() override {
    ZRT_RETURN_IF_ERROR(init());
    if (captured_.size() <= static_cast<size_t>(program_)) captured_.resize(static_cast<size_t>(program_) + 1);
    Captured &c = captured_[static_cast<size_t>(program_)];
    if (!c.exec || capturing_) {
      // The run's closing edge: the compute stream follows comm and copy (this also joins a capture's forks).
      ZRT_CUDA_CHECK(cudaEventRecord(edge_events_[1], streams_[1]));
      ZRT_CUDA_CHECK(cudaEventRecord(edge_events_[2], streams_[2]));
      ZRT_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], edge_events_[1], 0));
      ZRT_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], edge_events_[2], 0));
    }
    if (capturing_) {
      capturing_ = false;
      cudaGraph_t g = nullptr;
      ZRT_CUDA_CHECK(cudaStreamEndCapture(streams_[0], &g));
      c.graph = g;
      ZRT_CUDA_CHECK(cudaGraphInstantiate(&c.exec, c.graph, 0));
      if (report_) {
        size_t nodes = 0;
        cudaGraphGetNodes(c.graph, nullptr, &nodes);
        std::fprintf(stderr, "zrt cuda: captured program %d's run as a CUDA graph of %zu nodes\n", program_, nodes);
      }
    }
    // A replay is launched by the run it stands for; a synchronize() outside a run (reading state) only waits.
    if (c.exec && in_run_) ZRT_CUDA_CHECK(cudaGraphLaunch(c.exec, streams_[0]));
    ZRT_RETURN_IF_ERROR(wait_stream(streams_[0]));
    ZRT_CUDA_CHECK(cudaGetLastError());
    if (prof_next_ > 0) {
      // The first run pays for module loading and algorithm selection: profile the later ones.
      if (runs_ > 0) {
        for (size_t k = 0; k < prof_next_; ++k) {
          float ms = 0;
          ZRT_CUDA_CHECK(cudaEventElapsedTime(&ms, prof_events_[k].first, prof_events_[k].second));
          class_ms_[prof_class_[k]] += ms;
          op_ms_[prof_op_[k]] += ms;
          op_n_[prof_op_[k]] += 1;
        }
        ++prof_runs_;
      }
      prof_next_ = 0;
    }
    ++runs_;
    if (in_run_) ++c.runs;
    in_run_ = false;
    note_memory();
    return {};
  }

  void *native_stream(uint8_t stream) override { return streams_[stream <= 2 ? stream : 0]; }

  uint64_t process_peak_bytes() override {
    note_memory();
    return peak_used_;
  }

 private:
  Status profile_mark(const Step &s, bool begin) {
    if (begin) {
      if (prof_next_ == prof_events_.size()) {
        std::pair<cudaEvent_t, cudaEvent_t> e;
        ZRT_CUDA_CHECK(cudaEventCreate(&e.first));
        ZRT_CUDA_CHECK(cudaEventCreate(&e.second));
        prof_events_.push_back(e);
        prof_class_.push_back(0);
        prof_op_.push_back(0);
      }
      prof_class_[prof_next_] = class_of(s.op);
      prof_op_[prof_next_] = static_cast<uint16_t>(s.op);
      ZRT_CUDA_CHECK(cudaEventRecord(prof_events_[prof_next_].first, cur_));
      return {};
    }
    ZRT_CUDA_CHECK(cudaEventRecord(prof_events_[prof_next_].second, cur_));
    ++prof_next_;
    return {};
  }

  Status init() {
    if (streams_[0]) return {};
    ZRT_RETURN_IF_ERROR(select_cuda_device(&device_));
    std::string why;
    if (!zk::cuda::device_usable(0, &why)) return error(Code::backend_error, "cuda backend: " + why);
    for (cudaStream_t &st : streams_) ZRT_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (cudaEvent_t &e : edge_events_) ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cur_ = streams_[0];
    const char *g = std::getenv("ZRT_CUDA_GRAPH");
    graph_wanted_ = g && std::strcmp(g, "0") != 0;
    const char *r = std::getenv("ZRT_CUDA_REPORT");
    report_ = r && std::strcmp(r, "0") != 0;
    const char *pr = std::getenv("ZRT_CUDA_PROFILE");
    profile_ = pr && std::strcmp(pr, "0") != 0;
    size_t free_b = 0, total_b = 0;
    ZRT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    base_used_ = total_b - free_b;
    peak_used_ = base_used_;
    return {};
  }

  void note_memory() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_used_ = std::max(peak_used_, total_b - free_b);
  }

  /// The cuBLASLt algorithm the plan names for a product (plan 2.15: ints 2..8 after [trans_w, 0]), filled
  /// into *a; null when the plan names none (the heuristic's first answer runs).
  static const zk::cuda::GemmAlgo *gemm_algo(const Step &s, zk::cuda::GemmAlgo *a) {
    if (s.ints.size() != 2 + zk::cuda::GemmAlgo::kInts) return nullptr;
    const auto i = [&](size_t k) { return static_cast<int32_t>(s.ints[2 + k]); };
    *a = zk::cuda::GemmAlgo{i(0), i(1), i(2), i(3), i(4), i(5), i(6)};
    return a;
  }

  Status check_supported(const Step &s) const {
    const auto op = s.op;
    const int v = static_cast<int>(s.op);
    // Every op the registry (zrt/ops.def) lists runs here except those the executor hands to the
    // communicator (collectives and ZeRO gathers); release only ends a lifetime.
    const OpInfo *info = op_info(static_cast<uint16_t>(v));
    const bool known = info && !info->on_communicator();
    if (!known) return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                                                      "'): opcode " + std::to_string(v) + " is not a compute op");
    for (const TensorRef &t : s.inputs)
      if (t.data && t.space == MemSpace::host && op != Op::prefetch)
        return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                                              "') reads host tensor " + std::to_string(t.index) +
                                              " directly; only prefetch may (the plan must prefetch it first)");
    if (op == Op::attention && s.ints.size() > kAttentionKernelInt) return check_attention_kernel(s);
    if (op == Op::decode_layer) return check_decode_layer(s);
    return {};
  }

  /// A decode_layer step (plan 2.17) runs the persistent kernel, which takes at most 4 rows, head dim 64 or
  /// 128 ... (zk::cuda::decode_layer_check): a plan with a layer it does not take (compiled for another target)
  /// fails here, before anything runs; and its sync state must hold the kernel's counts.
  Status check_decode_layer(const Step &s) const {
    const std::string at = "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name + "'): ";
    const uint64_t words = zk::cuda::workspace::decode_layer_sync_words(decode_layer_dims(s));
    if (static_cast<uint64_t>(s.inputs[3].numel()) < words)
      return error(Code::backend_error, at + "the sync state holds " + std::to_string(s.inputs[3].numel()) +
                                            " words, the persistent layer kernel needs " + std::to_string(words));
    if (zk::cuda::GpuStatus g = zk::cuda::decode_layer_check(decode_layer_args(s, false)); !g.ok())
      return error(Code::backend_error, at + g.message + " (recompile the plan with zplan --target cuda)");
    return {};
  }

  /// The plan's attention kernel (plan 2.11) must run on this device: a wgmma kernel (sm_90a code) on any
  /// other than compute capability 9.0 fails here, before anything runs, rather than at its first launch or,
  /// worse, by running another kernel than the plan says.
  Status check_attention_kernel(const Step &s) const {
    const int code = static_cast<int>(s.ints[kAttentionKernelInt]);
    const zk::cuda::AttentionKernel *k = zk::cuda::attention_kernel(code);
    if (!k)
      return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                                            "') names attention kernel code " + std::to_string(code) +
                                            ", which this runtime does not have");
    int major = 0, minor = 0;
    ZRT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    ZRT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    if (zk::cuda::attention_kernel_runs_on(*k, major, minor)) return {};
    return error(Code::backend_error,
                 "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                     "') runs attention kernel '" + k->name + "' (" + zk::cuda::attention_kernel_needs(*k) +
                     ") but device " + std::to_string(device_) + " is sm_" + std::to_string(major * 10 + minor) +
                     " (compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                     "): recompile the plan with zplan --cuda-arch sm_" + std::to_string(major * 10 + minor));
  }

  /// Whether a step runs on the host: a compute step (not a transfer) whose outputs all lie in host memory.
  static bool is_host_step(const Step &s) {
    if (s.op == Op::prefetch || s.op == Op::evict || s.outputs.empty()) return false;
    for (const TensorRef &t : s.outputs)
      if (t.space != MemSpace::host) return false;
    return true;
  }

  /// A host step may read the device only for scalars (the optimizer's lr, step and gradient scale), which
  /// run_on_host() copies down; anything larger must come down through the plan's own evict. `*scalars` is
  /// the number of such operands.
  static Status check_host_step(const Step &s, size_t *scalars) {
    *scalars = 0;
    for (const TensorRef &t : s.inputs) {
      if (!t.data || t.space == MemSpace::host) continue;
      if (t.numel() != 1 || dtype_size(t.dtype) > sizeof(uint64_t))
        return error(Code::backend_error, "cuda backend: host instruction " + std::to_string(s.index) + " ('" +
                                              s.name + "') reads device tensor " + std::to_string(t.index) +
                                              ", which is not a scalar (the plan must evict it first)");
      ++*scalars;
    }
    return {};
  }

  /// One host step: wait for what it depends on, copy its device scalars down, run the CPU kernel.
  Status run_on_host(const Step &s) {
    if (program_ < static_cast<int>(captured_.size())) captured_[static_cast<size_t>(program_)].barrier = true;
    if (capturing_)
      return error(Code::backend_error, "cuda backend: host instruction " + std::to_string(s.index) + " ('" + s.name +
                                            "') cannot be captured in a CUDA graph");
    ZRT_RETURN_IF_ERROR(wait_stream(cur_));
    Step h = s;
    size_t k = 0;
    for (TensorRef &t : h.inputs) {
      if (!t.data || t.space == MemSpace::host) continue;
      void *dst = &host_scalars_[k++];
      ZRT_CUDA_CHECK(cudaMemcpy(dst, t.data, dtype_size(t.dtype), cudaMemcpyDeviceToHost));
      t.data = dst;
      t.space = MemSpace::host;
    }
    return host_->execute(h);
  }

  Status copy(const TensorRef &from, const TensorRef &to) {
    if (from.data == to.data) return {};
    const size_t n = static_cast<size_t>(from.numel()) * dtype_size(from.dtype);
    if (n) ZRT_CUDA_CHECK(cudaMemcpyAsync(to.data, from.data, n, cudaMemcpyDefault, cur_));
    return {};
  }

  Status dispatch(const Step &s) {
    namespace zc = zk::cuda;
    using zk::cpu::Binary;
    using zk::cpu::Reduce;
    using zk::cpu::Unary;
    const auto op = s.op;
    const int v = static_cast<int>(s.op);
    cudaStream_t st = cur_;
    if (v <= 15) {
      ZRT_GPU_CHECK(zc::unary(static_cast<Unary>(v), in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (op == Op::cast) {
      ZRT_GPU_CHECK(zc::cast(in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (op == Op::not_) {
      ZRT_GPU_CHECK(zc::unary(Unary::not_, in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (v >= 32 && v <= 45) {
      ZRT_GPU_CHECK(zc::binary(static_cast<Binary>(v - 32), in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), st));
      return {};
    }
    switch (op) {
      case Op::where:
        ZRT_GPU_CHECK(zc::where(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]), st));
        return {};
      case Op::matmul:
        // ints[2] (plan 2.9 / 2.14): the compiler's choice of the few-row kernel (zk/few_rows_kernels.h).
        // Step::early (plan 2.18): the few-row kernels load b before the wait.
        ZRT_GPU_CHECK(zc::matmul(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0,
                                 s.ints[1] != 0, workspace_, workspace_bytes_, st,
                                 s.ints.size() > 2 ? static_cast<zk::cuda::FewRows>(s.ints[2]) : zk::cuda::FewRows::library,
                                 s.early));
        return {};
      case Op::linear: {
        const bool bias = s.inputs.size() > 2 && s.inputs[2].data;
        zc::GemmAlgo algo;
        ZRT_GPU_CHECK(zc::linear(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]),
                                 s.ints[0] != 0, static_cast<float>(s.floats[0]), bias ? Epilogue::bias : Epilogue::none,
                                 workspace_, workspace_bytes_, st,
                                 s.ints.size() > 1 ? static_cast<zk::cuda::FewRows>(s.ints[1]) : zk::cuda::FewRows::library,
                                 gemm_algo(s, &algo), s.early));
        return {};
      }
      case Op::linear_multi: {
        // The plan's fused few-row products (plan 2.9, --zplan-decode-products): one launch for every weight.
        zk::In w[4];
        zk::Out o[4];
        const int n = static_cast<int>(s.outputs.size());
        if (n < 2 || n > 4 || s.inputs.size() != static_cast<size_t>(n) + 1)
          return error(Code::backend_error, "linear_multi: needs one output per weight, two to four");
        for (int i = 0; i < n; ++i) {
          w[i] = in_of(s.inputs[1 + i]);
          o[i] = out_of(s.outputs[i]);
        }
        // ints[1] (plan 2.14): the few-row kernel; without it the cluster kernels, as before 2.14.
        ZRT_GPU_CHECK(zc::linear_multi(*blas_, in_of(s.inputs[0]), w, o, n, s.ints[0] != 0,
                                       static_cast<float>(s.floats[0]), st,
                                       s.ints.size() > 1 ? static_cast<zk::cuda::FewRows>(s.ints[1]) : zk::cuda::FewRows::cluster,
                                       s.early));
        return {};
      }
      case Op::linear_gated:
        // ints[2] (plan 2.14): the few-row kernel; without it the cluster kernels, as before 2.14.
        ZRT_GPU_CHECK(zc::linear_gated(*blas_, static_cast<Unary>(s.ints[1]), in_of(s.inputs[0]), in_of(s.inputs[1]),
                                       in_of(s.inputs[2]), out_of(s.outputs[0]), s.ints[0] != 0,
                                       static_cast<float>(s.floats[0]), st,
                                       s.ints.size() > 2 ? static_cast<zk::cuda::FewRows>(s.ints[2]) : zk::cuda::FewRows::cluster,
                                       s.early));
        return {};
      case Op::norm_products: {
        // Plan 2.12: the residual add and RMS norm folded into the few-row products that read them.
        zk::In w[4];
        zk::Out o[4];
        const bool gated = s.ints[1] != 0;
        const int n = static_cast<int>(s.inputs.size()) - 3;
        if (n < 1 || n > 4 || s.outputs.size() != (gated ? 2u : static_cast<size_t>(n) + 1))
          return error(Code::backend_error, "norm_products: needs the sum and the products' outputs");
        for (int i = 0; i < n; ++i) w[i] = in_of(s.inputs[3 + i]);
        for (size_t i = 1; i < s.outputs.size(); ++i) o[i - 1] = out_of(s.outputs[i]);
        ZRT_GPU_CHECK(zc::norm_products(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), w,
                                        out_of(s.outputs[0]), o, n, static_cast<Unary>(gated ? s.ints[1] : 0), gated,
                                        static_cast<float>(s.floats[0]), static_cast<float>(s.floats[1]), st,
                                        s.early));
        return {};
      }
      case Op::linear_gelu: {
        // The plan's fused step (compiler/plan/Fuse.cpp): one product with the GELU (+ bias) epilogue.
        const bool bias = s.inputs.size() > 2 && s.inputs[2].data;
        ZRT_GPU_CHECK(zc::linear(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]),
                                 s.ints[0] != 0, static_cast<float>(s.floats[0]),
                                 bias ? Epilogue::gelu_bias : Epilogue::gelu, workspace_, workspace_bytes_, st));
        return {};
      }
      case Op::linear_residual: {
        // The plan's fused step (plan 2.13, compiler/plan/Fuse.cpp): the product with the residual add after it
        // in its epilogue (C = the residual, beta = 1).
        zc::GemmAlgo algo;
        ZRT_GPU_CHECK(zc::linear_residual(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 3),
                                          in_of(s.inputs[2]), out_of(s.outputs[0]), s.ints[0] != 0,
                                          static_cast<float>(s.floats[0]), workspace_, workspace_bytes_, st,
                                          gemm_algo(s, &algo)));
        return {};
      }
      case Op::residual_norm:
        ZRT_GPU_CHECK(zc::residual_norm(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                                        s.ints[0] != 0 ? zk::In{} : opt_in(s, 3), out_of(s.outputs[0]),
                                        out_of(s.outputs[1]), s.ints[0] != 0, static_cast<float>(s.floats[0]), st));
        return {};
      case Op::gated:
        ZRT_GPU_CHECK(zc::gated(static_cast<Unary>(s.ints[0]), in_of(s.inputs[0]), in_of(s.inputs[1]),
                                out_of(s.outputs[0]), st));
        return {};
      case Op::rotary:
        ZRT_GPU_CHECK(zc::rotary(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]),
                                 s.ints[0] != 0, st, s.ints.size() > 1 && s.ints[1] != 0));
        return {};
      case Op::softmax:
        ZRT_GPU_CHECK(zc::softmax(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      case Op::layer_norm:
        ZRT_GPU_CHECK(zc::layer_norm(in_of(s.inputs[0]), opt_in(s, 1), opt_in(s, 2), out_of(s.outputs[0]),
                                     static_cast<int>(s.ints[0]), static_cast<float>(s.floats[0]), st));
        return {};
      case Op::rms_norm:
        ZRT_GPU_CHECK(zc::rms_norm(in_of(s.inputs[0]), opt_in(s, 1), out_of(s.outputs[0]), static_cast<float>(s.floats[0]), st));
        return {};
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::reduce_max: {
        const Reduce r = op == Op::reduce_sum ? Reduce::sum : op == Op::reduce_mean ? Reduce::mean : Reduce::max;
        ZRT_GPU_CHECK(zc::reduce(r, in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data() + 1,
                                 static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0, st));
        return {};
      }
      case Op::transpose:
        ZRT_GPU_CHECK(zc::transpose(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), st));
        return {};
      case Op::reshape:
      case Op::prefetch:
      case Op::evict:
        // A reshape planned as an alias shares its input's storage: nothing to move. Prefetch and evict
        // copy between the pinned host arena and the device arena, asynchronously on the stream.
        return copy(s.inputs[0], s.outputs[0]);
      case Op::concat: {
        std::vector<zk::In> xs;
        for (const TensorRef &t : s.inputs) xs.push_back(in_of(t));
        ZRT_GPU_CHECK(zc::concat(xs.data(), static_cast<int>(xs.size()), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      }
      case Op::local_slice: {
        const std::vector<int64_t> se = local_slice_bounds(s, rank_.tp_index());
        ZRT_GPU_CHECK(zc::slice(in_of(s.inputs[0]), out_of(s.outputs[0]), se.data(), se.data() + s.inputs[0].rank, st));
        return {};
      }
      case Op::slice: {
        const int r = s.inputs[0].rank;
        ZRT_GPU_CHECK(zc::slice(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), s.ints.data() + r, st));
        return {};
      }
      case Op::gather:
        ZRT_GPU_CHECK(zc::gather(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      case Op::expand: ZRT_GPU_CHECK(zc::expand(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      case Op::embedding:
        ZRT_GPU_CHECK(zc::embedding(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                    static_cast<int64_t>(rank_.tp_index()) * s.ints[0], st));
        return {};
      case Op::fill: ZRT_GPU_CHECK(zc::fill(s.floats[0], out_of(s.outputs[0]), st)); return {};
      case Op::attention: {
        // Plan 2.8: ints[2..10] are q, k and v's packing (offset, row stride, heads), zk::cpu::AttnPacked.
        zk::cpu::AttnPacked packed[3];
        const bool has_packed = s.ints.size() >= 11;
        for (int i = 0; has_packed && i < 3; ++i) packed[i] = {s.ints[2 + 3 * i], s.ints[3 + 3 * i], s.ints[4 + 3 * i]};
        // ints[11] (plan 2.11): the compiler's kernel; absent (older plans), the kernels every device runs.
        const int kernel = s.ints.size() > kAttentionKernelInt ? static_cast<int>(s.ints[kAttentionKernelInt]) : 0;
        ZRT_GPU_CHECK(zc::attention(
            in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), opt_in(s, 3), out_of(s.outputs[0]),
            opt_out(s, 1), s.ints[0] != 0, static_cast<float>(s.floats[0]),
            s.ints.size() > 1 ? static_cast<int>(s.ints[1]) : 0, has_packed ? packed : nullptr, kernel, st));
        return {};
      }
      // Run-time ops of decoder exports.
      case Op::floor: ZRT_GPU_CHECK(zc::floor(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      case Op::is_nan: ZRT_GPU_CHECK(zc::is_nan(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      case Op::mod:
        ZRT_GPU_CHECK(zc::mod(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0, st));
        return {};
      case Op::reduce_min:
      case Op::reduce_prod:
        ZRT_GPU_CHECK(zc::reduce(op == Op::reduce_min ? Reduce::min : Reduce::prod, in_of(s.inputs[0]), out_of(s.outputs[0]),
                                 s.ints.data() + 1, static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0, st));
        return {};
      case Op::cumsum:
        ZRT_GPU_CHECK(zc::cumsum(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), s.ints[1] != 0,
                                 s.ints[2] != 0, st));
        return {};
      case Op::range: ZRT_GPU_CHECK(zc::range(in_of(s.inputs[0]), in_of(s.inputs[2]), out_of(s.outputs[0]), st)); return {};
      case Op::gather_nd:
        ZRT_GPU_CHECK(zc::gather_nd(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      case Op::gather_elements:
        ZRT_GPU_CHECK(zc::gather_elements(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                          static_cast<int>(s.ints[0]), st));
        return {};
      case Op::tile: ZRT_GPU_CHECK(zc::tile(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      // Training (docs/training-contract.md).
      case Op::gelu_tanh_grad:
      case Op::gelu_erf_grad:
      case Op::silu_grad: {
        const Unary act = op == Op::gelu_tanh_grad ? Unary::gelu_tanh : op == Op::gelu_erf_grad ? Unary::gelu_erf : Unary::silu;
        ZRT_GPU_CHECK(zc::act_grad(act, in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), st));
        return {};
      }
      case Op::softmax_grad:
        ZRT_GPU_CHECK(zc::softmax_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                       static_cast<int>(s.ints[0]), st));
        return {};
      case Op::layer_norm_grad:
        ZRT_GPU_CHECK(zc::layer_norm_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]),
                                          out_of(s.outputs[1]), out_of(s.outputs[2]), static_cast<int>(s.ints[0]),
                                          static_cast<float>(s.floats[0]), kernel_ws_, st));
        return {};
      case Op::rms_norm_grad:
        ZRT_GPU_CHECK(zc::rms_norm_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]),
                                        out_of(s.outputs[1]), static_cast<float>(s.floats[0]), kernel_ws_, st));
        return {};
      case Op::attention_grad:
        ZRT_GPU_CHECK(zc::attention_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                                         in_of(s.inputs[4]), in_of(s.inputs[5]), opt_in(s, 6), out_of(s.outputs[0]),
                                         out_of(s.outputs[1]), out_of(s.outputs[2]), s.ints[0] != 0,
                                         static_cast<float>(s.floats[0]), kernel_ws_,
                                         s.ints.size() > 1 ? static_cast<int>(s.ints[1]) : 0, st));
        return {};
      case Op::embedding_grad:
        ZRT_GPU_CHECK(zc::embedding_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                         static_cast<int64_t>(rank_.tp_index()) * s.ints[0], kernel_ws_, st));
        return {};
      case Op::label_pick:
        ZRT_GPU_CHECK(zc::label_pick(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                     static_cast<int64_t>(rank_.tp_index()) * s.ints[0], s.ints[1], st));
        return {};
      case Op::label_pick_grad:
        ZRT_GPU_CHECK(zc::label_pick_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                          static_cast<int64_t>(rank_.tp_index()) * s.ints[0], s.ints[1], st));
        return {};
      case Op::sum_squares: ZRT_GPU_CHECK(zc::sum_squares(in_of(s.inputs[0]), out_of(s.outputs[0]), kernel_ws_, st)); return {};
      case Op::sample:
        // Rows of a batch split over dp are numbered globally, so dp ranks draw independent numbers.
        ZRT_GPU_CHECK(zc::sample(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                                 in_of(s.inputs[4]), in_of(s.inputs[5]), out_of(s.outputs[0]),
                                 !s.ints.empty() && s.ints[0] != 0
                                     ? static_cast<int64_t>(rank_.dp_index()) * s.inputs[0].shape[0]
                                     : 0,
                                 st));
        return {};
      case Op::adamw: {
        const zk::cpu::AdamWParams hp{s.floats[0], s.floats[1], s.floats[2], s.floats[3]};
        ZRT_GPU_CHECK(zc::adamw(out_of(s.outputs[0]), in_of(s.inputs[1]), out_of(s.outputs[1]), out_of(s.outputs[2]),
                                in_of(s.inputs[4]), in_of(s.inputs[5]), in_of(s.inputs[6]), hp, st));
        return {};
      }
      case Op::accumulate: ZRT_GPU_CHECK(zc::accumulate(out_of(s.outputs[0]), in_of(s.inputs[1]), st)); return {};
      // Generation (docs/generation.md).
      case Op::kv_write:
        ZRT_GPU_CHECK(zc::kv_write(out_of(s.outputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), st));
        return {};
      case Op::rope_kv_write:
        ZRT_GPU_CHECK(zc::rope_kv_write(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                                        in_of(s.inputs[4]), in_of(s.inputs[7]), out_of(s.outputs[0]),
                                        out_of(s.outputs[1]), out_of(s.outputs[2]), st));
        return {};
      case Op::rope_attention:
        // One kernel where the decode attention takes the operands (kernels/cuda/decode_attention.cu), else the
        // rotary step into the workspace and the attention after it; its first cache loads before the wait for
        // the previous kernel where the plan says so (Step::early, plan 2.18).
        ZRT_GPU_CHECK(zc::rope_attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                                         in_of(s.inputs[3]), in_of(s.inputs[4]), in_of(s.inputs[7]),
                                         out_of(s.outputs[0]), out_of(s.outputs[1]), out_of(s.outputs[2]),
                                         static_cast<float>(s.floats[0]), kernel_ws_, s.early, st));
        return {};
      case Op::decode_layer:
        // Plan 2.17: one persistent kernel for the layer (kernels/cuda/decode_layer.cu); its first weight loads
        // before the wait for the previous kernel where the plan says so (Step::early, plan 2.18).
        ZRT_GPU_CHECK(zc::decode_layer(decode_layer_args(s, s.early), kernel_ws_, kernel_ws_bytes_, st));
        return {};
      case Op::cached_attention:
        // The decode kernel (kernels/cuda/decode_attention.cu) where it applies, else the simple exact one.
        if (zc::decode_attention_supported(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                                           in_of(s.inputs[3]), out_of(s.outputs[0]))) {
          ZRT_GPU_CHECK(zc::decode_attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                                             in_of(s.inputs[3]), out_of(s.outputs[0]),
                                             static_cast<float>(s.floats[0]), kernel_ws_, st));
          return {};
        }
        ZRT_GPU_CHECK(zc::cached_attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                                           in_of(s.inputs[3]), out_of(s.outputs[0]), static_cast<float>(s.floats[0]),
                                           st));
        return {};
      case Op::argmax: ZRT_GPU_CHECK(zc::argmax(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      case Op::take_rows:
        ZRT_GPU_CHECK(zc::take_rows(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), st));
        return {};
      case Op::release: return {};
      default: return error(Code::backend_error, "cuda backend: opcode " + std::to_string(v) + " is not a compute op");
    }
  }

  RankInfo rank_;
  int device_ = 0;
  cudaStream_t streams_[3] = {};  // indexed by the plan's Stream: compute, comm, copy
  cudaStream_t cur_ = nullptr;    // the stream of the instruction being issued
  std::vector<cudaEvent_t> plan_events_;  // indexed by the plan's event ids
  cudaEvent_t edge_events_[3] = {};       // the run's opening edge, and the comm / copy closing edges
  std::unique_ptr<zk::cuda::Blas> blas_;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void *kernel_ws_ = nullptr;  // the training kernels' workspace (kernel_workspace), sized in prepare()
  /// The kernel workspace's bytes (kernel_ws_).
  size_t kernel_ws_bytes_ = 0;
  // CUDA graph state.
  bool graph_wanted_ = false, graph_ok_ = false, capturing_ = false;
  bool capture_forbidden_ = false;  // the plan has NVMe transfers (disallow_capture)
  int runs_ = 0;
  /// Per program: its captured graph, its runs, whether it holds a host barrier (then it is never captured).
  struct Captured {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    int runs = 0;
    bool barrier = false;
  };
  std::vector<Captured> captured_;
  int program_ = 0;
  // Host steps (see the file's comment): the CPU backend that runs them, and their device scalars' copies.
  std::unique_ptr<Backend> host_;
  std::vector<uint64_t> host_scalars_;
  bool in_run_ = false;
  // Profiling.
  bool profile_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> prof_events_;
  std::vector<int> prof_class_;
  size_t prof_next_ = 0;
  int prof_runs_ = 0;
  double class_ms_[kClasses] = {};
  std::vector<uint16_t> prof_op_;
  std::vector<double> op_ms_ = std::vector<double>(65536), op_n_ = std::vector<double>(65536);
  // Memory accounting.
  bool report_ = false;
  size_t base_used_ = 0, peak_used_ = 0, allocated_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::unique_ptr<Backend>(new CudaBackend()); }

}  // namespace zrt
