// Row kernels: softmax (plain, and masked with scale + additive mask + causal), layer norm, RMS norm, the
// fused residual + norm, and the reductions. One thread block per row; row statistics accumulate in fp32
// with block tree reductions, two passes over the row (mean, then centred squares) so that a large mean
// does not cancel the variance away.
//
// The norms are memory-bound (llama2-7b's residual + RMS norm moves 128 MiB a call over [4096, 4096] bf16),
// so their common case, rows that are whole 16-byte packs with aligned operands, has its own kernel: the
// blocks the device holds at once walk the rows, each thread with its packs of the next row (x and the
// residual) loading while it reduces and writes the current one, the row in registers, every access 16
// bytes. Other rows (a hidden size that is not a multiple of 8, an offset view, rows past 1024 packs) take
// the element-wise kernel, which keeps the row in registers too up to 8192 elements.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"

namespace zk {
namespace cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::from_f32;
using detail::IndexMap;
using detail::load_f;
using detail::to_f32;

/// Threads per row block: enough to cover short rows without idle warps, 256 for long rows.
inline int row_threads(int64_t n) {
  if (n <= 64) return 32;
  if (n <= 128) return 64;
  if (n <= 512) return 128;
  return 256;
}

// --- tier 1 ------------------------------------------------------------------------------------------------
/// Softmax over `n` elements at stride `inner`; the mask (if any) is read through `mmap` at the element's
/// dense index, causal rows are the `S` rows of each [S, n] matrix (query i sees j <= i + n - S).
template <class T, class U>
__global__ void softmax_kernel(const T *__restrict__ x, U *__restrict__ y, int64_t n, int64_t inner, float scale,
                               const void *mask, DType mt, IndexMap<1> mmap, bool causal, int64_t S) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int64_t o = row / inner, in = row % inner;
  const int64_t base = o * n * inner + in;
  const int64_t limit = causal ? (row % S) + (n - S) : n;  // last visible column, inclusive, when causal
  auto value = [&](int64_t j) -> float {
    if (causal && j > limit) return -INFINITY;
    float v = to_f32(x[base + j * inner]) * scale;
    if (mask) {
      int64_t off[1];
      mmap.offsets(base + j * inner, off);
      v += load_f(mask, mt, off[0]);
    }
    return v;
  };
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, value(j));
  mx = block_max(mx, red);
  float sum = 0.0f;
  if (isfinite(mx))
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += expf(value(j) - mx);
  sum = block_sum(sum, red);
  // A row with no finite maximum (fully masked) has no defined softmax: zeros, as the reference writes.
  const bool ok = isfinite(mx) && sum > 0.0f;
  const float inv = ok ? 1.0f / sum : 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    y[base + j * inner] = from_f32<U>(ok ? expf(value(j) - mx) * inv : 0.0f);
}

/// Layer norm or RMS norm of one row of `n`, optionally of (x + residual), which is then also stored.
/// With Cache > 0 (rows of at most Cache * blockDim elements) the row is read from memory once and held in
/// registers; otherwise it is read once per pass (the later passes mostly hit L1/L2).
template <class T, bool Rms, bool Residual, int Cache>
__global__ void __launch_bounds__(1024)
    norm_kernel(const T *__restrict__ x, const T *__restrict__ r, const T *__restrict__ scale,
                const T *__restrict__ bias, T *__restrict__ sum_out, T *__restrict__ y, int64_t n, float eps) {
  ::zk::cuda::detail::pdl_enter();
  __shared__ float red[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n;
  // The fused form normalises the rounded sum, exactly what the unfused add then norm would see.
  auto load = [&](int64_t j) -> float {
    if (!Residual) return to_f32(x[base + j]);
    return to_f32(from_f32<T>(to_f32(x[base + j]) + to_f32(r[base + j])));
  };
  auto finish = [&](int64_t j, float v, float mean, float inv) {
    if (Residual && sum_out) sum_out[base + j] = from_f32<T>(v);
    float o = (v - mean) * inv;
    if (scale) o *= to_f32(scale[j]);
    if (bias) o += to_f32(bias[j]);
    y[base + j] = from_f32<T>(o);
  };
  if (Cache > 0) {
    float v[Cache > 0 ? Cache : 1];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      v[k] = j < n ? load(j) : 0.0f;
      s += v[k];
    }
    const float mean = Rms ? 0.0f : block_sum(s, red) / static_cast<float>(n);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      const float dv = j < n ? v[k] - mean : 0.0f;
      ss += dv * dv;
    }
    const float inv = rsqrtf(block_sum(ss, red) / static_cast<float>(n) + eps);
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < n) finish(j, v[k], mean, inv);
    }
    return;
  }
  float mean = 0.0f;
  if (!Rms) {
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += load(j);
    mean = block_sum(s, red) / static_cast<float>(n);
  }
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float dv = load(j) - mean;
    ss += dv * dv;
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) finish(j, load(j), mean, inv);
}

/// norm_kernel for rows of `packs` whole 16-byte packs, every operand 16-byte aligned. A block of
/// blockDim.x threads takes rows blockIdx.x, blockIdx.x + gridDim.x, ...; thread k holds packs k,
/// k + blockDim.x, ... of a row (at most P of them), so each load instruction of the block reads one
/// contiguous stretch. The next row's packs are loaded before the current row's statistics reduce and its
/// outputs are written, so that the block keeps loads in flight through its reductions and stores: with one
/// row per block, about half of a block's time had none (llama2-7b's residual + RMS norm ran at 78% of the
/// copy rate). The launch sizes the grid to the blocks the device holds at once; a grid of one block per row
/// is the plain one-row-per-block kernel. The arithmetic is norm_kernel's, in the same order per element;
/// only the order of the fp32 partial sums differs.
template <class T, bool Rms, bool Residual, int P>
__global__ void __launch_bounds__(512, P == 1 ? 2 : 1)
    norm_packed_kernel(const T *__restrict__ x, const T *__restrict__ r, const T *__restrict__ scale,
                       const T *__restrict__ bias, T *__restrict__ sum_out, T *__restrict__ y, int64_t rows,
                       int packs, float eps) {
  using PT = detail::Pack16<T>;
  constexpr int N = PT::N;
  ::zk::cuda::detail::pdl_enter();
  __shared__ float red[32];
  int64_t row = blockIdx.x;
  if (row >= rows) return;
  const PT *xp = reinterpret_cast<const PT *>(x), *rp = reinterpret_cast<const PT *>(r);
  // One row's x (and residual) packs: a and b now, na and nb for the next row.
  PT a[P], b[P], na[P], nb[P];
  auto load = [&](int64_t rw, PT(&xa)[P], PT(&rb)[P]) {
    const int64_t base = rw * packs;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
        xa[k] = xp[base + j];
        if (Residual) rb[k] = rp[base + j];
      }
    }
  };
  load(row, a, b);
  // The scale and bias are the same for every row: loaded once.
  PT g[P], c[P];
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < packs) {
      if (scale) g[k] = reinterpret_cast<const PT *>(scale)[j];
      if (bias) c[k] = reinterpret_cast<const PT *>(bias)[j];
    }
  }
  const float n = static_cast<float>(packs) * N;
  for (;;) {
    const int64_t base = row * packs, next = row + gridDim.x;
    if (next < rows) load(next, na, nb);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
        if (Residual) {
          // The fused form normalises the rounded sum, exactly what the unfused add then norm would see.
#pragma unroll
          for (int e = 0; e < N; ++e) a[k].v[e] = from_f32<T>(to_f32(a[k].v[e]) + to_f32(b[k].v[e]));
          if (sum_out) reinterpret_cast<PT *>(sum_out)[base + j] = a[k];
        }
#pragma unroll
        for (int e = 0; e < N; ++e) s += to_f32(a[k].v[e]);
      }
    }
    const float mean = Rms ? 0.0f : block_sum(s, red) / n;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float dv = to_f32(a[k].v[e]) - mean;
          ss += dv * dv;
        }
      }
    }
    const float inv = rsqrtf(block_sum(ss, red) / n + eps);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
        PT o;
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float w = (to_f32(a[k].v[e]) - mean) * inv;
          if (scale) w *= to_f32(g[k].v[e]);
          if (bias) w += to_f32(c[k].v[e]);
          o.v[e] = from_f32<T>(w);
        }
        reinterpret_cast<PT *>(y)[base + j] = o;
      }
    }
    if (next >= rows) break;
    row = next;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      a[k] = na[k];
      if (Residual) b[k] = nb[k];
    }
  }
}

__device__ __forceinline__ float nan_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

/// One warp per output element; the reduced set is walked through `rmap`, the output's base through `kmap`.
__global__ void reduce_kernel(Reduce op, const void *x, DType xt, void *y, DType yt, int64_t outputs, int64_t count,
                              IndexMap<1> kmap, IndexMap<1> rmap) {
  const int lane = threadIdx.x & 31;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (w >= outputs) return;
  int64_t base[1];
  kmap.offsets(w, base);
  const bool fl = xt == DType::f32 || xt == DType::bf16 || xt == DType::f16;
  if (fl) {
    double acc = op == Reduce::max ? -INFINITY : 0.0;
    for (int64_t j = lane; j < count; j += 32) {
      int64_t off[1];
      rmap.offsets(j, off);
      const float v = load_f(x, xt, base[0] + off[0]);
      acc = op == Reduce::max ? nan_max(static_cast<float>(acc), v) : acc + v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const double other = __shfl_xor_sync(0xffffffffu, acc, o);
      acc = op == Reduce::max ? nan_max(static_cast<float>(acc), static_cast<float>(other)) : acc + other;
    }
    if (lane == 0) {
      if (op == Reduce::mean) acc = count ? acc / static_cast<double>(count) : NAN;
      detail::store_f(y, yt, w, static_cast<float>(acc));
    }
  } else {
    long long acc = op == Reduce::max ? LLONG_MIN : 0;
    for (int64_t j = lane; j < count; j += 32) {
      int64_t off[1];
      rmap.offsets(j, off);
      const long long v = detail::load_i(x, xt, base[0] + off[0]);
      acc = op == Reduce::max ? (v > acc ? v : acc) : acc + v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const long long other = __shfl_xor_sync(0xffffffffu, acc, o);
      acc = op == Reduce::max ? (other > acc ? other : acc) : acc + other;
    }
    if (lane == 0) {
      if (op == Reduce::mean) acc = count ? acc / count : 0;
      detail::store_i(y, yt, w, acc);
    }
  }
}

/// The common case of reduce_kernel: each output reduces one contiguous row of `count` floats of type T
/// (the trailing dims, as over the logits of the loss). One warp per row with four independent loads in
/// flight per lane; the index map's divisions are gone. Sums accumulate in double, as reduce_kernel's do.
template <class T>
__global__ void reduce_rows_kernel(Reduce op, const T *__restrict__ x, void *y, DType yt, int64_t outputs,
                                   int64_t count) {
  const int lane = threadIdx.x & 31;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (w >= outputs) return;
  const T *row = x + w * count;
  const bool mx = op == Reduce::max;
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t j = lane;
  for (; j + 96 < count; j += 128) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = detail::to_f32(row[j + 32 * u]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (mx) m[u] = nan_max(m[u], v[u]);
      else acc[u] += v[u];
    }
  }
  for (; j < count; j += 32) {
    const float v = detail::to_f32(row[j]);
    if (mx) m[0] = nan_max(m[0], v);
    else acc[0] += v;
  }
  double a = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  float b = nan_max(nan_max(m[0], m[1]), nan_max(m[2], m[3]));
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b = nan_max(b, __shfl_xor_sync(0xffffffffu, b, o));
  }
  if (lane == 0) {
    double r = mx ? static_cast<double>(b) : a;
    if (op == Reduce::mean) r = count ? a / static_cast<double>(count) : NAN;
    detail::store_f(y, yt, w, static_cast<float>(r));
  }
}

template <class F>
cudaError_t with_float_type(DType t, F &&f) {
  switch (t) {
    case DType::f32: return f(static_cast<float *>(nullptr));
    case DType::bf16: return f(static_cast<__nv_bfloat16 *>(nullptr));
    default: return f(static_cast<__half *>(nullptr));
  }
}

}  // namespace

// --- tier 2 ---------------------------------------------------------------------------------------------------
namespace launch {

template <class T, class U>
cudaError_t softmax(const T *x, U *y, int64_t rows, int64_t n, int64_t inner, float scale, const void *mask, DType mt,
                    const IndexMap<1> &mmap, bool causal, int64_t S, cudaStream_t s) {
  if (rows == 0 || n == 0) return cudaSuccess;
  softmax_kernel<T, U><<<static_cast<unsigned>(rows), row_threads(n), 0, s>>>(x, y, n, inner, scale, mask, mt, mmap,
                                                                               causal, S > 0 ? S : 1);
  return detail::launched();
}

/// Packs per thread of norm_packed_kernel: 1 for rows of up to 512 packs (llama2-7b's 4096 bf16), 2 up to
/// 1024, with at most 512 threads; 0 for longer rows, which norm_kernel takes (a thread holds its packs of
/// two rows, the current and the next, and more than two of each would not stay in registers).
inline int packs_per_thread(int64_t packs) {
  if (packs <= 512) return 1;
  if (packs <= 1024) return 2;
  return 0;
}

/// The grid of norm_packed_kernel<T, Rms, Residual, P> at t threads: one block per row up to the blocks the
/// device holds at once (its SMs times the kernel's resident blocks per SM), so that every block stays
/// resident and walks its rows with the next one in flight (on the H200, llama2-7b's residual + RMS norm
/// went from 69% to 79% of the copy rate, RMS norm alone from 41% to 58%, against one block per row). A
/// failed query launches one block per row, which the kernel runs as well, only without the prefetch.
template <class T, bool Rms, bool Residual, int P>
unsigned norm_grid(int t, int64_t rows) {
  if (rows <= 1) return static_cast<unsigned>(rows);
  // Resident blocks per SM of this kernel at each block size (t / 32 = 1..16), asked once.
  static std::atomic<int> resident[17] = {};
  const int ti = t / 32;
  int per_sm = resident[ti].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_packed_kernel<T, Rms, Residual, P>, t, 0) !=
            cudaSuccess ||
        per_sm <= 0) {
      (void)cudaGetLastError();
      return static_cast<unsigned>(rows);
    }
    resident[ti].store(per_sm, std::memory_order_relaxed);
  }
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return static_cast<unsigned>(rows);
  }
  return static_cast<unsigned>(std::min<int64_t>(rows, static_cast<int64_t>(sms) * per_sm));
}

template <class T, bool Rms, bool Residual, int P>
void norm_packed_launch(const T *x, const T *r, const T *scale, const T *bias, T *sum, T *y, int64_t rows,
                        int64_t packs, float eps, cudaStream_t s) {
  const int64_t per = (packs + P - 1) / P;
  const int t = static_cast<int>((per + 31) / 32 * 32);
  ::zk::cuda::detail::launch_pdl(norm_packed_kernel<T, Rms, Residual, P>, dim3(norm_grid<T, Rms, Residual, P>(t, rows)),
                                 dim3(t), 0, s, x, r, scale, bias, sum, y, rows, static_cast<int>(packs), eps);
}

template <class T, bool Rms, bool Residual>
void norm_launch(const T *x, const T *r, const T *scale, const T *bias, T *sum, T *y, int64_t rows, int64_t n, float eps,
                 cudaStream_t s) {
  constexpr int N = detail::Pack16<T>::N;
  const bool aligned = detail::aligned16(x) && detail::aligned16(y) && (!r || detail::aligned16(r)) &&
                       (!scale || detail::aligned16(scale)) && (!bias || detail::aligned16(bias)) &&
                       (!sum || detail::aligned16(sum));
  const int p = n % N == 0 && aligned ? packs_per_thread(n / N) : 0;
  switch (p) {
    case 1: return norm_packed_launch<T, Rms, Residual, 1>(x, r, scale, bias, sum, y, rows, n / N, eps, s);
    case 2: return norm_packed_launch<T, Rms, Residual, 2>(x, r, scale, bias, sum, y, rows, n / N, eps, s);
    default: break;
  }
  const unsigned g = static_cast<unsigned>(rows);
  int t = row_threads(n);
  // Rows too long for 8 elements per thread of 256 get up to 1024 threads, so that rows of up to 8192
  // elements stay in registers instead of being read from memory once per pass.
  if (n > 8LL * t) t = static_cast<int>(std::min<int64_t>(1024, ((n + 7) / 8 + 31) / 32 * 32));
  if (n <= 4LL * t)
    ::zk::cuda::detail::launch_pdl(norm_kernel<T, Rms, Residual, 4>, dim3(g), dim3(t), 0, s, x, r, scale,
                                   bias, sum, y, n, eps);
  else if (n <= 8LL * t)
    ::zk::cuda::detail::launch_pdl(norm_kernel<T, Rms, Residual, 8>, dim3(g), dim3(t), 0, s, x, r, scale,
                                   bias, sum, y, n, eps);
  else
    ::zk::cuda::detail::launch_pdl(norm_kernel<T, Rms, Residual, 0>, dim3(g), dim3(t), 0, s, x, r, scale,
                                   bias, sum, y, n, eps);
}

template <class T>
cudaError_t norm(const T *x, const T *r, const T *scale, const T *bias, T *sum, T *y, int64_t rows, int64_t n, bool rms,
                 float eps, cudaStream_t s) {
  if (rows == 0 || n == 0) return cudaSuccess;
  if (rms) {
    if (r) norm_launch<T, true, true>(x, r, scale, bias, sum, y, rows, n, eps, s);
    else norm_launch<T, true, false>(x, r, scale, bias, sum, y, rows, n, eps, s);
  } else {
    if (r) norm_launch<T, false, true>(x, r, scale, bias, sum, y, rows, n, eps, s);
    else norm_launch<T, false, false>(x, r, scale, bias, sum, y, rows, n, eps, s);
  }
  return detail::launched();
}

}  // namespace launch

// --- tier 3 ---------------------------------------------------------------------------------------------------------
namespace {

GpuStatus softmax_common(const In &x, const In &mask, const Out &out, int axis, bool causal, float scale,
                         cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("softmax: input and output shapes differ");
  if (!is_float(x.dtype) || !is_float(out.dtype)) return kernel_failure("softmax: operands must be float");
  if (x.dtype != out.dtype) return kernel_failure("softmax: input and output dtypes differ");
  const int r = x.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("softmax: axis out of range");
  int64_t outer = 1, inner = 1, n = x.shape.d[axis];
  for (int i = 0; i < axis; ++i) outer *= x.shape.d[i];
  for (int i = axis + 1; i < r; ++i) inner *= x.shape.d[i];
  IndexMap<1> mmap;
  if (mask.data) {
    if (!broadcastable(mask.shape, x.shape)) return kernel_failure("masked_softmax: mask does not broadcast to x");
    if (!is_float(mask.dtype)) return kernel_failure("masked_softmax: mask must be float");
    mmap.rank = r;
    for (int i = 0; i < r; ++i) mmap.dims[i] = x.shape.d[i];
    detail::broadcast_strides(mask.shape, x.shape, mmap.st[0]);
  }
  int64_t S = 1;
  if (causal) {
    if (r < 2) return kernel_failure("masked_softmax: causal needs x of rank >= 2");
    S = x.shape.d[r - 2];
    if (S > n) return kernel_failure("masked_softmax: causal needs S <= T");
  }
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::softmax<T, T>(static_cast<const T *>(x.data), static_cast<T *>(out.data), outer * inner, n, inner,
                                 scale, mask.data, mask.dtype, mmap, causal, S, s);
  }));
  return {};
}

}  // namespace

GpuStatus softmax(const In &x, const Out &out, int axis, cudaStream_t s) {
  return softmax_common(x, In{}, out, axis, false, 1.0f, s);
}

GpuStatus masked_softmax(const In &x, const In &mask, const Out &out, bool causal, float scale, cudaStream_t s) {
  return softmax_common(x, mask, out, -1, causal, scale, s);
}

GpuStatus layer_norm(const In &x, const In &scale, const In &bias, const Out &out, int axis, float eps, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("layer_norm: input and output shapes differ");
  if (!is_float(x.dtype) || x.dtype != out.dtype) return kernel_failure("layer_norm: x and out must share one float dtype");
  const int r = x.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("layer_norm: axis out of range");
  int64_t rows = 1, n = 1;
  for (int i = 0; i < axis; ++i) rows *= x.shape.d[i];
  for (int i = axis; i < r; ++i) n *= x.shape.d[i];
  if (scale.data && (scale.shape.numel() != n || scale.dtype != x.dtype))
    return kernel_failure("layer_norm: scale must have the normalised size and x's dtype");
  if (bias.data && (bias.shape.numel() != n || bias.dtype != x.dtype))
    return kernel_failure("layer_norm: bias must have the normalised size and x's dtype");
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::norm<T>(static_cast<const T *>(x.data), nullptr, static_cast<const T *>(scale.data),
                           static_cast<const T *>(bias.data), nullptr, static_cast<T *>(out.data), rows, n, false, eps, s);
  }));
  return {};
}

GpuStatus rms_norm(const In &x, const In &scale, const Out &out, float eps, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("rms_norm: input and output shapes differ");
  if (!is_float(x.dtype) || x.dtype != out.dtype) return kernel_failure("rms_norm: x and out must share one float dtype");
  if (x.shape.rank < 1) return kernel_failure("rms_norm: input must have rank >= 1");
  const int64_t n = x.shape.d[x.shape.rank - 1];
  const int64_t rows = n ? x.shape.numel() / n : 0;
  if (scale.data && (scale.shape.numel() != n || scale.dtype != x.dtype))
    return kernel_failure("rms_norm: scale must have the last dim's size and x's dtype");
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::norm<T>(static_cast<const T *>(x.data), nullptr, static_cast<const T *>(scale.data), nullptr, nullptr,
                           static_cast<T *>(out.data), rows, n, true, eps, s);
  }));
  return {};
}

GpuStatus residual_norm(const In &x, const In &res, const In &scale, const In &bias, const Out &sum, const Out &out,
                        bool rms, float eps, cudaStream_t s) {
  if (x.shape != out.shape || res.shape != x.shape) return kernel_failure("residual_norm: x, residual and out shapes differ");
  if (sum.data && sum.shape != x.shape) return kernel_failure("residual_norm: sum shape differs from x's");
  if (!is_float(x.dtype) || x.dtype != out.dtype || res.dtype != x.dtype || (sum.data && sum.dtype != x.dtype))
    return kernel_failure("residual_norm: operands must share one float dtype");
  if (x.shape.rank < 1) return kernel_failure("residual_norm: input must have rank >= 1");
  const int64_t n = x.shape.d[x.shape.rank - 1];
  const int64_t rows = n ? x.shape.numel() / n : 0;
  if (scale.data && (scale.shape.numel() != n || scale.dtype != x.dtype))
    return kernel_failure("residual_norm: scale must have the last dim's size and x's dtype");
  if (bias.data && (rms || bias.shape.numel() != n || bias.dtype != x.dtype))
    return kernel_failure("residual_norm: bias must have the last dim's size and x's dtype (and no bias with rms)");
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::norm<T>(static_cast<const T *>(x.data), static_cast<const T *>(res.data),
                           static_cast<const T *>(scale.data), static_cast<const T *>(bias.data),
                           static_cast<T *>(sum.data), static_cast<T *>(out.data), rows, n, rms, eps, s);
  }));
  return {};
}

GpuStatus reduce(Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims, cudaStream_t s) {
  // The min and prod reductions of the run-time ops live with them (runtime_ops.cu).
  if (op == Reduce::min || op == Reduce::prod) return reduce_min_prod(op, x, out, axes, naxes, keepdims, s);
  const int r = x.shape.rank;
  bool red[kMaxRank] = {};
  for (int i = 0; i < naxes; ++i) {
    if (axes[i] < 0 || axes[i] >= r) return kernel_failure("reduce: axis out of range");
    if (red[axes[i]]) return kernel_failure("reduce: repeated axis");
    red[axes[i]] = true;
  }
  Dims expect;
  IndexMap<1> kmap, rmap;
  int64_t xs[kMaxRank];
  detail::dense_strides(x.shape, xs);
  for (int i = 0; i < r; ++i) {
    if (red[i]) {
      if (keepdims) expect.d[expect.rank++] = 1;
      rmap.st[0][rmap.rank] = xs[i];
      rmap.dims[rmap.rank++] = x.shape.d[i];
    } else {
      expect.d[expect.rank++] = x.shape.d[i];
      kmap.st[0][kmap.rank] = xs[i];
      kmap.dims[kmap.rank++] = x.shape.d[i];
    }
  }
  if (expect != out.shape) return kernel_failure("reduce: output shape is not the reduced shape");
  int64_t count = 1, outputs = 1;
  for (int i = 0; i < rmap.rank; ++i) count *= rmap.dims[i];
  for (int i = 0; i < kmap.rank; ++i) outputs *= kmap.dims[i];
  // An empty set gives the identity (-inf, the lowest int64, 0), as ONNX defines it: the accumulators start there.
  if (outputs == 0) return {};
  const int threads = 256;
  const int64_t blocks = (outputs * 32 + threads - 1) / threads;
  // Reduced dims that are the trailing ones, contiguous: each output is one dense row (the loss's case).
  bool rows = count > 0;
  int64_t dense = 1;  // the stride a dense row-major layout has at this dim
  for (int i = rmap.rank - 1; i >= 0; --i) {
    rows = rows && (rmap.dims[i] == 1 || rmap.st[0][i] == dense);
    dense *= rmap.dims[i];
  }
  for (int i = kmap.rank - 1; i >= 0; --i) {
    rows = rows && (kmap.dims[i] == 1 || kmap.st[0][i] == dense);
    dense *= kmap.dims[i];
  }
  if (rows && (x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16)) {
    switch (x.dtype) {
      case DType::f32:
        reduce_rows_kernel<float><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
            op, static_cast<const float *>(x.data), out.data, out.dtype, outputs, count);
        break;
      case DType::bf16:
        reduce_rows_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
            op, static_cast<const __nv_bfloat16 *>(x.data), out.data, out.dtype, outputs, count);
        break;
      default:
        reduce_rows_kernel<__half><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
            op, static_cast<const __half *>(x.data), out.data, out.dtype, outputs, count);
        break;
    }
    ZK_CUDA_TRY(detail::launched());
    return {};
  }
  reduce_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(op, x.data, x.dtype, out.data, out.dtype, outputs, count,
                                                                   kmap, rmap);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

}  // namespace cuda
}  // namespace zk
