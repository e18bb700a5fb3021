// The training kernels on the GPU: activation and softmax backwards, the layer / RMS norm backwards, the
// embedding and label-pick backwards, AdamW, gradient accumulation and the squared norm. Each mirrors the
// CPU reference kernel of the same name (zk/cpu_kernels.h), which the tests compare it with. Operands are
// read through run-time dtype tags (uniform across a launch, so the switch never diverges): these kernels
// are memory-bound and one instantiation per op keeps the build small.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"
#include "zk/cuda_workspace.h"

namespace zk {
namespace cuda {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::IndexMap;
using detail::load_f;
using detail::store_f;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr int kChunks = static_cast<int>(workspace::kNormGradChunks);  // row chunks of the column sums

inline int row_threads(int64_t n) {
  if (n <= 64) return 32;
  if (n <= 128) return 64;
  if (n <= 512) return 128;
  return 256;
}

// --- tier 1 ------------------------------------------------------------------------------------------------
__device__ __forceinline__ float act_deriv(int act, float v) {
  if (act == static_cast<int>(cpu::Unary::gelu_tanh)) {
    const float t = tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * v * v);
  }
  if (act == static_cast<int>(cpu::Unary::gelu_erf))
    return 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
  const float s = 1.0f / (1.0f + expf(-v));
  return s * (1.0f + v * (1.0f - s));
}

__global__ void act_grad_kernel(int act, const void *x, DType xt, const void *dy, DType gt, void *dx, DType ot, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_f(dx, ot, i, load_f(dy, gt, i) * act_deriv(act, load_f(x, xt, i)));
}

/// act_grad_kernel when x, dy and dx share one dtype T and come in whole 16-byte vectors: 16 bytes of each
/// per thread and step instead of one element through the run-time dtype switch (the MLP's activation
/// backward over [tokens, ffn] ran at a third of the device's bandwidth). The same fp32 math per element.
template <class T>
__global__ void act_grad_vec_kernel(int act, const uint4 *__restrict__ x, const uint4 *__restrict__ dy,
                                    uint4 *__restrict__ dx, int64_t nvec) {
  constexpr int V = 16 / sizeof(T);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 xv = x[i], gv = dy[i];
    uint4 ov;
    const T *xe = reinterpret_cast<const T *>(&xv), *ge = reinterpret_cast<const T *>(&gv);
    T *oe = reinterpret_cast<T *>(&ov);
#pragma unroll
    for (int u = 0; u < V; ++u)
      oe[u] = detail::from_f32<T>(detail::to_f32(ge[u]) * act_deriv(act, detail::to_f32(xe[u])));
    dx[i] = ov;
  }
}

/// One block per row of n elements at stride `inner`.
__global__ void softmax_grad_kernel(const void *y, DType yt, const void *dy, DType gt, void *dx, DType ot, int64_t n,
                                    int64_t inner) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, o = row / inner, in = row % inner, base = o * n * inner + in;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += load_f(y, yt, base + j * inner) * load_f(dy, gt, base + j * inner);
  const float d = block_sum(acc, red);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t at = base + j * inner;
    store_f(dx, ot, at, load_f(y, yt, at) * (load_f(dy, gt, at) - d));
  }
}

/// Sums of K values over the block at once (one pair of barriers for all K); every thread gets the sums.
/// `red` is K * 32 floats of shared memory.
template <int K>
__device__ __forceinline__ void block_sums(float (&v)[K], float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = detail::warp_sum(v[k]);
  __syncthreads();  // `red` may still be read by a previous reduction
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) red[k * 32 + warp] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = detail::warp_sum(lane < nw ? red[k * 32 + lane] : 0.0f);
}

/// dx of one row of layer norm (Rms = false) or RMS norm; the row's mean and inverse deviation go to
/// stats[2 * row] and stats[2 * row + 1] for the column sums. With c = x - mean: var = mean(c^2),
/// mean(g xhat) = inv mean(g c), so one pass and one reduction give var, mean(g) and mean(g c) together
/// (layer norm needs the mean first: one more pass and reduction).
template <bool Rms>
__global__ void norm_grad_rows(const void *x, DType xt, const void *scale, DType st, const void *dy, DType gt, void *dx,
                               DType ot, int64_t n, float eps, float *stats) {
  __shared__ float red[3 * 32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n;
  auto g_at = [&](int64_t j) { return load_f(dy, gt, base + j) * (scale ? load_f(scale, st, j) : 1.0f); };
  float mean = 0.0f;
  if (!Rms) {
    float sx[1] = {0.0f};
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sx[0] += load_f(x, xt, base + j);
    block_sums<1>(sx, red);
    mean = sx[0] / static_cast<float>(n);
  }
  float acc[3] = {0.0f, 0.0f, 0.0f};  // sum c^2, sum g, sum g c
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float c = load_f(x, xt, base + j) - mean, g = g_at(j);
    acc[0] += c * c;
    acc[1] += g;
    acc[2] += g * c;
  }
  block_sums<3>(acc, red);
  const float inv = rsqrtf(acc[0] / static_cast<float>(n) + eps);
  const float sg = acc[1] / static_cast<float>(n), sgx = inv * acc[2] / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = g_at(j), xh = (load_f(x, xt, base + j) - mean) * inv;
    // layer norm: inv (g - mean(g) - xhat mean(g xhat)); RMS norm (mean 0): inv (g - xhat mean(g xhat)).
    store_f(dx, ot, base + j, inv * (g - (Rms ? 0.0f : sg) - xh * sgx));
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = mean;
    stats[2 * blockIdx.x + 1] = inv;
  }
}

/// Partial column sums of dy * xhat (and of dy) over one chunk of rows: part[chunk * n + col]. A block of
/// kColLanes x 32 threads covers 32 columns: lane y walks rows y, y + kColLanes, .. of the chunk, and the
/// lanes' sums are then added in lane order, so the result is the same on every run. Many row lanes keep
/// enough loads in flight: with one thread per column (and so only n / 32 warps per chunk) the walk was
/// latency-bound, 10x below the device's bandwidth at the benchmark shapes.
constexpr int kColLanes = 8;
__global__ void __launch_bounds__(32 * kColLanes)
    norm_grad_cols(const void *x, DType xt, const void *dy, DType gt, const float *stats, int64_t rows, int64_t n,
                   int64_t per_chunk, float *part_scale, float *part_bias) {
  __shared__ float ss[kColLanes][33], sb[kColLanes][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = blockIdx.y * per_chunk, r1 = min(rows, r0 + per_chunk);
  float as = 0.0f, ab = 0.0f;
  if (col < n) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColLanes) {
      const float g = load_f(dy, gt, r * n + col);
      as += g * ((load_f(x, xt, r * n + col) - stats[2 * r]) * stats[2 * r + 1]);
      ab += g;
    }
  }
  ss[threadIdx.y][threadIdx.x] = as;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    for (int k = 1; k < kColLanes; ++k) {
      as += ss[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    if (part_scale) part_scale[blockIdx.y * n + col] = as;
    if (part_bias) part_bias[blockIdx.y * n + col] = ab;
  }
}

__global__ void column_finish(const float *part, int chunks, int64_t n, void *out, DType ot) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  double acc = 0.0;
  for (int c = 0; c < chunks; ++c) acc += part[c * n + col];
  store_f(out, ot, col, static_cast<float>(acc));
}

/// One block per row of this rank's table: the block walks the ids in order, 256 at a time, compacts the
/// positions that name its row (warp ballots, in position order) and adds their dy rows into an fp32 row in
/// shared memory, then stores it once. Every column sums the same terms in the same order as the CPU
/// reference, so the result is deterministic and equal to it; no atomics, no workspace.
constexpr int kEmbThreads = 256;
__global__ void __launch_bounds__(kEmbThreads) embedding_grad_kernel(const void *ids, DType it, const void *dy, DType gt,
                                                                       void *out, DType ot, int64_t N, int64_t D,
                                                                       int64_t row_start) {
  extern __shared__ float acc[];  // [D]
  __shared__ int64_t pos[kEmbThreads];
  __shared__ int offs[kEmbThreads / 32];
  __shared__ int total;
  const int64_t row = blockIdx.x, id = row_start + row;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) acc[d] = 0.0f;
  for (int64_t base = 0; base < N; base += blockDim.x) {
    const int64_t n = base + threadIdx.x;
    const bool hit = n < N && detail::load_i(ids, it, n) == id;
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) offs[warp] = __popc(mask);
    __syncthreads();
    if (threadIdx.x == 0) {
      int sum = 0;
      for (int w = 0; w < kEmbThreads / 32; ++w) {
        const int c = offs[w];
        offs[w] = sum;
        sum += c;
      }
      total = sum;
    }
    __syncthreads();
    if (hit) pos[offs[warp] + __popc(mask & ((1u << lane) - 1u))] = n;
    __syncthreads();
    for (int k = 0; k < total; ++k)
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) acc[d] += load_f(dy, gt, pos[k] * D + d);
    __syncthreads();  // pos, offs and total are rewritten by the next chunk
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store_f(out, ot, row * D + d, acc[d]);
}

__global__ void label_pick_kernel(const void *logits, DType lt, const void *labels, DType bt, void *out, DType ot, int64_t N,
                                  int64_t V, int64_t row_start, int64_t ignore) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t l = detail::load_i(labels, bt, n);
  const bool here = l != ignore && l >= row_start && l < row_start + V;
  store_f(out, ot, n, here ? load_f(logits, lt, n * V + (l - row_start)) : 0.0f);
}

/// dlogits of the label pick, one row per blockIdx.y step: the row's label and dy are read once, the row
/// written with no index decomposition (per element, a 64-bit division and a label load ran at a third of
/// the device's bandwidth over the loss's [tokens, vocabulary] logits). V4: fp32 rows in float4 stores.
template <bool V4>
__global__ void label_pick_grad_kernel(const void *labels, DType bt, const void *dy, DType gt, void *dl, DType ot, int64_t N,
                                       int64_t V, int64_t row_start, int64_t ignore) {
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const int64_t l = detail::load_i(labels, bt, n);
    const int64_t hit = l != ignore ? l - row_start : -1;  // the column that gets dy, if this rank holds it
    const float g = load_f(dy, gt, n);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    if (V4) {
      float4 *row = reinterpret_cast<float4 *>(static_cast<float *>(dl) + n * V);
      for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < V / 4; q += stride) {
        const int64_t j = 4 * q;
        row[q] = make_float4(j == hit ? g : 0.0f, j + 1 == hit ? g : 0.0f, j + 2 == hit ? g : 0.0f,
                             j + 3 == hit ? g : 0.0f);
      }
    } else {
      for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < V; j += stride)
        store_f(dl, ot, n * V + j, j == hit ? g : 0.0f);
    }
  }
}

/// What both AdamW kernels take besides the tensors: the step's scalars on the device (learning rate, step
/// counter, gradient scale) and the constant hyper-parameters.
struct AdamWArgs {
  const void *lr, *step, *gsc;
  DType lrt, stt, gst;
  double beta1, beta2, eps, wd;
};

/// The step's scalars, derived by thread 0 of each block from the device tensors exactly as
/// cpu::AdamWStep::from does (in double, rounded to fp32 once): decay, 1 - beta1, beta2, 1 - beta2,
/// step size, sqrt of the second bias correction, gradient scale. `skip` (shared): step 0 is a skipped step
/// (fp16 dynamic loss scaling saw an overflow), in which nothing is written.
__device__ __forceinline__ void adamw_scalars(float *sc, bool &skip, const AdamWArgs &a) {
  if (threadIdx.x == 0) {
    const double l = load_f(a.lr, a.lrt, 0);
    const double t = static_cast<double>(detail::load_i(a.step, a.stt, 0));
    skip = t < 1.0;
    // _rn intrinsics here too: a contracted fma(-l, wd, 1) could round differently from the host's code.
    sc[0] = static_cast<float>(__dsub_rn(1.0, __dmul_rn(l, a.wd)));
    sc[1] = static_cast<float>(1.0 - a.beta1);
    sc[2] = static_cast<float>(a.beta2);
    sc[3] = static_cast<float>(1.0 - a.beta2);
    sc[4] = static_cast<float>(l / (1.0 - pow(a.beta1, t)));
    sc[5] = static_cast<float>(sqrt(1.0 - pow(a.beta2, t)));
    sc[6] = load_f(a.gsc, a.gst, 0);
  }
  __syncthreads();
}

/// One element's update in the reference's order, with _rn intrinsics, which nvcc never contracts into
/// multiply-adds: bit-identical to the CPU reference.
__device__ __forceinline__ void adamw_update(const float *sc, float eps, float graw, float &p, float &m, float &v) {
  const float g = __fmul_rn(graw, sc[6]);
  p = __fmul_rn(p, sc[0]);
  const float mm = __fadd_rn(m, __fmul_rn(sc[1], __fsub_rn(g, m)));
  const float vv = __fadd_rn(__fmul_rn(v, sc[2]), __fmul_rn(__fmul_rn(sc[3], g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), sc[5]), eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(-sc[4], mm), denom));
  m = mm;
  v = vv;
}

/// The frame of both AdamW kernels: the step's scalars (adamw_scalars), nothing at all on a skipped step,
/// otherwise `unit(sc, eps, i)` for every unit i < n in a grid-stride loop (a unit is what the kernel loads
/// and stores at once: one element, or one float4).
template <typename Unit>
__device__ __forceinline__ void adamw_units(int64_t n, const AdamWArgs &a, Unit unit) {
  __shared__ float sc[7];
  __shared__ bool skip;
  adamw_scalars(sc, skip, a);
  if (skip) return;
  const float eps = static_cast<float>(a.eps);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    unit(sc, eps, i);
}

/// AdamW, any float storage; the element update is adamw_update, bit-identical to the CPU reference.
__global__ void adamw_kernel(void *param, DType pt, const void *grad, DType gt, void *m, DType mt, void *v, DType vt,
                             int64_t n, AdamWArgs a) {
  adamw_units(n, a, [=](const float *sc, float eps, int64_t i) {
    float p = load_f(param, pt, i), mm = load_f(m, mt, i), vv = load_f(v, vt, i);
    adamw_update(sc, eps, load_f(grad, gt, i), p, mm, vv);
    store_f(param, pt, i, p);
    store_f(m, mt, i, mm);
    store_f(v, vt, i, vv);
  });
}

/// adamw_kernel for the mixed-precision step's layout, fp32 master weights, gradients and moments, in
/// whole float4 vectors: 16-byte loads and stores instead of one element through the dtype switch (it ran
/// at 60% of the device's bandwidth). The same adamw_update per element.
__global__ void adamw_f32x4_kernel(float4 *param, const float4 *__restrict__ grad, float4 *m, float4 *v, int64_t n4,
                                   AdamWArgs a) {
  adamw_units(n4, a, [=](const float *sc, float eps, int64_t i) {
    float4 p = param[i], mm = m[i], vv = v[i];
    const float4 g = grad[i];
    adamw_update(sc, eps, g.x, p.x, mm.x, vv.x);
    adamw_update(sc, eps, g.y, p.y, mm.y, vv.y);
    adamw_update(sc, eps, g.z, p.z, mm.z, vv.z);
    adamw_update(sc, eps, g.w, p.w, mm.w, vv.w);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
  });
}

__global__ void accumulate_kernel(void *t, DType tt, const void *v, DType vt, int64_t n, IndexMap<1> vmap) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[1];
    vmap.offsets(i, off);
    store_f(t, tt, i, load_f(t, tt, i) + load_f(v, vt, off[0]));
  }
}

constexpr int kSsBlocks = static_cast<int>(workspace::kSumSquaresBlocks);

__device__ __forceinline__ double block_sum_d(double v, double *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void sum_squares_part(const void *x, DType xt, int64_t n, double *part) {
  __shared__ double red[32];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = load_f(x, xt, i);
    acc += v * v;
  }
  acc = block_sum_d(acc, red);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/// sum_squares_part over fp32 in whole float4 vectors (the gradients of the bf16 step are fp32): 16-byte
/// loads instead of one element through the dtype switch. Each block's partial is still one double.
__global__ void sum_squares_part_f32x4(const float4 *__restrict__ x, int64_t n4, double *part) {
  __shared__ double red[32];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = x[i];
    acc += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y;
    acc += static_cast<double>(v.z) * v.z + static_cast<double>(v.w) * v.w;
  }
  acc = block_sum_d(acc, red);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void sum_squares_finish(const double *part, int parts, float *out) {
  __shared__ double red[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) acc += part[i];
  acc = block_sum_d(acc, red);
  if (threadIdx.x == 0) out[0] = static_cast<float>(acc);
}

}  // namespace

// --- tier 2 ---------------------------------------------------------------------------------------------------
namespace launch {

cudaError_t norm_grad(bool rms, const void *x, DType xt, const void *scale, DType st, const void *dy, DType gt, void *dx,
                      DType ot, void *dscale, DType dst, void *dbias, DType dbt, int64_t rows, int64_t n, float eps,
                      float *ws, cudaStream_t s) {
  if (rows == 0 || n == 0) return cudaSuccess;
  float *stats = ws, *ps = ws + 2 * rows, *pb = ps + kChunks * n;
  const int t = row_threads(n);
  if (rms) norm_grad_rows<true><<<static_cast<unsigned>(rows), t, 0, s>>>(x, xt, scale, st, dy, gt, dx, ot, n, eps, stats);
  else norm_grad_rows<false><<<static_cast<unsigned>(rows), t, 0, s>>>(x, xt, scale, st, dy, gt, dx, ot, n, eps, stats);
  if (dscale || dbias) {
    const int chunks = static_cast<int>(rows < kChunks ? rows : kChunks);
    const int64_t per = (rows + chunks - 1) / chunks;
    const unsigned cb = static_cast<unsigned>((n + 255) / 256);
    norm_grad_cols<<<dim3(static_cast<unsigned>((n + 31) / 32), chunks), dim3(32, kColLanes), 0, s>>>(
        x, xt, dy, gt, stats, rows, n, per, dscale ? ps : nullptr, dbias ? pb : nullptr);
    if (dscale) column_finish<<<cb, 256, 0, s>>>(ps, chunks, n, dscale, dst);
    if (dbias) column_finish<<<cb, 256, 0, s>>>(pb, chunks, n, dbias, dbt);
  }
  return detail::launched();
}

}  // namespace launch

// --- tier 3 ---------------------------------------------------------------------------------------------------
GpuStatus act_grad(cpu::Unary act, const In &x, const In &dy, const Out &dx, cudaStream_t s) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return kernel_failure("act_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype)) return kernel_failure("act_grad: operands must be float");
  if (act != cpu::Unary::gelu_tanh && act != cpu::Unary::gelu_erf && act != cpu::Unary::silu)
    return kernel_failure("act_grad: the activation must be gelu_tanh, gelu_erf or silu");
  const int64_t n = dx.shape.numel();
  if (n == 0) return {};
  const size_t es = dtype_size(dx.dtype);
  const bool vec = x.dtype == dx.dtype && dy.dtype == dx.dtype && (n * static_cast<int64_t>(es)) % 16 == 0 &&
                   (reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(dy.data) |
                    reinterpret_cast<uintptr_t>(dx.data)) % 16 == 0;
  if (vec) {
    const int64_t nvec = n * static_cast<int64_t>(es) / 16;
    auto *xv = static_cast<const uint4 *>(x.data), *gv = static_cast<const uint4 *>(dy.data);
    auto *ov = static_cast<uint4 *>(dx.data);
    const int a = static_cast<int>(act);
    switch (dx.dtype) {
      case DType::bf16:
        act_grad_vec_kernel<__nv_bfloat16><<<grid_for(nvec), detail::kThreads, 0, s>>>(a, xv, gv, ov, nvec);
        break;
      case DType::f16:
        act_grad_vec_kernel<__half><<<grid_for(nvec), detail::kThreads, 0, s>>>(a, xv, gv, ov, nvec);
        break;
      default:
        act_grad_vec_kernel<float><<<grid_for(nvec), detail::kThreads, 0, s>>>(a, xv, gv, ov, nvec);
        break;
    }
  } else {
    act_grad_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(static_cast<int>(act), x.data, x.dtype, dy.data, dy.dtype,
                                                             dx.data, dx.dtype, n);
  }
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus softmax_grad(const In &y, const In &dy, const Out &dx, int axis, cudaStream_t s) {
  if (y.shape != dx.shape || dy.shape != dx.shape) return kernel_failure("softmax_grad: y, dy and dx shapes differ");
  if (!is_float(y.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype)) return kernel_failure("softmax_grad: operands must be float");
  const int r = y.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("softmax_grad: axis out of range");
  int64_t outer = 1, inner = 1, n = y.shape.d[axis];
  for (int i = 0; i < axis; ++i) outer *= y.shape.d[i];
  for (int i = axis + 1; i < r; ++i) inner *= y.shape.d[i];
  if (outer * inner == 0 || n == 0) return {};
  softmax_grad_kernel<<<static_cast<unsigned>(outer * inner), row_threads(n), 0, s>>>(y.data, y.dtype, dy.data, dy.dtype,
                                                                                     dx.data, dx.dtype, n, inner);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

namespace {
bool norm_rows(const Dims &s, int axis, int64_t *rows, int64_t *n) {
  if (axis < 0) axis += s.rank;
  if (axis < 0 || axis >= s.rank) return false;
  *rows = 1;
  *n = 1;
  for (int i = 0; i < axis; ++i) *rows *= s.d[i];
  for (int i = axis; i < s.rank; ++i) *n *= s.d[i];
  return true;
}
}  // namespace

size_t layer_norm_grad_workspace(const In &x, int axis) {
  int64_t rows, n;
  if (!norm_rows(x.shape, axis, &rows, &n)) return 0;
  return static_cast<size_t>(workspace::norm_grad(rows, n));
}

GpuStatus layer_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, const Out &dbias,
                          int axis, float eps, void *ws, cudaStream_t s) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return kernel_failure("layer_norm_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype)) return kernel_failure("layer_norm_grad: operands must be float");
  int64_t rows, n;
  if (!norm_rows(x.shape, axis, &rows, &n)) return kernel_failure("layer_norm_grad: axis out of range");
  if (scale.data && (scale.shape.numel() != n || !is_float(scale.dtype)))
    return kernel_failure("layer_norm_grad: scale must be float of the normalised size");
  if ((dscale.data && (dscale.shape.numel() != n || !is_float(dscale.dtype))) ||
      (dbias.data && (dbias.shape.numel() != n || !is_float(dbias.dtype))))
    return kernel_failure("layer_norm_grad: dscale and dbias must be float of the normalised size");
  if (!ws && rows * n > 0) return kernel_failure("layer_norm_grad: workspace missing");
  ZK_CUDA_TRY(launch::norm_grad(false, x.data, x.dtype, scale.data, scale.dtype, dy.data, dy.dtype, dx.data, dx.dtype,
                                dscale.data, dscale.dtype, dbias.data, dbias.dtype, rows, n, eps, static_cast<float *>(ws), s));
  return {};
}

size_t rms_norm_grad_workspace(const In &x) {
  if (x.shape.rank < 1) return 0;
  return layer_norm_grad_workspace(x, x.shape.rank - 1);
}

GpuStatus rms_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, float eps, void *ws,
                        cudaStream_t s) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return kernel_failure("rms_norm_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype)) return kernel_failure("rms_norm_grad: operands must be float");
  if (x.shape.rank < 1) return kernel_failure("rms_norm_grad: input must have rank >= 1");
  int64_t rows, n;
  norm_rows(x.shape, x.shape.rank - 1, &rows, &n);
  if (scale.data && (scale.shape.numel() != n || !is_float(scale.dtype)))
    return kernel_failure("rms_norm_grad: scale must be float of the last dim's size");
  if (dscale.data && (dscale.shape.numel() != n || !is_float(dscale.dtype)))
    return kernel_failure("rms_norm_grad: dscale must be float of the last dim's size");
  if (!ws && rows * n > 0) return kernel_failure("rms_norm_grad: workspace missing");
  ZK_CUDA_TRY(launch::norm_grad(true, x.data, x.dtype, scale.data, scale.dtype, dy.data, dy.dtype, dx.data, dx.dtype,
                                dscale.data, dscale.dtype, nullptr, DType::f32, rows, n, eps, static_cast<float *>(ws), s));
  return {};
}

size_t embedding_grad_workspace(const Out &) { return 0; }

GpuStatus embedding_grad(const In &ids, const In &dy, const Out &dtable, int64_t row_start, void *, cudaStream_t s) {
  if (dtable.shape.rank != 2) return kernel_failure("embedding_grad: dtable must be [V, D]");
  if (ids.dtype != DType::i64 && ids.dtype != DType::i32) return kernel_failure("embedding_grad: ids must be i64 or i32");
  if (!is_float(dy.dtype) || !is_float(dtable.dtype)) return kernel_failure("embedding_grad: dy and dtable must be float");
  const int64_t V = dtable.shape.d[0], D = dtable.shape.d[1];
  if (dy.shape.rank != ids.shape.rank + 1 || dy.shape.d[dy.shape.rank - 1] != D)
    return kernel_failure("embedding_grad: dy must be [ids..., D]");
  for (int i = 0; i < ids.shape.rank; ++i)
    if (dy.shape.d[i] != ids.shape.d[i]) return kernel_failure("embedding_grad: dy must be [ids..., D]");
  // The fp32 row lives in shared memory: up to 48K floats with the opt-in limit raised below.
  if (D > 48 * 1024) return kernel_failure("embedding_grad: rows longer than 49152 elements");
  if (V > 0x7fffffffLL) return kernel_failure("embedding_grad: table too tall");
  if (V * D == 0) return {};
  static cudaError_t attr =
      cudaFuncSetAttribute(embedding_grad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024 * 4);
  ZK_CUDA_TRY(attr);
  embedding_grad_kernel<<<static_cast<unsigned>(V), kEmbThreads, static_cast<size_t>(D) * sizeof(float), s>>>(
      ids.data, ids.dtype, dy.data, dy.dtype, dtable.data, dtable.dtype, ids.shape.numel(), D, row_start);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus label_pick(const In &logits, const In &labels, const Out &out, int64_t row_start, int64_t ignore, cudaStream_t s) {
  if (logits.shape.rank != 2) return kernel_failure("label_pick: logits must be [N, V]");
  if (labels.dtype != DType::i64 && labels.dtype != DType::i32) return kernel_failure("label_pick: labels must be i64 or i32");
  if (!is_float(logits.dtype) || !is_float(out.dtype)) return kernel_failure("label_pick: logits and out must be float");
  const int64_t N = logits.shape.d[0], V = logits.shape.d[1];
  if (labels.shape.numel() != N || out.shape.numel() != N) return kernel_failure("label_pick: labels and out must have N elements");
  if (N == 0) return {};
  label_pick_kernel<<<static_cast<unsigned>((N + 255) / 256), 256, 0, s>>>(logits.data, logits.dtype, labels.data,
                                                                           labels.dtype, out.data, out.dtype, N, V,
                                                                           row_start, ignore);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus label_pick_grad(const In &labels, const In &dy, const Out &dl, int64_t row_start, int64_t ignore, cudaStream_t s) {
  if (dl.shape.rank != 2) return kernel_failure("label_pick_grad: dlogits must be [N, V]");
  if (labels.dtype != DType::i64 && labels.dtype != DType::i32) return kernel_failure("label_pick_grad: labels must be i64 or i32");
  if (!is_float(dy.dtype) || !is_float(dl.dtype)) return kernel_failure("label_pick_grad: dy and dlogits must be float");
  const int64_t N = dl.shape.d[0], V = dl.shape.d[1];
  if (labels.shape.numel() != N || dy.shape.numel() != N) return kernel_failure("label_pick_grad: labels and dy must have N elements");
  if (N * V == 0) return {};
  const bool v4 = dl.dtype == DType::f32 && V % 4 == 0 && reinterpret_cast<uintptr_t>(dl.data) % 16 == 0;
  const int64_t per_row = v4 ? V / 4 : V;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((per_row + detail::kThreads - 1) / detail::kThreads, 64)),
                  static_cast<unsigned>(std::min<int64_t>(N, 4096)));
  if (v4)
    label_pick_grad_kernel<true><<<grid, detail::kThreads, 0, s>>>(labels.data, labels.dtype, dy.data, dy.dtype, dl.data,
                                                                    dl.dtype, N, V, row_start, ignore);
  else
    label_pick_grad_kernel<false><<<grid, detail::kThreads, 0, s>>>(labels.data, labels.dtype, dy.data, dy.dtype, dl.data,
                                                                     dl.dtype, N, V, row_start, ignore);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus adamw(const Out &param, const In &grad, const Out &m, const Out &v, const In &lr, const In &step,
                const In &grad_scale, const cpu::AdamWParams &p, cudaStream_t s) {
  if (grad.shape != param.shape || m.shape != param.shape || v.shape != param.shape)
    return kernel_failure("adamw: param, grad, m and v shapes differ");
  if (!is_float(param.dtype) || !is_float(grad.dtype) || !is_float(m.dtype) || !is_float(v.dtype))
    return kernel_failure("adamw: param, grad, m and v must be float");
  if (lr.shape.numel() != 1 || step.shape.numel() != 1 || grad_scale.shape.numel() != 1)
    return kernel_failure("adamw: lr, step and grad_scale must be scalars");
  if (!is_float(lr.dtype) || is_float(step.dtype) || !is_float(grad_scale.dtype))
    return kernel_failure("adamw: lr and grad_scale must be float, step an integer");
  const int64_t n = param.shape.numel();
  if (n == 0) return {};
  const bool f32x4 = param.dtype == DType::f32 && grad.dtype == DType::f32 && m.dtype == DType::f32 &&
                     v.dtype == DType::f32 && n % 4 == 0 &&
                     (reinterpret_cast<uintptr_t>(param.data) | reinterpret_cast<uintptr_t>(grad.data) |
                      reinterpret_cast<uintptr_t>(m.data) | reinterpret_cast<uintptr_t>(v.data)) % 16 == 0;
  const AdamWArgs args{lr.data, step.data, grad_scale.data, lr.dtype, step.dtype, grad_scale.dtype,
                       p.beta1, p.beta2, p.eps, p.weight_decay};
  if (f32x4) {
    adamw_f32x4_kernel<<<grid_for(n / 4), detail::kThreads, 0, s>>>(
        static_cast<float4 *>(param.data), static_cast<const float4 *>(grad.data), static_cast<float4 *>(m.data),
        static_cast<float4 *>(v.data), n / 4, args);
    ZK_CUDA_TRY(detail::launched());
    return {};
  }
  adamw_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(param.data, param.dtype, grad.data, grad.dtype, m.data, m.dtype,
                                                        v.data, v.dtype, n, args);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus accumulate(const Out &target, const In &value, cudaStream_t s) {
  if (!broadcastable(value.shape, target.shape)) return kernel_failure("accumulate: value does not broadcast to the target");
  if (!is_float(target.dtype) || !is_float(value.dtype)) return kernel_failure("accumulate: operands must be float");
  const int64_t n = target.shape.numel();
  if (n == 0) return {};
  IndexMap<1> vmap;
  vmap.rank = target.shape.rank;
  for (int i = 0; i < vmap.rank; ++i) vmap.dims[i] = target.shape.d[i];
  detail::broadcast_strides(value.shape, target.shape, vmap.st[0]);
  accumulate_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(target.data, target.dtype, value.data, value.dtype, n, vmap);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

size_t sum_squares_workspace() { return static_cast<size_t>(workspace::sum_squares()); }

GpuStatus sum_squares(const In &x, const Out &out, void *ws, cudaStream_t s) {
  if (!is_float(x.dtype)) return kernel_failure("sum_squares: x must be float");
  if (out.shape.numel() != 1 || out.dtype != DType::f32) return kernel_failure("sum_squares: out must be one f32 element");
  if (!ws) return kernel_failure("sum_squares: workspace missing");
  const int64_t n = x.shape.numel();
  if (x.dtype == DType::f32 && n % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0)
    sum_squares_part_f32x4<<<kSsBlocks, 256, 0, s>>>(static_cast<const float4 *>(x.data), n / 4,
                                                      static_cast<double *>(ws));
  else
    sum_squares_part<<<kSsBlocks, 256, 0, s>>>(x.data, x.dtype, n, static_cast<double *>(ws));
  sum_squares_finish<<<1, 256, 0, s>>>(static_cast<const double *>(ws), kSsBlocks, static_cast<float *>(out.data));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

}  // namespace cuda
}  // namespace zk
