// Data-movement kernels: transpose, slice (both as one strided copy), concat (as 2-D copies), gather and the
// vocabulary-parallel embedding. They move elements and never convert: operand and result dtypes agree.
// Elements travel as unsigned integers of the element's width, so one instantiation serves every dtype of
// that width.
#include "common.cuh"
#include "launch.h"

namespace zk {
namespace cuda {
namespace {

using detail::IndexMap;
using detail::kThreads;

#define ZK_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// --- tier 1 -----------------------------------------------------------------------------------------------------
template <class E>
__global__ void strided_copy_kernel(const E *__restrict__ x, E *__restrict__ y, int64_t n, int64_t base, IndexMap<1> map) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, n) {
    int64_t off[1];
    map.offsets(i, off);
    y[i] = x[base + off[0]];
  }
}

template <class E>
__global__ void gather_kernel(const E *__restrict__ x, const void *idx, DType it, E *__restrict__ y, int64_t total,
                              int64_t n, int64_t inner, int64_t dim) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, total) {
    const int64_t c = i % inner, j = (i / inner) % n, o = i / (inner * n);
    int64_t id = detail::load_i(idx, it, j);
    if (id < 0) id += dim;
    y[i] = (id >= 0 && id < dim) ? x[(o * dim + id) * inner + c] : E{};
  }
}

template <class E>
__global__ void embedding_kernel(const E *__restrict__ table, const void *ids, DType it, E *__restrict__ y, int64_t total,
                                 int64_t D, int64_t V, int64_t row_start) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, total) {
    const int64_t j = i / D, c = i % D;
    const int64_t local = detail::load_i(ids, it, j) - row_start;
    // Rows another tensor-parallel rank owns are zero here; the all_reduce that follows adds them in.
    y[i] = (local >= 0 && local < V) ? table[local * D + c] : E{};
  }
}

/// Up to kConcatMax operands of a concat, each `outer` rows of units[k] elements of type E landing at
/// column at[k] of the output's rows of at[n] elements.
constexpr int kConcatMax = 8;
struct ConcatArgs {
  const void *x[kConcatMax];
  int64_t at[kConcatMax + 1];
  int n;
};

/// One output element per thread and step: its row and column, then the operand whose columns hold it.
/// Operands are few, so the search is a short scan; the copy is one launch however many operands there are.
template <class E>
__global__ void concat_kernel(ConcatArgs a, E *__restrict__ y, int64_t total) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t width = a.at[a.n];
  ZK_GRID_STRIDE(i, total) {
    const int64_t row = i / width, col = i - row * width;
    int k = 0;
    while (k + 1 < a.n && col >= a.at[k + 1]) ++k;
    const int64_t units = a.at[k + 1] - a.at[k];
    y[i] = static_cast<const E *>(a.x[k])[row * units + col - a.at[k]];
  }
}

/// One 32x32 tile per block of 32x8 threads: read rows of src coalesced, write rows of dst coalesced; the
/// +1 column of padding keeps the transposed reads of the tile free of bank conflicts.
template <class E>
__global__ void transpose2d_kernel(const E *__restrict__ src, E *__restrict__ dst, int64_t rows, int64_t cols) {
  __shared__ E tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32, r0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][k];
  }
}

template <class F>
cudaError_t by_width(size_t es, F &&f) {
  switch (es) {
    case 1: return f(static_cast<uint8_t *>(nullptr));
    case 2: return f(static_cast<uint16_t *>(nullptr));
    case 4: return f(static_cast<uint32_t *>(nullptr));
    case 8: return f(static_cast<uint64_t *>(nullptr));
    default: return f(static_cast<uint4 *>(nullptr));
  }
}

}  // namespace

namespace detail {

/// Widens a strided copy whose innermost dim is contiguous in the source to 16-, 8- or 4-byte elements
/// when every size, stride, offset and pointer allows it: the same bytes move in a fraction of the loads
/// and index computations (a head transpose [B, S, H, 64] -> [B, H, S, 64] in bf16 becomes 16-byte moves).
void widen_copy(const void *x, const void *y, IndexMap<1> *map, int64_t *base, int64_t *n, size_t *es) {
  const int r = map->rank;
  if (r == 0 || map->st[0][r - 1] != 1) return;
  for (size_t w : {size_t{16}, size_t{8}, size_t{4}}) {
    if (w <= *es) return;
    const int64_t k = static_cast<int64_t>(w / *es);
    bool ok = map->dims[r - 1] % k == 0 && *base % k == 0 && reinterpret_cast<uintptr_t>(x) % w == 0 &&
              reinterpret_cast<uintptr_t>(y) % w == 0;
    for (int i = 0; ok && i < r - 1; ++i) ok = map->st[0][i] % k == 0;
    if (!ok) continue;
    map->dims[r - 1] /= k;
    for (int i = 0; i < r - 1; ++i) map->st[0][i] /= k;
    *base /= k;
    *n /= k;
    *es = w;
    return;
  }
}

}  // namespace detail

// --- tier 2 -----------------------------------------------------------------------------------------------------
namespace launch {

cudaError_t strided_copy(const void *x, void *y, size_t es, int64_t n, int64_t base, IndexMap<1> map,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  detail::widen_copy(x, y, &map, &base, &n, &es);
  return by_width(es, [&](auto *tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    ::zk::cuda::detail::launch_pdl(strided_copy_kernel<E>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s,
                                   static_cast<const E*>(x), static_cast<E*>(y), n, base, map);
    return detail::launched();
  });
}

cudaError_t gather(const void *x, size_t es, const void *idx, DType it, void *y, int64_t outer, int64_t n, int64_t inner,
                   int64_t dim, cudaStream_t s) {
  const int64_t total = outer * n * inner;
  if (total == 0) return cudaSuccess;
  return by_width(es, [&](auto *tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    ::zk::cuda::detail::launch_pdl(gather_kernel<E>, dim3(detail::grid_for(total)), dim3(kThreads), 0, s,
                                   static_cast<const E*>(x), idx, it, static_cast<E*>(y), total, n, inner,
                                   dim);
    return detail::launched();
  });
}

cudaError_t embedding(const void *table, size_t es, const void *ids, DType it, void *y, int64_t count, int64_t D,
                      int64_t V, int64_t row_start, cudaStream_t s) {
  const int64_t total = count * D;
  if (total == 0) return cudaSuccess;
  return by_width(es, [&](auto *tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    ::zk::cuda::detail::launch_pdl(embedding_kernel<E>, dim3(detail::grid_for(total)), dim3(kThreads), 0, s,
                                   static_cast<const E*>(table), ids, it, static_cast<E*>(y), total, D, V,
                                   row_start);
    return detail::launched();
  });
}

cudaError_t transpose2d(const void *src, void *dst, int64_t rows, int64_t cols, size_t es, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if ((cols + 31) / 32 > INT32_MAX || (rows + 31) / 32 > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  dim3 block(32, 8);
  switch (es) {
    case 2: transpose2d_kernel<uint16_t><<<grid, block, 0, s>>>(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), rows, cols); break;
    case 4: transpose2d_kernel<uint32_t><<<grid, block, 0, s>>>(static_cast<const uint32_t *>(src), static_cast<uint32_t *>(dst), rows, cols); break;
    case 8: transpose2d_kernel<uint64_t><<<grid, block, 0, s>>>(static_cast<const uint64_t *>(src), static_cast<uint64_t *>(dst), rows, cols); break;
    default: return cudaErrorInvalidValue;
  }
  return detail::launched();
}

}  // namespace launch

// --- tier 3 ------------------------------------------------------------------------------------------------------
GpuStatus transpose(const In &x, const Out &out, const int64_t *perm, cudaStream_t s) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return kernel_failure("transpose: output rank differs");
  if (x.dtype != out.dtype) return kernel_failure("transpose: dtypes differ");
  bool seen[kMaxRank] = {};
  int64_t xs[kMaxRank];
  detail::dense_strides(x.shape, xs);
  IndexMap<1> map;
  map.rank = r;
  for (int i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return kernel_failure("transpose: perm is not a permutation");
    seen[perm[i]] = true;
    if (out.shape.d[i] != x.shape.d[perm[i]]) return kernel_failure("transpose: output shape is not the permuted shape");
    map.dims[i] = out.shape.d[i];
    map.st[0][i] = xs[perm[i]];
  }
  ZK_CUDA_TRY(launch::strided_copy(x.data, out.data, dtype_size(x.dtype), out.shape.numel(), 0, map, s));
  return {};
}

GpuStatus concat(const In *xs, int n, const Out &out, int axis, cudaStream_t s) {
  const int r = out.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("concat: axis out of range");
  int64_t total = 0;
  for (int k = 0; k < n; ++k) {
    if (xs[k].shape.rank != r) return kernel_failure("concat: operand rank differs from the output's");
    if (xs[k].dtype != out.dtype) return kernel_failure("concat: operand dtype differs from the output's");
    for (int i = 0; i < r; ++i)
      if (i != axis && xs[k].shape.d[i] != out.shape.d[i]) return kernel_failure("concat: operand dims differ off the axis");
    total += xs[k].shape.d[axis];
  }
  if (total != out.shape.d[axis]) return kernel_failure("concat: operand sizes do not sum to the output's");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= out.shape.d[i];
  for (int i = axis + 1; i < r; ++i) inner *= out.shape.d[i];
  const size_t es = dtype_size(out.dtype);
  const size_t out_row = static_cast<size_t>(out.shape.d[axis] * inner) * es;
  if (outer == 0 || out_row == 0) return {};
  if (n <= kConcatMax) {
    // One kernel over the output, in the widest unit (16, 8, 4, 2 or 1 bytes) that every operand's row,
    // the output's row and every pointer allow: the rotary embedding's concat of two [.., 32] bf16 halves
    // moves 16 bytes per thread. (cudaMemcpy2DAsync per operand ran those 64-byte rows at a quarter of the
    // device's bandwidth.)
    size_t w = 16;
    auto fits = [&](size_t v) { return v % w == 0; };
    for (; w > 1; w /= 2) {
      bool ok = fits(out_row) && fits(reinterpret_cast<uintptr_t>(out.data));
      for (int k = 0; ok && k < n; ++k)
        ok = fits(static_cast<size_t>(xs[k].shape.d[axis] * inner) * es) &&
             fits(reinterpret_cast<uintptr_t>(xs[k].data));
      if (ok) break;
    }
    ConcatArgs a{};
    a.n = 0;
    a.at[0] = 0;
    for (int k = 0; k < n; ++k) {
      const int64_t units = static_cast<int64_t>(static_cast<size_t>(xs[k].shape.d[axis] * inner) * es / w);
      if (units == 0) continue;
      a.x[a.n] = xs[k].data;
      a.at[a.n + 1] = a.at[a.n] + units;
      ++a.n;
    }
    const int64_t total = outer * a.at[a.n];
    ZK_CUDA_TRY(by_width(w, [&](auto *tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      ::zk::cuda::detail::launch_pdl(concat_kernel<E>, dim3(detail::grid_for(total)), dim3(kThreads), 0, s, a,
                                     static_cast<E*>(out.data), total);
      return detail::launched();
    }));
    return {};
  }
  size_t at = 0;
  for (int k = 0; k < n; ++k) {
    const size_t row = static_cast<size_t>(xs[k].shape.d[axis] * inner) * es;
    // Each operand is `outer` rows of `row` bytes landing at column `at` of rows of `out_row` bytes: one 2-D copy.
    if (row > 0 && outer > 0)
      ZK_CUDA_TRY(cudaMemcpy2DAsync(static_cast<uint8_t *>(out.data) + at, out_row, xs[k].data, row, row,
                                    static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, s));
    at += row;
  }
  return {};
}

GpuStatus slice(const In &x, const Out &out, const int64_t *starts, const int64_t *steps, cudaStream_t s) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return kernel_failure("slice: output rank differs");
  if (x.dtype != out.dtype) return kernel_failure("slice: dtypes differ");
  int64_t xs[kMaxRank];
  detail::dense_strides(x.shape, xs);
  IndexMap<1> map;
  map.rank = r;
  int64_t base = 0;
  for (int i = 0; i < r; ++i) {
    const int64_t n = out.shape.d[i];
    if (n < 0) return kernel_failure("slice: negative size");
    if (n > 0) {
      if (steps[i] == 0) return kernel_failure("slice: zero step");
      const int64_t last = starts[i] + (n - 1) * steps[i];
      if (starts[i] < 0 || starts[i] >= x.shape.d[i] || last < 0 || last >= x.shape.d[i])
        return kernel_failure("slice: range outside the input");
    }
    base += starts[i] * xs[i];
    map.dims[i] = n;
    map.st[0][i] = steps[i] * xs[i];
  }
  ZK_CUDA_TRY(launch::strided_copy(x.data, out.data, dtype_size(x.dtype), out.shape.numel(), base, map, s));
  return {};
}

GpuStatus gather(const In &data, const In &indices, const Out &out, int axis, cudaStream_t s) {
  const int r = data.shape.rank;
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return kernel_failure("gather: axis out of range");
  if (indices.dtype != DType::i64 && indices.dtype != DType::i32) return kernel_failure("gather: indices must be i64 or i32");
  if (data.dtype != out.dtype) return kernel_failure("gather: dtypes differ");
  Dims expect;
  for (int i = 0; i < axis; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect.rank + indices.shape.rank + (r - axis - 1) > kMaxRank) return kernel_failure("gather: rank too large");
  for (int i = 0; i < indices.shape.rank; ++i) expect.d[expect.rank++] = indices.shape.d[i];
  for (int i = axis + 1; i < r; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect != out.shape) return kernel_failure("gather: output shape is not the gathered shape");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= data.shape.d[i];
  for (int i = axis + 1; i < r; ++i) inner *= data.shape.d[i];
  ZK_CUDA_TRY(launch::gather(data.data, dtype_size(data.dtype), indices.data, indices.dtype, out.data, outer,
                             indices.shape.numel(), inner, data.shape.d[axis], s));
  return {};
}

GpuStatus embedding(const In &table, const In &ids, const Out &out, int64_t row_start, cudaStream_t s) {
  if (table.shape.rank != 2) return kernel_failure("embedding: table must be [V, D]");
  if (ids.dtype != DType::i64 && ids.dtype != DType::i32) return kernel_failure("embedding: ids must be i64 or i32");
  if (table.dtype != out.dtype) return kernel_failure("embedding: dtypes differ");
  const int64_t V = table.shape.d[0], D = table.shape.d[1];
  if (out.shape.rank != ids.shape.rank + 1 || out.shape.d[out.shape.rank - 1] != D)
    return kernel_failure("embedding: output must be [ids..., D]");
  for (int i = 0; i < ids.shape.rank; ++i)
    if (out.shape.d[i] != ids.shape.d[i]) return kernel_failure("embedding: output must be [ids..., D]");
  ZK_CUDA_TRY(launch::embedding(table.data, dtype_size(table.dtype), ids.data, ids.dtype, out.data, ids.shape.numel(), D,
                                V, row_start, s));
  return {};
}

}  // namespace cuda
}  // namespace zk
