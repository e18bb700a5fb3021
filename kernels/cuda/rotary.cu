// The rotary position embedding: out = x * cos + rotate_half(x) * sin over x's last dim (and, with `inverse`,
// its transpose, the gradient w.r.t. x), in one pass over x.
//
// Each thread owns V consecutive elements of a row's low half and the V elements h further on that they pair
// with, in up to four rows that share a table row (the heads at one position), so it reads both partners
// before it writes either (out may alias x), no element is touched twice, and the tables are read once for
// the four rows.
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

/// The map from a row of x to its table row, for launches whose indices fit 32 bits: dims of one dropped and
/// neighbours that step the table alike merged on the host (llama's head-major [B, H, S] rows over [S, D]
/// tables become [B * H, S] with strides [0, D]), so a row costs one or two 32-bit divisions instead of a
/// 64-bit division and remainder per dim of x. The outermost dim takes no remainder.
struct TableMap32 {
  int rank = 0;
  uint32_t dims[kMaxRank] = {};
  uint32_t st[kMaxRank] = {};
  __device__ __forceinline__ uint32_t offset(uint32_t r) const {
    uint32_t off = 0;
    for (int k = rank - 1; k > 0; --k) {
      const uint32_t q = r / dims[k];
      off += (r - q * dims[k]) * st[k];
      r = q;
    }
    return rank > 0 ? off + r * st[0] : 0;
  }
};

/// The 64-bit map: IndexMap<1>'s per-dim decomposition, for x or tables past 2^31 elements.
struct TableMap64 {
  IndexMap<1> map;
  __device__ __forceinline__ int64_t offset(int64_t r) const {
    int64_t off[1];
    map.offsets(r, off);
    return off[0];
  }
};

/// Where the rows of x that share a table row lie: x's rows as [A, Dj, Sj] (row = (a * Dj + c) * Sj + z), with
/// the table row a function of (a, z) alone, so that the Dj rows c = 0 .. Dj - 1 rotate with the same cos and
/// sin. Dj is the heads of llama's q and k (head-major [B * H, S]: Dj = B * H, Sj = S; sequence-major
/// [B, S, H]: Dj = H, Sj = 1). Where the tables do not broadcast, every row is an item of its own: Dj = rows,
/// Sj = 1, one row a chunk.
template <class I>
struct Repeat {
  I dj = 1, sj = 1, chunks = 1;  // chunks: ceil(Dj / R), the work items along Dj
};

/// One work item: V elements at i and V at i + h of R rows that share a table row (rows c0 .. c0 + R - 1 of
/// their Dj). Its cos and sin groups are loaded once for the R rows (they were loaded once a row, twice the
/// bytes of x, and the tables' traffic held the kernel to 42% of the copy rate); the R rows' x groups load
/// before any is used. The products are rounded to fp32 before the sum (no fused multiply-add), exactly as
/// the CPU reference computes them. I is the index type (uint32_t where every index fits, which llama's shapes
/// do; int64_t otherwise).
/// Two blocks of 256 threads a SM at least: with 4 rows a thread, 64 KB of x in flight a SM, and no spills
/// (three blocks spill the 16-byte groups of 4 rows and the tables).
template <class T, class U, int V, int R, class I, class Map>
__global__ void __launch_bounds__(256, 2) rotary_kernel(const T *x, const U *__restrict__ cos, const U *__restrict__ sin, T *y, I items, I d,
                              Repeat<I> rep, Map table, bool inverse) {
  const I h = d / 2, groups = h / V;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I k = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; k < items; k += step) {
    I t = k / groups;
    const I i = (k - t * groups) * V;
    const I z = t % rep.sj;
    t /= rep.sj;
    const I ch = t % rep.chunks, a = t / rep.chunks, c0 = ch * R;
    const I r0 = (a * rep.dj + c0) * rep.sj + z;
    const I to = static_cast<I>(table.offset(r0)) + i;
    Group<T, V> lo[R], hi[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      if (c0 + u < rep.dj) {
        const I xo = (r0 + u * rep.sj) * d + i;
        lo[u] = *reinterpret_cast<const Group<T, V> *>(x + xo);
        hi[u] = *reinterpret_cast<const Group<T, V> *>(x + xo + h);
      }
    }
    const Group<U, V> ca = *reinterpret_cast<const Group<U, V> *>(cos + to);
    const Group<U, V> cb = *reinterpret_cast<const Group<U, V> *>(cos + to + h);
    // Forward: each half takes sin at its own index; the transpose takes each partner's sin at the partner's.
    const Group<U, V> sa = *reinterpret_cast<const Group<U, V> *>(sin + (inverse ? to + h : to));
    const Group<U, V> sb = *reinterpret_cast<const Group<U, V> *>(sin + (inverse ? to : to + h));
#pragma unroll
    for (int u = 0; u < R; ++u) {
      if (c0 + u < rep.dj) {
        Group<T, V> ol, oh;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xa = to_f32(lo[u].v[j]), xb = to_f32(hi[u].v[j]);
          const float pa = __fmul_rn(xa, to_f32(ca.v[j])), pb = __fmul_rn(xb, to_f32(cb.v[j]));
          const float qa = __fmul_rn(xb, to_f32(sa.v[j])), qb = __fmul_rn(xa, to_f32(sb.v[j]));
          ol.v[j] = from_f32<T>(inverse ? __fadd_rn(pa, qa) : __fsub_rn(pa, qa));
          oh.v[j] = from_f32<T>(inverse ? __fsub_rn(pb, qb) : __fadd_rn(pb, qb));
        }
        const I xo = (r0 + u * rep.sj) * d + i;
        *reinterpret_cast<Group<T, V> *>(y + xo) = ol;
        *reinterpret_cast<Group<T, V> *>(y + xo + h) = oh;
      }
    }
  }
}

/// The 32-bit map of `table`, or false where some index may not fit: x's elements or the tables' extent.
bool map32(const IndexMap<1> &table, int64_t x_elems, int64_t d, TableMap32 *out) {
  if (x_elems >= (int64_t{1} << 31)) return false;
  int64_t extent = d;  // the largest table row offset plus a row
  TableMap32 m;
  for (int k = 0; k < table.rank; ++k) {
    const int64_t dk = table.dims[k], sk = table.st[0][k];
    if (dk == 1) continue;
    extent += (dk - 1) * sk;
    // Merge with the previous kept dim where stepping it is stepping this one dk times (both broadcast, or
    // dense across the two).
    if (m.rank > 0 && m.st[m.rank - 1] == static_cast<uint64_t>(sk) * static_cast<uint64_t>(dk)) {
      m.dims[m.rank - 1] = static_cast<uint32_t>(m.dims[m.rank - 1] * dk);
      m.st[m.rank - 1] = static_cast<uint32_t>(sk);
      continue;
    }
    m.dims[m.rank] = static_cast<uint32_t>(dk);
    m.st[m.rank] = static_cast<uint32_t>(sk);
    ++m.rank;
  }
  if (extent >= (int64_t{1} << 31)) return false;
  *out = m;
  return true;
}

/// Rows of x that one work item rotates together (see Repeat). On the H200, llama2-7b's q rotated at 66% of
/// the copy rate this way against 43% with one row per item (the tables loaded once a row).
constexpr int kRotaryRows = 4;

template <class T, class U, int V>
cudaError_t start(const T *x, const U *cos, const U *sin, T *y, int64_t rows, int64_t d, const IndexMap<1> &table,
                  bool inverse, cudaStream_t s) {
  const int64_t groups = d / 2 / V;
  TableMap32 m32;
  if (!map32(table, rows * d, d, &m32)) {
    const int64_t items = rows * groups;
    rotary_kernel<T, U, V, 1, int64_t, TableMap64><<<detail::grid_for(items), kThreads, 0, s>>>(
        x, cos, sin, y, items, d, Repeat<int64_t>{rows, 1, rows}, TableMap64{table}, inverse);
    return detail::launched();
  }
  // The innermost dim of the (merged) map along which the tables do not move: its rows share a table row.
  Repeat<uint32_t> rep;
  for (int k = m32.rank - 1; k >= 0; --k) {
    if (m32.st[k] == 0) {  // merged dims all have more than one element
      rep.dj = m32.dims[k];
      for (int q = k + 1; q < m32.rank; ++q) rep.sj *= m32.dims[q];
      break;
    }
  }
  if (rep.dj > 1) {
    rep.chunks = (rep.dj + kRotaryRows - 1) / kRotaryRows;
    const int64_t items = rows / rep.dj * rep.chunks * groups;
    rotary_kernel<T, U, V, kRotaryRows, uint32_t, TableMap32><<<detail::grid_for(items), kThreads, 0, s>>>(
        x, cos, sin, y, static_cast<uint32_t>(items), static_cast<uint32_t>(d), rep, m32, inverse);
  } else {
    // One row per item: x's rows as [1, rows, 1], every row its own chunk.
    rep = Repeat<uint32_t>{static_cast<uint32_t>(rows), 1, static_cast<uint32_t>(rows)};
    const int64_t items = rows * groups;
    rotary_kernel<T, U, V, 1, uint32_t, TableMap32><<<detail::grid_for(items), kThreads, 0, s>>>(
        x, cos, sin, y, static_cast<uint32_t>(items), static_cast<uint32_t>(d), rep, m32, inverse);
  }
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
