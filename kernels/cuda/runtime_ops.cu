// The run-time ops of decoder exports on the GPU (ONNX semantics, as the CPU reference kernels in
// kernels/cpu/runtime_ops.cpp): Range, CumSum, GatherND, GatherElements, Mod, Floor, Tile, and the min and
// prod reductions. Small, memory-bound kernels on run-time dtype tags; index data stays on the device, so an
// out-of-range index yields zero instead of a host-side error.
#include <climits>
#include <cmath>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"

namespace zk {
namespace cuda {
namespace {

using detail::grid_for;
using detail::IndexMap;
using detail::load_f;
using detail::load_i;
using detail::store_f;
using detail::store_i;

__device__ __forceinline__ bool fl(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

#define ZK_GRID_STRIDE(i, n)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// --- tier 1 ------------------------------------------------------------------------------------------------
__global__ void range_kernel(const void *start, DType st, const void *delta, DType dt, void *out, DType ot, int64_t n) {
  ZK_GRID_STRIDE(i, n) {
    if (fl(ot)) {
      const double s = load_f(start, st, 0), d = load_f(delta, dt, 0);
      // Uncontracted, as the host computes it, so both round the same double once.
      store_f(out, ot, i, static_cast<float>(__dadd_rn(s, __dmul_rn(static_cast<double>(i), d))));
    } else {
      store_i(out, ot, i, load_i(start, st, 0) + i * load_i(delta, dt, 0));
    }
  }
}

/// One thread per line along the axis: lines are short in decoder graphs (positions, masks).
__global__ void cumsum_kernel(const void *x, void *out, DType t, int64_t lines, int64_t n, int64_t inner, bool exclusive,
                              bool reverse) {
  ZK_GRID_STRIDE(line, lines) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    double acc = 0.0;
    long long iacc = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t at = base + (reverse ? n - 1 - s : s) * inner;
      if (fl(t)) {
        const double v = load_f(x, t, at);
        if (!exclusive) acc += v;
        store_f(out, t, at, static_cast<float>(acc));
        if (exclusive) acc += v;
      } else {
        const long long v = load_i(x, t, at);
        if (!exclusive) iacc += v;
        store_i(out, t, at, iacc);
        if (exclusive) iacc += v;
      }
    }
  }
}

struct NdGeom {
  int k;                      // index tuple length
  int64_t slice, per_batch, batch_stride;
  int64_t dims[kMaxRank];     // data dims indexed by the tuple
  int64_t strides[kMaxRank];  // their element strides
};

/// One thread per output element: tuple t = i / slice picks a slice of data.
__global__ void gather_nd_kernel(const void *data, const void *idx, DType it, void *out, size_t es, int64_t total, NdGeom g) {
  ZK_GRID_STRIDE(i, total) {
    const int64_t t = i / g.slice, w = i % g.slice;
    int64_t off = (g.per_batch ? t / g.per_batch : 0) * g.batch_stride;
    bool ok = true;
    for (int c = 0; c < g.k; ++c) {
      int64_t id = load_i(idx, it, t * g.k + c);
      if (id < 0) id += g.dims[c];
      ok = ok && id >= 0 && id < g.dims[c];
      off += id * g.strides[c];
    }
    auto *dst = static_cast<unsigned char *>(out) + i * es;
    const auto *src = static_cast<const unsigned char *>(data) + (off + w) * es;
    for (size_t b = 0; b < es; ++b) dst[b] = ok ? src[b] : 0;
  }
}

/// `dmap` gives the data offset of the output index with the axis coordinate dropped.
__global__ void gather_elements_kernel(const void *data, const void *idx, DType it, void *out, size_t es, int64_t total,
                                       IndexMap<1> dmap, int64_t dim, int64_t axis_stride) {
  ZK_GRID_STRIDE(i, total) {
    int64_t off[1];
    dmap.offsets(i, off);
    int64_t id = load_i(idx, it, i);
    if (id < 0) id += dim;
    const bool ok = id >= 0 && id < dim;
    auto *dst = static_cast<unsigned char *>(out) + i * es;
    const auto *src = static_cast<const unsigned char *>(data) + (off[0] + id * axis_stride) * es;
    for (size_t b = 0; b < es; ++b) dst[b] = ok ? src[b] : 0;
  }
}

__global__ void mod_kernel(const void *a, const void *b, void *out, DType t, bool fmod_, int64_t n, IndexMap<2> map) {
  ZK_GRID_STRIDE(i, n) {
    int64_t off[2];
    map.offsets(i, off);
    if (fl(t)) {
      store_f(out, t, i, fmodf(load_f(a, t, off[0]), load_f(b, t, off[1])));
    } else {
      const long long x = load_i(a, t, off[0]), y = load_i(b, t, off[1]);
      long long m = (y == 0 || y == -1) ? 0 : x % y;
      if (!fmod_ && m != 0 && ((m < 0) != (y < 0))) m += y;
      store_i(out, t, i, m);
    }
  }
}

__global__ void floor_kernel(const void *x, void *out, DType t, int64_t n) {
  ZK_GRID_STRIDE(i, n) store_f(out, t, i, floorf(load_f(x, t, i)));
}

__global__ void is_nan_kernel(const void *x, uint8_t *out, DType t, int64_t n) {
  ZK_GRID_STRIDE(i, n) out[i] = isnan(load_f(x, t, i)) ? 1 : 0;
}

struct TileGeom {
  int rank;
  int64_t out_dims[kMaxRank], in_dims[kMaxRank], in_strides[kMaxRank];
};

__global__ void tile_kernel(const void *x, void *out, size_t es, int64_t n, TileGeom g) {
  ZK_GRID_STRIDE(i, n) {
    int64_t rem = i, off = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t c = rem % g.out_dims[d];
      rem /= g.out_dims[d];
      off += (c % g.in_dims[d]) * g.in_strides[d];
    }
    auto *dst = static_cast<unsigned char *>(out) + i * es;
    const auto *src = static_cast<const unsigned char *>(x) + off * es;
    for (size_t b = 0; b < es; ++b) dst[b] = src[b];
  }
}

/// One warp per output element, as cuda::reduce: min (NaN propagates) or prod (double / wrapping int64).
__global__ void reduce_mp_kernel(bool is_min, const void *x, DType xt, void *y, DType yt, int64_t outputs, int64_t count,
                                 IndexMap<1> kmap, IndexMap<1> rmap) {
  const int lane = threadIdx.x & 31;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (w >= outputs) return;
  int64_t base[1];
  kmap.offsets(w, base);
  if (fl(xt)) {
    double acc = is_min ? INFINITY : 1.0;
    for (int64_t j = lane; j < count; j += 32) {
      int64_t off[1];
      rmap.offsets(j, off);
      const double v = load_f(x, xt, base[0] + off[0]);
      acc = is_min ? ((v != v || v < acc) && acc == acc ? v : acc) : acc * v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const double v = __shfl_xor_sync(0xffffffffu, acc, o);
      acc = is_min ? ((v != v || v < acc) && acc == acc ? v : acc) : acc * v;
    }
    if (lane == 0) store_f(y, yt, w, static_cast<float>(acc));
  } else {
    unsigned long long acc = is_min ? static_cast<unsigned long long>(LLONG_MAX) : 1ull;
    for (int64_t j = lane; j < count; j += 32) {
      int64_t off[1];
      rmap.offsets(j, off);
      const long long v = load_i(x, xt, base[0] + off[0]);
      acc = is_min ? (v < static_cast<long long>(acc) ? static_cast<unsigned long long>(v) : acc)
                   : acc * static_cast<unsigned long long>(v);
    }
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long v = __shfl_xor_sync(0xffffffffu, acc, o);
      acc = is_min ? (static_cast<long long>(v) < static_cast<long long>(acc) ? v : acc) : acc * v;
    }
    if (lane == 0) store_i(y, yt, w, static_cast<long long>(acc));
  }
}

}  // namespace

// --- tier 3 ---------------------------------------------------------------------------------------------------
GpuStatus range(const In &start, const In &delta, const Out &out, cudaStream_t s) {
  if (out.shape.rank != 1) return kernel_failure("range: output must be rank 1");
  if (start.shape.numel() != 1 || delta.shape.numel() != 1) return kernel_failure("range: start and delta must be scalars");
  if (out.dtype == DType::bool8) return kernel_failure("range: bool8 output");
  const int64_t n = out.shape.d[0];
  if (n == 0) return {};
  range_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(start.data, start.dtype, delta.data, delta.dtype, out.data, out.dtype, n);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus cumsum(const In &x, const Out &out, int axis, bool exclusive, bool reverse, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("cumsum: input and output shapes differ");
  if (x.dtype != out.dtype || x.dtype == DType::bool8) return kernel_failure("cumsum: input and output must share one numeric dtype");
  const int r = x.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("cumsum: axis out of range");
  int64_t outer = 1, inner = 1, n = x.shape.d[axis];
  for (int i = 0; i < axis; ++i) outer *= x.shape.d[i];
  for (int i = axis + 1; i < r; ++i) inner *= x.shape.d[i];
  const int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return {};
  cumsum_kernel<<<grid_for(lines), detail::kThreads, 0, s>>>(x.data, out.data, x.dtype, lines, n, inner, exclusive, reverse);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus gather_nd(const In &data, const In &indices, const Out &out, int b, cudaStream_t s) {
  const int r = data.shape.rank, q = indices.shape.rank;
  if (indices.dtype != DType::i64 && indices.dtype != DType::i32) return kernel_failure("gather_nd: indices must be i64 or i32");
  if (data.dtype != out.dtype) return kernel_failure("gather_nd: dtypes differ");
  if (q < 1 || r < 1) return kernel_failure("gather_nd: data and indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r) return kernel_failure("gather_nd: batch_dims must be below both ranks");
  const int64_t k = indices.shape.d[q - 1];
  if (k < 1 || k > r - b) return kernel_failure("gather_nd: the last dim of indices must be in [1, rank(data) - batch_dims]");
  for (int i = 0; i < b; ++i)
    if (data.shape.d[i] != indices.shape.d[i]) return kernel_failure("gather_nd: batch dims of data and indices differ");
  Dims expect;
  for (int i = 0; i < q - 1; ++i) expect.d[expect.rank++] = indices.shape.d[i];
  if (expect.rank + (r - b - k) > kMaxRank) return kernel_failure("gather_nd: rank too large");
  for (int i = b + static_cast<int>(k); i < r; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect != out.shape) return kernel_failure("gather_nd: output shape is not the gathered shape");
  int64_t ds[kMaxRank];
  detail::dense_strides(data.shape, ds);
  NdGeom g{};
  g.k = static_cast<int>(k);
  g.slice = 1;
  for (int i = b + g.k; i < r; ++i) g.slice *= data.shape.d[i];
  g.per_batch = 1;
  for (int i = b; i < q - 1; ++i) g.per_batch *= indices.shape.d[i];
  g.batch_stride = b > 0 ? ds[b - 1] : 0;
  for (int c = 0; c < g.k; ++c) {
    g.dims[c] = data.shape.d[b + c];
    g.strides[c] = ds[b + c];
  }
  const int64_t total = out.shape.numel();
  if (total == 0) return {};
  gather_nd_kernel<<<grid_for(total), detail::kThreads, 0, s>>>(data.data, indices.data, indices.dtype, out.data,
                                                                dtype_size(data.dtype), total, g);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus gather_elements(const In &data, const In &indices, const Out &out, int axis, cudaStream_t s) {
  const int r = data.shape.rank;
  if (indices.dtype != DType::i64 && indices.dtype != DType::i32) return kernel_failure("gather_elements: indices must be i64 or i32");
  if (data.dtype != out.dtype) return kernel_failure("gather_elements: dtypes differ");
  if (r < 1 || indices.shape.rank != r) return kernel_failure("gather_elements: data and indices must have one rank >= 1");
  if (out.shape != indices.shape) return kernel_failure("gather_elements: output shape differs from the indices'");
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("gather_elements: axis out of range");
  for (int i = 0; i < r; ++i)
    if (i != axis && indices.shape.d[i] > data.shape.d[i]) return kernel_failure("gather_elements: indices exceed data off the axis");
  int64_t ds[kMaxRank];
  detail::dense_strides(data.shape, ds);
  IndexMap<1> dmap;
  dmap.rank = r;
  for (int i = 0; i < r; ++i) {
    dmap.dims[i] = out.shape.d[i];
    dmap.st[0][i] = i == axis ? 0 : ds[i];
  }
  const int64_t total = out.shape.numel();
  if (total == 0) return {};
  gather_elements_kernel<<<grid_for(total), detail::kThreads, 0, s>>>(data.data, indices.data, indices.dtype, out.data,
                                                                      dtype_size(data.dtype), total, dmap,
                                                                      data.shape.d[axis], ds[axis]);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus mod(const In &a, const In &b, const Out &out, bool fmod_, cudaStream_t s) {
  Dims bc;
  if (!broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape) || !broadcast_shapes(a.shape, b.shape, &bc) ||
      bc != out.shape)
    return kernel_failure("mod: operands do not broadcast to the output shape");
  if (a.dtype != b.dtype || a.dtype != out.dtype || a.dtype == DType::bool8)
    return kernel_failure("mod: operands and output must share one numeric dtype");
  if (is_float(a.dtype) && !fmod_) return kernel_failure("mod: floating-point operands need fmod = 1 (ONNX)");
  const int64_t n = out.shape.numel();
  if (n == 0) return {};
  IndexMap<2> map;
  map.rank = out.shape.rank;
  for (int i = 0; i < map.rank; ++i) map.dims[i] = out.shape.d[i];
  detail::broadcast_strides(a.shape, out.shape, map.st[0]);
  detail::broadcast_strides(b.shape, out.shape, map.st[1]);
  mod_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(a.data, b.data, out.data, out.dtype, fmod_, n, map);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus floor(const In &x, const Out &out, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("floor: input and output shapes differ");
  if (!is_float(x.dtype) || x.dtype != out.dtype) return kernel_failure("floor: operands must share one float dtype");
  const int64_t n = x.shape.numel();
  if (n == 0) return {};
  floor_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(x.data, out.data, x.dtype, n);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus is_nan(const In &x, const Out &out, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("is_nan: input and output shapes differ");
  if (!is_float(x.dtype) || out.dtype != DType::bool8) return kernel_failure("is_nan: a float input and a bool8 output");
  const int64_t n = x.shape.numel();
  if (n == 0) return {};
  is_nan_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(x.data, static_cast<uint8_t *>(out.data), x.dtype, n);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus tile(const In &x, const Out &out, cudaStream_t s) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return kernel_failure("tile: output rank differs from the input's");
  if (x.dtype != out.dtype) return kernel_failure("tile: dtypes differ");
  for (int i = 0; i < r; ++i)
    if (x.shape.d[i] == 0 ? out.shape.d[i] != 0 : out.shape.d[i] % x.shape.d[i] != 0)
      return kernel_failure("tile: output dims are not multiples of the input's");
  const int64_t n = out.shape.numel();
  if (n == 0) return {};
  TileGeom g{};
  g.rank = r;
  detail::dense_strides(x.shape, g.in_strides);
  for (int i = 0; i < r; ++i) {
    g.out_dims[i] = out.shape.d[i];
    g.in_dims[i] = x.shape.d[i];
  }
  tile_kernel<<<grid_for(n), detail::kThreads, 0, s>>>(x.data, out.data, dtype_size(x.dtype), n, g);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus reduce_min_prod(cpu::Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims,
                          cudaStream_t s) {
  if (op != cpu::Reduce::min && op != cpu::Reduce::prod) return kernel_failure("reduce_min_prod: op must be min or prod");
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
  if (outputs == 0) return {};
  const int64_t blocks = (outputs * 32 + 255) / 256;
  reduce_mp_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(op == cpu::Reduce::min, x.data, x.dtype, out.data, out.dtype,
                                                                  outputs, count, kmap, rmap);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

}  // namespace cuda
}  // namespace zk
