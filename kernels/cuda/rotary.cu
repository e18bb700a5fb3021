// The rotary position embedding: out = x * cos + rotate_half(x) * sin over x's last dim (and, with `inverse`,
// its transpose, the gradient w.r.t. x), in one pass over x.
//
// Each thread owns V consecutive elements of a row's low half and the V elements h further on that they pair
// with, so it reads both partners before it writes either (out may alias x) and no element is touched twice.
// V is 16 bytes of x's dtype (8 for bf16/fp16, 4 for fp32) when h and the pointers allow it, else 1. The
// tables are read at the row's offset into them (they broadcast over x's leading dims: a table row of llama
// serves every head of every sequence at that position). A sequence-major x [B, S, H, D] (plan 2.10) has the
// same dense rows; only the map from a row (b, s, h) to its table row changes (the position is dim 1).
//
// Tier 1 is the __global__ kernel, tier 2 the launcher in namespace `launch` (raw pointers, sizes, an index map
// and a stream, returning cudaError_t), tier 3 zk::cuda::rotary, which checks what the CPU reference checks.
#include <type_traits>
#include <utility>

#include "common.cuh"
#include "zk/cuda_rotary.h"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::IndexMap;
using detail::kThreads;
using detail::to_f32;

/// V elements of T, loaded and stored as one aligned access (two for 32-byte groups of fp32 tables).
template <class T, int V>
struct alignas(sizeof(T) * V) Group {
  T v[V];
};

/// One rotated pair group: V elements at i and V at i + h of row r. The products are rounded to fp32 before
/// the sum (no fused multiply-add), exactly as the CPU reference computes them.
template <class T, class U, int V>
__global__ void rotary_kernel(const T *x, const U *__restrict__ cos, const U *__restrict__ sin, T *y, int64_t rows,
                              int64_t d, IndexMap<1> table, bool inverse) {
  const int64_t h = d / 2, groups = h / V, n = rows * groups;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / groups, i = (k - r * groups) * V;
    int64_t off[1];
    table.offsets(r, off);
    const int64_t xo = r * d + i, to = off[0] + i;
    const Group<T, V> a = *reinterpret_cast<const Group<T, V> *>(x + xo);
    const Group<T, V> b = *reinterpret_cast<const Group<T, V> *>(x + xo + h);
    const Group<U, V> ca = *reinterpret_cast<const Group<U, V> *>(cos + to);
    const Group<U, V> cb = *reinterpret_cast<const Group<U, V> *>(cos + to + h);
    // Forward: each half takes sin at its own index; the transpose takes each partner's sin at the partner's.
    const Group<U, V> sa = *reinterpret_cast<const Group<U, V> *>(sin + (inverse ? to + h : to));
    const Group<U, V> sb = *reinterpret_cast<const Group<U, V> *>(sin + (inverse ? to : to + h));
    Group<T, V> lo, hi;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xa = to_f32(a.v[j]), xb = to_f32(b.v[j]);
      const float pa = __fmul_rn(xa, to_f32(ca.v[j])), pb = __fmul_rn(xb, to_f32(cb.v[j]));
      const float qa = __fmul_rn(xb, to_f32(sa.v[j])), qb = __fmul_rn(xa, to_f32(sb.v[j]));
      lo.v[j] = from_f32<T>(inverse ? __fadd_rn(pa, qa) : __fsub_rn(pa, qa));
      hi.v[j] = from_f32<T>(inverse ? __fsub_rn(pb, qb) : __fadd_rn(pb, qb));
    }
    *reinterpret_cast<Group<T, V> *>(y + xo) = lo;
    *reinterpret_cast<Group<T, V> *>(y + xo + h) = hi;
  }
}

template <class T, class U, int V>
cudaError_t start(const T *x, const U *cos, const U *sin, T *y, int64_t rows, int64_t d, const IndexMap<1> &table,
                  bool inverse, cudaStream_t s) {
  const int64_t n = rows * (d / 2 / V);
  rotary_kernel<T, U, V><<<detail::grid_for(n), kThreads, 0, s>>>(x, cos, sin, y, rows, d, table, inverse);
  return detail::launched();
}

bool aligned(const void *p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

// --- tier 2 -----------------------------------------------------------------------------------------------------
namespace launch {

/// x and y [rows, d] (dense rows), the tables read at table.offsets(row) + column.
template <class T, class U>
cudaError_t rotary(const T *x, const U *cos, const U *sin, T *y, int64_t rows, int64_t d, const IndexMap<1> &table,
                   bool inverse, cudaStream_t s) {
  if (rows == 0 || d == 0) return cudaSuccess;
  constexpr int V = 16 / sizeof(T);
  const bool vec = (d / 2) % V == 0 && aligned(x, 16) && aligned(y, 16) && aligned(cos, sizeof(U) * V) &&
                   aligned(sin, sizeof(U) * V);
  if (vec) return start<T, U, V>(x, cos, sin, y, rows, d, table, inverse, s);
  return start<T, U, 1>(x, cos, sin, y, rows, d, table, inverse, s);
}

}  // namespace launch

// --- tier 3 -----------------------------------------------------------------------------------------------------
namespace {

template <class F>
cudaError_t with_float(DType t, F &&f) {
  switch (t) {
    case DType::f32: return f(static_cast<float *>(nullptr));
    case DType::bf16: return f(static_cast<__nv_bfloat16 *>(nullptr));
    default: return f(static_cast<__half *>(nullptr));
  }
}

}  // namespace

GpuStatus rotary(const In &x, const In &cos, const In &sin, const Out &out, bool inverse, cudaStream_t s,
                 bool seq_major) {
  const Dims &sh = x.shape;
  if (seq_major && sh.rank != 4) return kernel_failure("rotary: seq_major needs a rank-4 [B, S, H, D] x");
  // The tables broadcast to the head-major view [B, H, S, D] of a sequence-major x: they index by position.
  Dims view = sh;
  if (seq_major) std::swap(view.d[1], view.d[2]);
  if (sh.rank < 1 || sh.d[sh.rank - 1] % 2 != 0) return kernel_failure("rotary: x must have rank >= 1 and an even last dim");
  if (out.shape != sh) return kernel_failure("rotary: output shape differs from x's");
  if (!is_float(x.dtype) || !is_float(cos.dtype) || out.dtype != x.dtype)
    return kernel_failure("rotary: x, cos and sin must be float, and out of x's dtype");
  if (cos.shape != sin.shape || cos.dtype != sin.dtype) return kernel_failure("rotary: cos and sin differ in shape or dtype");
  if (cos.shape.rank < 1 || cos.shape.d[cos.shape.rank - 1] != sh.d[sh.rank - 1] || !broadcastable(cos.shape, view))
    return kernel_failure(seq_major ? "rotary: cos and sin must broadcast to x's head-major view with its last dim"
                                    : "rotary: cos and sin must broadcast to x with its last dim");
  const int64_t d = sh.d[sh.rank - 1], rows = sh.numel() / (d == 0 ? 1 : d);
  // The map from a row of x to its table row: x's leading dims, with the tables' broadcast strides.
  IndexMap<1> table;
  table.rank = sh.rank - 1;
  int64_t st[kMaxRank] = {};
  detail::broadcast_strides(cos.shape, view, st);
  // Sequence-major rows run (b, s, h): the view's strides of h and s swap back, so that row (b, s, h) reads
  // the table row of position s. The kernel itself is unchanged (x's rows stay dense).
  if (seq_major) std::swap(st[1], st[2]);
  for (int k = 0; k < table.rank; ++k) {
    table.dims[k] = sh.d[k];
    table.st[0][k] = st[k];
  }
  ZK_CUDA_TRY(with_float(x.dtype, [&](auto *xt) {
    using T = std::remove_pointer_t<decltype(xt)>;
    return with_float(cos.dtype, [&](auto *ct) {
      using U = std::remove_pointer_t<decltype(ct)>;
      return launch::rotary<T, U>(static_cast<const T *>(x.data), static_cast<const U *>(cos.data),
                                  static_cast<const U *>(sin.data), static_cast<T *>(out.data), rows, d, table,
                                  inverse, s);
    });
  }));
  return {};
}

}  // namespace cuda
}  // namespace zk
