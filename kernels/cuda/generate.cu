// The generation kernels on the GPU (docs/generation.md): the KV-cache write, attention of new queries over
// the cache, greedy selection and the per-sequence row pick. Each mirrors the CPU reference kernel of the
// same name (kernels/cpu/generate.cpp). The attention is the simple exact form (one block per query row, the
// row's scores in shared memory, fp32 sums): decode steps are small, and a faster kernel can replace it
// behind the same signature.
#include <cstdint>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"

namespace zk {
namespace cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::grid_for;
using detail::load_f;
using detail::load_i;
using detail::store_f;

constexpr int kRowThreads = 128;

__global__ void kv_write_kernel(uint8_t* cache, const uint8_t* value, const void* pos, DType pt, int64_t B,
                                int64_t H, int64_t L, int64_t S, int64_t D, int es) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t n = B * H * S * D;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, j = (i / D) % S, h = (i / (D * S)) % H, b = i / (D * S * H);
    const int64_t p = load_i(pos, pt, b) + j;
    if (p < 0 || p >= L) continue;  // rows past the cache are dropped (the launcher checked pos itself)
    const int64_t dst = ((b * H + h) * L + p) * D + d;
    for (int k = 0; k < es; ++k) cache[dst * es + k] = value[i * es + k];
  }
}

// rope_kv_write: one thread per unit of three ranges laid end to end: the rotated pairs (i, i + D/2) of q's rows
// (written to q_out), those of k's rows (written into the k cache at pos[b] + s), and v's elements (copied into
// the v cache). The products are rounded before the sums (rope_forward, no contraction), as the rotary kernels
// and the CPU reference compute them. Tables [t0 = 1 or B, 1, t2 = 1 or S, D].
__global__ void rope_kv_write_kernel(const void* q, const void* k, const void* v, DType et, const void* cos,
                                     const void* sin, DType tt, int64_t t0, int64_t t2, const void* pos, void* q_out,
                                     void* k_cache, void* v_cache, int64_t B, int64_t Hq, int64_t Hkv, int64_t S,
                                     int64_t L, int64_t D) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t h = D / 2, nq = B * Hq * S * h, nk = B * Hkv * S * h, nv = B * Hkv * S * D;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < nq + nk + nv;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (u < nq + nk) {
      const bool is_q = u < nq;
      const int64_t w = is_q ? u : u - nq, H = is_q ? Hq : Hkv;
      const int64_t i = w % h, row = w / h, s = row % S, hh = (row / S) % H, b = row / (S * H);
      const int64_t src = row * D;
      const int64_t to = ((t0 == 1 ? 0 : b) * t2 + (t2 == 1 ? 0 : s)) * D;
      const float a = load_f(is_q ? q : k, et, src + i), bb = load_f(is_q ? q : k, et, src + i + h);
      const float ca = load_f(cos, tt, to + i), cb = load_f(cos, tt, to + i + h);
      const float sa = load_f(sin, tt, to + i), sb = load_f(sin, tt, to + i + h);
      const float lo = detail::rope_forward(a, bb, ca, sa, true), hi = detail::rope_forward(bb, a, cb, sb, false);
      if (is_q) {
        store_f(q_out, et, src + i, lo);
        store_f(q_out, et, src + i + h, hi);
      } else {
        const int64_t p = load_i(pos, DType::i64, b) + s;
        if (p < 0 || p >= L) continue;  // rows past the cache are dropped
        const int64_t dst = ((b * Hkv + hh) * L + p) * D;
        store_f(k_cache, et, dst + i, lo);
        store_f(k_cache, et, dst + i + h, hi);
      }
    } else {
      const int64_t w = u - nq - nk;
      const int64_t d = w % D, row = w / D, s = row % S, hh = (row / S) % Hkv, b = row / (S * Hkv);
      const int64_t p = load_i(pos, DType::i64, b) + s;
      if (p < 0 || p >= L) continue;
      store_f(v_cache, et, ((b * Hkv + hh) * L + p) * D + d, load_f(v, et, w));
    }
  }
}

// One block per (b, h, i): scores of the visible keys in shared memory, then softmax and the weighted sum.
__global__ void cached_attention_kernel(const void* q, DType qt, const void* k, DType kt, const void* v,
                                        DType vt, const void* pos, DType pt, void* out, DType ot, int64_t Hq,
                                        int64_t Hkv, int64_t S, int64_t L, int64_t Dh, float scale) {
  extern __shared__ float scores[];
  __shared__ float red[32];
  const int64_t row = blockIdx.x;  // ((b * Hq + h) * S + i)
  const int64_t i = row % S, h = (row / S) % Hq, b = row / (S * Hq);
  const int64_t kh = h / (Hq / Hkv);
  const int64_t qbase = row * Dh, kbase = ((b * Hkv + kh) * L) * Dh;
  const int64_t T = min(load_i(pos, pt, b) + i + 1, L);
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    float dot = 0.0f;
    for (int64_t d = 0; d < Dh; ++d) dot += load_f(q, qt, qbase + d) * load_f(k, kt, kbase + j * Dh + d);
    scores[j] = dot * scale;
    mx = fmaxf(mx, scores[j]);
  }
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float e = isfinite(mx) ? expf(scores[j] - mx) : 0.0f;
    scores[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);  // also orders the writes of scores[] before the reads below
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < T; ++j) acc += scores[j] * load_f(v, vt, kbase + j * Dh + d);
    store_f(out, ot, qbase + d, acc * inv);
  }
}

// One block per row: each thread's best (value, index), then a shared-memory tree in which the larger value
// wins and a tie goes to the smaller index (torch.argmax's first maximum); NaN beats every number.
__global__ void argmax_kernel(const void* x, DType xt, int64_t V, int64_t* out) {
  ::zk::cuda::detail::pdl_enter();
  __shared__ float bv[kRowThreads];
  __shared__ int64_t bi[kRowThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * V;
  float best = -INFINITY;
  int64_t idx = -1;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = load_f(x, xt, base + j);
    if (idx < 0 || (!isnan(best) && (e > best || isnan(e)))) {
      best = e;
      idx = j;
    }
  }
  bv[threadIdx.x] = best;
  bi[threadIdx.x] = idx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = bv[threadIdx.x + s];
      const int64_t oi = bi[threadIdx.x + s];
      const float mv = bv[threadIdx.x];
      const int64_t mi = bi[threadIdx.x];
      bool take = false;
      if (oi >= 0) {
        if (mi < 0)
          take = true;
        else if (isnan(ov) != isnan(mv))
          take = isnan(ov);
        else if (isnan(ov) || ov == mv)
          take = oi < mi;
        else
          take = ov > mv;
      }
      if (take) {
        bv[threadIdx.x] = ov;
        bi[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = bi[0] < 0 ? 0 : bi[0];
}

__global__ void take_rows_kernel(const uint8_t* x, const void* index, DType it, uint8_t* out, int64_t B,
                                 int64_t S, int64_t row, int es) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t n = B * row;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / row, r = e % row;
    int64_t i = load_i(index, it, b);
    i = i < 0 ? 0 : (i >= S ? S - 1 : i);  // the launcher cannot read device indices; clamp to stay in bounds
    const int64_t src = (b * S + i) * row + r;
    for (int k = 0; k < es; ++k) out[e * es + k] = x[src * es + k];
  }
}

}  // namespace

GpuStatus kv_write(const Out& cache, const In& value, const In& pos, cudaStream_t s) {
  if (cache.shape.rank != 4 || value.shape.rank != 4)
    return kernel_failure("kv_write: cache and value must be rank 4");
  const int64_t B = cache.shape.d[0], H = cache.shape.d[1], L = cache.shape.d[2], D = cache.shape.d[3];
  const int64_t S = value.shape.d[2];
  if (value.shape.d[0] != B || value.shape.d[1] != H || value.shape.d[3] != D || S > L)
    return kernel_failure("kv_write: value does not fit the cache");
  if (cache.dtype != value.dtype) return kernel_failure("kv_write: cache and value dtypes differ");
  if (pos.dtype != DType::i64 || pos.shape != Dims{B}) return kernel_failure("kv_write: pos must be i64 [B]");
  const int64_t n = B * H * S * D;
  if (n == 0) return {};
  ::zk::cuda::detail::launch_pdl(kv_write_kernel, dim3(grid_for(n)), dim3(detail::kThreads), 0, s,
                                 static_cast<uint8_t*>(cache.data), static_cast<const uint8_t*>(value.data),
                                 pos.data, pos.dtype, B, H, L, S, D,
                                 static_cast<int>(dtype_size(cache.dtype)));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus rope_kv_write(const In& q, const In& k, const In& v, const In& cos, const In& sin, const In& pos,
                        const Out& q_out, const Out& k_cache, const Out& v_cache, cudaStream_t s) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || k_cache.shape.rank != 4 || v.shape != k.shape ||
      v_cache.shape != k_cache.shape || q_out.shape != q.shape)
    return kernel_failure("rope_kv_write: q, k, v, the caches and q_out must be rank 4 (v as k, q_out as q)");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], D = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], L = k_cache.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[2] != S || k.shape.d[3] != D || D % 2 != 0 || k_cache.shape.d[0] != B ||
      k_cache.shape.d[1] != Hkv || k_cache.shape.d[3] != D || S > L)
    return kernel_failure("rope_kv_write: the shapes do not fit ([B, H, S, D] with an even D, caches [B, Hkv, L, D])");
  const DType e = q.dtype;
  if (!is_float(e) || k.dtype != e || v.dtype != e || q_out.dtype != e || k_cache.dtype != e || v_cache.dtype != e)
    return kernel_failure("rope_kv_write: q, k, v, q_out and the caches must share one float dtype");
  const Dims& t = cos.shape;
  if (sin.shape != t || sin.dtype != cos.dtype || !is_float(cos.dtype) || t.rank != 4 || (t.d[0] != 1 && t.d[0] != B) ||
      t.d[1] != 1 || (t.d[2] != 1 && t.d[2] != S) || t.d[3] != D)
    return kernel_failure("rope_kv_write: cos and sin must be [1 or B, 1, 1 or S, D] of one float dtype");
  if (pos.dtype != DType::i64 || pos.shape != Dims{B}) return kernel_failure("rope_kv_write: pos must be i64 [B]");
  const int64_t n = B * Hq * S * (D / 2) + B * Hkv * S * (D / 2) + B * Hkv * S * D;
  if (n == 0) return {};
  ::zk::cuda::detail::launch_pdl(rope_kv_write_kernel, dim3(grid_for(n)), dim3(detail::kThreads), 0, s, q.data,
                                 k.data, v.data, e, cos.data, sin.data, cos.dtype, t.d[0], t.d[2], pos.data,
                                 q_out.data, k_cache.data, v_cache.data, B, Hq, Hkv, S, L, D);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus cached_attention(const In& q, const In& k, const In& v, const In& pos, const Out& out, float scale,
                           cudaStream_t s) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape != k.shape)
    return kernel_failure("cached_attention: q and the caches must be rank 4, v shaped like k");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], L = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh || Hkv <= 0 || Hq % Hkv != 0 || S > L)
    return kernel_failure("cached_attention: the caches do not fit q");
  if (out.shape != q.shape) return kernel_failure("cached_attention: output shape differs from q's");
  if (pos.dtype != DType::i64 || pos.shape != Dims{B})
    return kernel_failure("cached_attention: pos must be i64 [B]");
  if (!is_float(q.dtype) || !is_float(k.dtype) || !is_float(v.dtype) || !is_float(out.dtype))
    return kernel_failure("cached_attention: operands must be float");
  const size_t shared = static_cast<size_t>(L) * sizeof(float);
  if (shared > 48 * 1024) return kernel_failure("cached_attention: the cache is longer than 12288 positions");
  const int64_t rows = B * Hq * S;
  if (rows == 0) return {};
  if (rows > 0x7fffffffLL) return kernel_failure("cached_attention: too many query rows");
  cached_attention_kernel<<<static_cast<unsigned>(rows), kRowThreads, shared, s>>>(
      q.data, q.dtype, k.data, k.dtype, v.data, v.dtype, pos.data, pos.dtype, out.data, out.dtype, Hq, Hkv, S,
      L, Dh, scale);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus argmax(const In& x, const Out& out, cudaStream_t s) {
  if (x.shape.rank < 1 || !is_float(x.dtype))
    return kernel_failure("argmax: input must be float of rank >= 1");
  if (out.dtype != DType::i64 || out.shape.rank != x.shape.rank - 1)
    return kernel_failure("argmax: output must be i64");
  for (int i = 0; i < out.shape.rank; ++i)
    if (out.shape.d[i] != x.shape.d[i])
      return kernel_failure("argmax: output shape is not the input's leading dims");
  const int64_t V = x.shape.d[x.shape.rank - 1], rows = out.shape.numel();
  if (V < 1) return kernel_failure("argmax: empty rows");
  if (rows == 0) return {};
  if (rows > 0x7fffffffLL) return kernel_failure("argmax: too many rows");
  ::zk::cuda::detail::launch_pdl(argmax_kernel, dim3(static_cast<unsigned>(rows)), dim3(kRowThreads), 0, s,
                                 x.data, x.dtype, V, static_cast<int64_t*>(out.data));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus take_rows(const In& x, const In& index, const Out& out, cudaStream_t s) {
  if (x.shape.rank < 2) return kernel_failure("take_rows: input must be [B, S, ...]");
  const int64_t B = x.shape.d[0], S = x.shape.d[1];
  if (index.dtype != DType::i64 || index.shape != Dims{B})
    return kernel_failure("take_rows: index must be i64 [B]");
  if (out.dtype != x.dtype || out.shape.rank != x.shape.rank - 1 || out.shape.d[0] != B)
    return kernel_failure("take_rows: output must be [B, ...] of the input's dtype");
  if (B * S == 0) return {};
  const int64_t row = x.shape.numel() / (B * S);
  if (out.shape.numel() != B * row) return kernel_failure("take_rows: output size is not B rows");
  if (B * row == 0) return {};
  ::zk::cuda::detail::launch_pdl(take_rows_kernel, dim3(grid_for(B * row)), dim3(detail::kThreads), 0, s,
                                 static_cast<const uint8_t*>(x.data), index.data, index.dtype,
                                 static_cast<uint8_t*>(out.data), B, S, row,
                                 static_cast<int>(dtype_size(x.dtype)));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

}  // namespace cuda
}  // namespace zk
