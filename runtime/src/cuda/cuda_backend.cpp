// The CUDA backend: one device arena (cudaMalloc) and one pinned host arena (cudaHostAlloc) per rank, the
// zk::cuda kernels and cuBLASLt for every compute opcode, and CUDA graph replay of the whole step.
//
// Ordering: zrt::Step carries no event ids (the plan's waits/signal stay in the plan), so the backend derives
// the dependencies itself. Compute steps, collectives (native_stream() returns the compute stream for every
// plan stream) and block copies run on one in-order compute stream. Prefetch and evict run on a copy stream
// so that weight traffic overlaps compute: a copy first waits for everything enqueued on the compute stream
// before it (the memory plan only reuses a region after its last reader, which precedes the copy), and a
// later compute step that reads or writes bytes a pending copy touches waits for that copy's event.
//
// Fusions, decided once in prepare() from the step list: a linear followed by gelu_tanh of its output (and
// nothing else reading that output) becomes one cuBLASLt product with the GELU(+bias) epilogue; an add of
// two equal-shaped tensors followed by a last-axis layer_norm / rms_norm of the sum becomes one
// residual_norm kernel that still writes the sum; silu/gelu of a gate whose only reader is a mul a few
// steps later becomes one gated kernel at the mul (when nothing in between overwrites the gate).
//
// Profiling (ZRT_CUDA_PROFILE=1, not with graphs): events around every step, summed per class (matrix
// products, attention, norms, elementwise, data movement, copies) and printed when the backend is destroyed.
//
// CUDA graphs (ZRT_CUDA_GRAPH=1, what zrun's --cuda-graph sets): the second run is captured and launched as
// a graph, later runs replay it. Only plans without collectives are captured (the communicator issues
// those outside the backend), which prepare() sees as gaps in the step indices.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_hooks.h"
#include "cuda_status.h"
#include "zk/cuda_kernels.h"
#include "zrt/backend.h"
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

zk::In in_of(const TensorRef &t) {
  zk::In r;
  r.data = t.data;
  r.dtype = static_cast<zk::DType>(t.dtype);
  r.shape.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) r.shape.d[i] = t.shape[i];
  return r;
}

zk::Out out_of(const TensorRef &t) {
  zk::Out r;
  r.data = t.data;
  r.dtype = static_cast<zk::DType>(t.dtype);
  r.shape.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) r.shape.d[i] = t.shape[i];
  return r;
}

zk::In opt_in(const Step &s, size_t i) { return i < s.inputs.size() ? in_of(s.inputs[i]) : zk::In{}; }

bool same_shape(const TensorRef &a, const TensorRef &b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

const char *const kClassNames[] = {"gemm", "attention", "norm/softmax", "elementwise", "movement", "copy"};
constexpr int kClasses = 6;

int class_of(fb::Op op) {
  const int v = static_cast<int>(op);
  if (op == fb::Op::matmul || op == fb::Op::linear) return 0;
  if (op == fb::Op::attention) return 1;
  if (v >= 80 && v <= 85) return 2;
  if (op == fb::Op::reshape || op == fb::Op::prefetch || op == fb::Op::evict) return 5;
  if (v >= 96 && v <= 102) return 4;
  return 3;
}

/// What prepare() decided for one step.
enum class Plan : uint8_t { run, skip, linear_gelu, residual_norm, gated };

bool overlap(const TensorRef &a, const TensorRef &b) {
  const auto *x = static_cast<const uint8_t *>(a.data), *y = static_cast<const uint8_t *>(b.data);
  return a.data && b.data && x < y + b.bytes && y < x + a.bytes;
}

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
    }
    for (auto &e : events_) {
      cudaEventDestroy(e.first);
      cudaEventDestroy(e.second);
    }
    if (report_) {
      std::fprintf(stderr,
                   "zrt cuda: device memory in use (cudaMemGetInfo) peak %.1f MiB (at start %.1f MiB); arenas + "
                   "scratch allocated by zrt %.1f MiB\n",
                   peak_used_ / 1048576.0, base_used_ / 1048576.0, allocated_ / 1048576.0);
    }
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    if (graph_) cudaGraphDestroy(graph_);
    if (workspace_) cudaFree(workspace_);
    blas_.reset();
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (stream_) cudaStreamDestroy(stream_);
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
    if (stream_) cudaStreamSynchronize(stream_);
    if (space == MemSpace::device) cudaFree(p);
    else cudaFreeHost(p);
  }

  Status write(MemSpace space, void *dst, const void *src, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(stream_));
    if (space == MemSpace::host) std::memcpy(dst, src, bytes);
    else ZRT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return {};
  }

  Status read(MemSpace space, void *dst, const void *src, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(stream_));
    if (space == MemSpace::host) std::memcpy(dst, src, bytes);
    else ZRT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return {};
  }

  Status zero(MemSpace space, void *dst, size_t bytes) override {
    if (!bytes) return {};
    ZRT_RETURN_IF_ERROR(wait_stream(stream_));
    if (space == MemSpace::host) std::memset(dst, 0, bytes);
    else ZRT_CUDA_CHECK(cudaMemset(dst, 0, bytes));
    return {};
  }

  Status copy_blocks(void *dst, size_t dst_stride, const void *src, size_t src_stride, size_t block,
                     size_t count) override {
    if (!block || !count) return {};
    if (count == 1) {
      ZRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, block, cudaMemcpyDefault, stream_));
      return {};
    }
    ZRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, block, count, cudaMemcpyDefault, stream_));
    return {};
  }

  Status prepare(const RankInfo &rank, const std::vector<Step> &steps, size_t *scratch_bytes) override {
    ZRT_RETURN_IF_ERROR(init());
    rank_ = rank;
    // Uses of each tensor as an input, for the fusion that drops an intermediate.
    std::unordered_map<int, int> uses;
    for (const Step &s : steps)
      for (const TensorRef &t : s.inputs)
        if (t.index >= 0) ++uses[t.index];
    bool gemm = false, contiguous = true;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step &s = steps[i];
      ZRT_RETURN_IF_ERROR(check_supported(s));
      const auto op = static_cast<fb::Op>(s.op);
      gemm = gemm || op == fb::Op::matmul || op == fb::Op::linear;
      if (i > 0 && s.index != steps[i - 1].index + 1) contiguous = false;
      if (plan_.count(s.index)) continue;  // already the second half of a fusion
      // Gated MLP: act(gate) consumed only by a mul within the next three steps (typically after the up
      // projection). The act is deferred to the mul, which is safe when nothing in between writes over
      // the gate (the memory plan may reuse its storage once the act has read it).
      if ((op == fb::Op::silu || op == fb::Op::gelu_tanh || op == fb::Op::gelu_erf) && !fusion_off_ &&
          uses[s.outputs[0].index] == 1 && s.inputs[0].dtype == s.outputs[0].dtype) {
        for (size_t j = i + 1; j < steps.size() && j <= i + 3; ++j) {
          const Step &m = steps[j];
          if (m.index != steps[j - 1].index + 1 || plan_.count(m.index)) break;
          if (static_cast<fb::Op>(m.op) == fb::Op::mul && m.inputs.size() == 2 &&
              (m.inputs[0].index == s.outputs[0].index || m.inputs[1].index == s.outputs[0].index)) {
            const TensorRef &other = m.inputs[0].index == s.outputs[0].index ? m.inputs[1] : m.inputs[0];
            if (same_shape(other, s.outputs[0]) && same_shape(m.outputs[0], s.outputs[0]) &&
                other.dtype == s.outputs[0].dtype && m.outputs[0].dtype == s.outputs[0].dtype) {
              plan_[s.index] = Plan::skip;
              plan_[m.index] = Plan::gated;
              fused_with_[m.index] = i;
              ++fusions_;
            }
            break;
          }
          bool clobbers = false;
          for (const TensorRef &o : m.outputs) clobbers = clobbers || overlap(o, s.inputs[0]);
          if (clobbers) break;
        }
        if (plan_.count(s.index)) continue;
      }
      if (i + 1 >= steps.size() || steps[i + 1].index != s.index + 1 || fusion_off_) continue;
      const Step &n = steps[i + 1];
      const auto nop = static_cast<fb::Op>(n.op);
      if (op == fb::Op::linear && nop == fb::Op::gelu_tanh && n.inputs[0].index == s.outputs[0].index &&
          uses[s.outputs[0].index] == 1 && same_shape(n.outputs[0], s.outputs[0]) &&
          n.outputs[0].dtype == s.outputs[0].dtype) {
        plan_[s.index] = Plan::linear_gelu;
        plan_[n.index] = Plan::skip;
        fused_with_[s.index] = i + 1;
        ++fusions_;
      } else if (op == fb::Op::add && same_shape(s.inputs[0], s.outputs[0]) && same_shape(s.inputs[1], s.outputs[0]) &&
                 s.inputs[0].dtype == s.outputs[0].dtype && s.inputs[1].dtype == s.outputs[0].dtype &&
                 (nop == fb::Op::layer_norm || nop == fb::Op::rms_norm) && n.inputs[0].index == s.outputs[0].index &&
                 n.inputs.size() >= 2 && n.inputs[1].data && n.outputs[0].dtype == s.outputs[0].dtype &&
                 (nop == fb::Op::rms_norm || n.ints[0] == -1 || n.ints[0] == s.outputs[0].rank - 1)) {
        plan_[s.index] = Plan::residual_norm;
        plan_[n.index] = Plan::skip;
        fused_with_[s.index] = i + 1;
        ++fusions_;
      }
    }
    steps_ = steps;  // fused steps read their partner from here
    for (auto &kv : fused_with_) partner_[kv.first] = &steps_[kv.second];
    graph_ok_ = graph_wanted_ && contiguous && !steps.empty();
    first_index_ = steps.empty() ? 0 : steps.front().index;
    size_t scratch = 0;
    if (gemm) {
      ZRT_GPU_CHECK(zk::cuda::Blas::create(&blas_));
      ZRT_CUDA_CHECK(cudaMalloc(&workspace_, zk::cuda::kGemmWorkspaceBytes));
      workspace_bytes_ = zk::cuda::kGemmWorkspaceBytes;
      scratch += workspace_bytes_;
      allocated_ += workspace_bytes_;
    }
    note_memory();
    *scratch_bytes = scratch;
    if (report_)
      std::fprintf(stderr, "zrt cuda: %zu compute steps, %d fused pairs, cuda graph %s\n", steps.size(), fusions_,
                   graph_ok_ ? "on" : (graph_wanted_ ? "off (the plan has collectives)" : "off"));
    return {};
  }

  Status execute(const Step &s) override {
    if (graph_exec_) return {};  // the graph replays the whole step list at synchronize()
    if (graph_ok_ && runs_ == 1 && s.index == first_index_ && !capturing_) {
      ZRT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      capturing_ = true;
    }
    const auto op = static_cast<fb::Op>(s.op);
    if ((op == fb::Op::prefetch || op == fb::Op::evict) && s.inputs[0].data != s.outputs[0].data)
      return async_copy(s);
    if (!pending_.empty()) {
      ZRT_RETURN_IF_ERROR(wait_pending(s));
      auto pt = partner_.find(s.index);
      if (pt != partner_.end()) ZRT_RETURN_IF_ERROR(wait_pending(*pt->second));
    }
    if (!profile_ || graph_wanted_) return run_step(s);
    if (prof_next_ == events_.size()) {
      std::pair<cudaEvent_t, cudaEvent_t> e;
      ZRT_CUDA_CHECK(cudaEventCreate(&e.first));
      ZRT_CUDA_CHECK(cudaEventCreate(&e.second));
      events_.push_back(e);
      event_class_.push_back(0);
    }
    const size_t k = prof_next_++;
    auto fused = plan_.find(s.index);
    event_class_[k] = fused != plan_.end() && fused->second == Plan::residual_norm ? 2 : class_of(static_cast<fb::Op>(s.op));
    ZRT_CUDA_CHECK(cudaEventRecord(events_[k].first, stream_));
    ZRT_RETURN_IF_ERROR(run_step(s));
    ZRT_CUDA_CHECK(cudaEventRecord(events_[k].second, stream_));
    return {};
  }

  Status run_step(const Step &s) {
    auto it = plan_.find(s.index);
    const Plan p = it == plan_.end() ? Plan::run : it->second;
    switch (p) {
      case Plan::skip: return {};
      case Plan::linear_gelu: {
        const Step &g = *partner_.at(s.index);
        const bool bias = s.inputs.size() > 2 && s.inputs[2].data;
        ZRT_GPU_CHECK(zk::cuda::linear(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(g.outputs[0]),
                                       s.ints[0] != 0, static_cast<float>(s.floats[0]),
                                       bias ? Epilogue::gelu_bias : Epilogue::gelu, workspace_, workspace_bytes_, stream_));
        return {};
      }
      case Plan::residual_norm: {
        const Step &nrm = *partner_.at(s.index);
        const bool rms = static_cast<fb::Op>(nrm.op) == fb::Op::rms_norm;
        ZRT_GPU_CHECK(zk::cuda::residual_norm(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(nrm.inputs[1]),
                                              rms ? zk::In{} : opt_in(nrm, 2), out_of(s.outputs[0]),
                                              out_of(nrm.outputs[0]), rms, static_cast<float>(nrm.floats[0]), stream_));
        return {};
      }
      case Plan::gated: {
        const Step &act = *partner_.at(s.index);
        const bool first = s.inputs[0].index == act.outputs[0].index;
        ZRT_GPU_CHECK(zk::cuda::gated(static_cast<zk::cpu::Unary>(act.op), in_of(act.inputs[0]),
                                      in_of(s.inputs[first ? 1 : 0]), out_of(s.outputs[0]), stream_));
        return {};
      }
      case Plan::run: break;
    }
    return dispatch(s);
  }

  Status synchronize() override {
    if (copies_) {
      // Join the copy stream into the compute stream (also what closes a capture that forked into it).
      cudaEvent_t e;
      ZRT_RETURN_IF_ERROR(next_event(&e));
      ZRT_CUDA_CHECK(cudaEventRecord(e, copy_stream_));
      ZRT_CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
      copies_ = false;
    }
    pending_.clear();
    pool_next_ = 0;
    if (capturing_) {
      capturing_ = false;
      cudaGraph_t g = nullptr;
      ZRT_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      graph_ = g;
      ZRT_CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
    }
    if (graph_exec_) ZRT_CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_));
    ZRT_RETURN_IF_ERROR(wait_stream(stream_));
    ZRT_CUDA_CHECK(cudaGetLastError());
    if (prof_next_ > 0) {
      // The first run pays for module loading and algorithm selection: profile the later ones.
      if (runs_ > 0) {
        for (size_t k = 0; k < prof_next_; ++k) {
          float ms = 0;
          ZRT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[k].first, events_[k].second));
          class_ms_[event_class_[k]] += ms;
        }
        ++prof_runs_;
      }
      prof_next_ = 0;
    }
    ++runs_;
    note_memory();
    return {};
  }

  void *native_stream(uint8_t) override { return stream_; }

 private:
  struct Pending {
    const uint8_t *lo, *hi;
    cudaEvent_t done;
  };

  Status next_event(cudaEvent_t *e) {
    if (pool_next_ == pool_.size()) {
      cudaEvent_t n;
      ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&n, cudaEventDisableTiming));
      pool_.push_back(n);
    }
    *e = pool_[pool_next_++];
    return {};
  }

  /// prefetch / evict on the copy stream, after everything enqueued on the compute stream so far.
  Status async_copy(const Step &s) {
    const TensorRef &from = s.inputs[0], &to = s.outputs[0];
    const size_t n = static_cast<size_t>(from.numel()) * dtype_size(from.dtype);
    if (!n) return {};
    cudaEvent_t before, done;
    ZRT_RETURN_IF_ERROR(next_event(&before));
    ZRT_RETURN_IF_ERROR(next_event(&done));
    ZRT_CUDA_CHECK(cudaEventRecord(before, stream_));
    ZRT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, before, 0));
    ZRT_CUDA_CHECK(cudaMemcpyAsync(to.data, from.data, n, cudaMemcpyDefault, copy_stream_));
    ZRT_CUDA_CHECK(cudaEventRecord(done, copy_stream_));
    copies_ = true;
    // Both ends stay busy until the copy is done: readers of the destination and writers of either end wait.
    for (const TensorRef *t : {&from, &to}) {
      const auto *lo = static_cast<const uint8_t *>(t->data);
      pending_.push_back({lo, lo + n, done});
    }
    return {};
  }

  /// Makes the compute stream wait for every pending copy that touches a tensor of `s`.
  Status wait_pending(const Step &s) {
    auto touches = [&](const Pending &p) {
      for (const auto *v : {&s.inputs, &s.outputs})
        for (const TensorRef &t : *v) {
          if (!t.data) continue;
          const auto *lo = static_cast<const uint8_t *>(t.data);
          const uint8_t *hi = lo + std::max<uint64_t>(t.bytes, static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype));
          if (lo < p.hi && p.lo < hi) return true;
        }
      return false;
    };
    for (size_t i = 0; i < pending_.size();) {
      if (touches(pending_[i])) {
        ZRT_CUDA_CHECK(cudaStreamWaitEvent(stream_, pending_[i].done, 0));
        pending_[i] = pending_.back();
        pending_.pop_back();
      } else {
        ++i;
      }
    }
    return {};
  }

  Status init() {
    if (stream_) return {};
    ZRT_RETURN_IF_ERROR(select_cuda_device(&device_));
    std::string why;
    if (!zk::cuda::device_usable(0, &why)) return error(Code::backend_error, "cuda backend: " + why);
    ZRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZRT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    const char *g = std::getenv("ZRT_CUDA_GRAPH");
    graph_wanted_ = g && std::strcmp(g, "0") != 0;
    const char *r = std::getenv("ZRT_CUDA_REPORT");
    report_ = r && std::strcmp(r, "0") != 0;
    const char *pr = std::getenv("ZRT_CUDA_PROFILE");
    profile_ = pr && std::strcmp(pr, "0") != 0;
    const char *f = std::getenv("ZRT_CUDA_NO_FUSION");
    fusion_off_ = f && std::strcmp(f, "0") != 0;
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

  Status check_supported(const Step &s) const {
    const auto op = static_cast<fb::Op>(s.op);
    const int v = static_cast<int>(s.op);
    const bool known = v <= 17 || (v >= 32 && v <= 46) || op == fb::Op::matmul || op == fb::Op::linear ||
                       (v >= 80 && v <= 85) || (v >= 96 && v <= 103) || op == fb::Op::attention ||
                       op == fb::Op::release || op == fb::Op::prefetch || op == fb::Op::evict;
    if (!known) return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                                                      "'): opcode " + std::to_string(v) + " is not a compute op");
    for (const TensorRef &t : s.inputs)
      if (t.data && t.space == MemSpace::host && op != fb::Op::prefetch)
        return error(Code::backend_error, "cuda backend: instruction " + std::to_string(s.index) + " ('" + s.name +
                                              "') reads host tensor " + std::to_string(t.index) +
                                              " directly; only prefetch may (the plan must prefetch it first)");
    return {};
  }

  Status copy(const TensorRef &from, const TensorRef &to) {
    if (from.data == to.data) return {};
    const size_t n = static_cast<size_t>(from.numel()) * dtype_size(from.dtype);
    if (n) ZRT_CUDA_CHECK(cudaMemcpyAsync(to.data, from.data, n, cudaMemcpyDefault, stream_));
    return {};
  }

  Status dispatch(const Step &s) {
    namespace zc = zk::cuda;
    using zk::cpu::Binary;
    using zk::cpu::Reduce;
    using zk::cpu::Unary;
    const auto op = static_cast<fb::Op>(s.op);
    const int v = static_cast<int>(s.op);
    cudaStream_t st = stream_;
    if (v <= 15) {
      ZRT_GPU_CHECK(zc::unary(static_cast<Unary>(v), in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (op == fb::Op::cast) {
      ZRT_GPU_CHECK(zc::cast(in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (op == fb::Op::not_) {
      ZRT_GPU_CHECK(zc::unary(Unary::not_, in_of(s.inputs[0]), out_of(s.outputs[0]), st));
      return {};
    }
    if (v >= 32 && v <= 45) {
      ZRT_GPU_CHECK(zc::binary(static_cast<Binary>(v - 32), in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), st));
      return {};
    }
    switch (op) {
      case fb::Op::where:
        ZRT_GPU_CHECK(zc::where(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]), st));
        return {};
      case fb::Op::matmul:
        ZRT_GPU_CHECK(zc::matmul(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0,
                                 s.ints[1] != 0, workspace_, workspace_bytes_, st));
        return {};
      case fb::Op::linear: {
        const bool bias = s.inputs.size() > 2 && s.inputs[2].data;
        ZRT_GPU_CHECK(zc::linear(*blas_, in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]),
                                 s.ints[0] != 0, static_cast<float>(s.floats[0]), bias ? Epilogue::bias : Epilogue::none,
                                 workspace_, workspace_bytes_, st));
        return {};
      }
      case fb::Op::softmax:
        ZRT_GPU_CHECK(zc::softmax(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      case fb::Op::layer_norm:
        ZRT_GPU_CHECK(zc::layer_norm(in_of(s.inputs[0]), opt_in(s, 1), opt_in(s, 2), out_of(s.outputs[0]),
                                     static_cast<int>(s.ints[0]), static_cast<float>(s.floats[0]), st));
        return {};
      case fb::Op::rms_norm:
        ZRT_GPU_CHECK(zc::rms_norm(in_of(s.inputs[0]), opt_in(s, 1), out_of(s.outputs[0]), static_cast<float>(s.floats[0]), st));
        return {};
      case fb::Op::reduce_sum:
      case fb::Op::reduce_mean:
      case fb::Op::reduce_max: {
        const Reduce r = op == fb::Op::reduce_sum ? Reduce::sum : op == fb::Op::reduce_mean ? Reduce::mean : Reduce::max;
        ZRT_GPU_CHECK(zc::reduce(r, in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data() + 1,
                                 static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0, st));
        return {};
      }
      case fb::Op::transpose:
        ZRT_GPU_CHECK(zc::transpose(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), st));
        return {};
      case fb::Op::reshape:
      case fb::Op::prefetch:
      case fb::Op::evict:
        // A reshape planned as an alias shares its input's storage: nothing to move. Prefetch and evict
        // copy between the pinned host arena and the device arena, asynchronously on the stream.
        return copy(s.inputs[0], s.outputs[0]);
      case fb::Op::concat: {
        std::vector<zk::In> xs;
        for (const TensorRef &t : s.inputs) xs.push_back(in_of(t));
        ZRT_GPU_CHECK(zc::concat(xs.data(), static_cast<int>(xs.size()), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      }
      case fb::Op::slice: {
        const int r = s.inputs[0].rank;
        ZRT_GPU_CHECK(zc::slice(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), s.ints.data() + r, st));
        return {};
      }
      case fb::Op::gather:
        ZRT_GPU_CHECK(zc::gather(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), st));
        return {};
      case fb::Op::expand: ZRT_GPU_CHECK(zc::expand(in_of(s.inputs[0]), out_of(s.outputs[0]), st)); return {};
      case fb::Op::embedding:
        ZRT_GPU_CHECK(zc::embedding(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                    static_cast<int64_t>(rank_.tp_index()) * s.ints[0], st));
        return {};
      case fb::Op::fill: ZRT_GPU_CHECK(zc::fill(s.floats[0], out_of(s.outputs[0]), st)); return {};
      case fb::Op::attention:
        ZRT_GPU_CHECK(zc::attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), opt_in(s, 3),
                                    out_of(s.outputs[0]), s.ints[0] != 0, static_cast<float>(s.floats[0]), st));
        return {};
      case fb::Op::release: return {};
      default: return error(Code::backend_error, "cuda backend: opcode " + std::to_string(v) + " is not a compute op");
    }
  }

  RankInfo rank_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // prefetch / evict
  std::vector<Pending> pending_;        // copies later compute steps may have to wait for
  std::vector<cudaEvent_t> pool_;       // events, reused every run
  size_t pool_next_ = 0;
  bool copies_ = false;                 // the copy stream has work the compute stream has not joined
  std::unique_ptr<zk::cuda::Blas> blas_;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unordered_map<int, Plan> plan_;
  std::map<int, size_t> fused_with_;
  std::unordered_map<int, const Step *> partner_;
  std::vector<Step> steps_;
  int fusions_ = 0;
  bool fusion_off_ = false;
  // CUDA graph state.
  bool graph_wanted_ = false, graph_ok_ = false, capturing_ = false;
  int first_index_ = 0;
  int runs_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  // Profiling.
  bool profile_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  std::vector<int> event_class_;
  size_t prof_next_ = 0;
  int prof_runs_ = 0;
  double class_ms_[kClasses] = {};
  // Memory accounting.
  bool report_ = false;
  size_t base_used_ = 0, peak_used_ = 0, allocated_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::unique_ptr<Backend>(new CudaBackend()); }

}  // namespace zrt
