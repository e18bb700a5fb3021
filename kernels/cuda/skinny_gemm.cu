// Matrix products with few rows (decode's linears: x [M <= 16, K] times a weight W [K, N] or [N, K]).
//
// With one to sixteen rows a product is a stream over the weight: K x N elements read once, a few FMAs
// each. cuBLASLt's kernels for such shapes leave much of the bandwidth unused (measured at one row on the
// H200: 1.2 TB/s for a 2048 x 2048 weight), so these kernels are built to keep the memory busy:
//
// - W [K, N] (N contiguous, what the exports give): a block covers 64 columns (8 threads of 8 columns,
//   one 16-byte load each per weight row) and a range of K; 32 rows of W are read at once by the block's
//   256 threads, eight rows per thread in flight. Where the columns alone give too few blocks, K is split
//   over a thread-block cluster (at most 8 blocks, Hopper) whose blocks add their partial sums through
//   distributed shared memory: one kernel, no workspace, no second pass.
// - W [N, K] (K contiguous): a warp per output column, its lanes reading 16-byte pieces of the row.
// - Programmatic dependent launch: a kernel is launched so that it may start while the previous kernel of
//   the stream finishes. With early_weights (the caller knows that no kernel writes W: inference weights)
//   it first issues its first weight loads, then waits for that kernel (griddepcontrol.wait) before it
//   reads x; without, it waits first. It lets the next kernel start early (griddepcontrol.launch_dependents).
//   In a decode step, where each product follows a short kernel, the weight stream then begins before its
//   input exists.
// - fp32 accumulation, the epilogue (alpha, bias, GELU in its tanh form as cuBLASLt's) on the fp32 sum,
//   one rounding to the storage type.
//
// - The streaming kernel (below, session 7; K-split and sized to the SMs in session 9) for W [K, N] at 1 to 4
//   rows: a ring of cp.async copies per thread instead of registers.
//
// The oracle is the CPU reference kernel (zk::cpu::linear), tests/cuda/generate_kernels_test.cpp. Which of
// cuBLASLt, the cluster kernels and the streaming kernel runs a product is the plan's (the compiler's
// --zplan-decode-products writes a code of zk/few_rows_kernels.h per product); nothing here chooses.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {
namespace {

namespace cg = cooperative_groups;
using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr int kColThreads = 8;                     // threads across a column tile, 8 columns each
constexpr int kRowLanes = kThreads / kColThreads;  // weight rows a block reads at once
constexpr int kTileN = 8 * kColThreads;            // columns of a block
constexpr int kMaxSplits = 8;                      // portable cluster size
constexpr size_t kSmemBytes = 48 * 1024;           // static limit, no opt-in needed
constexpr float kSqrt2OverPi = 0.7978845608028654f;

/// Weight rows per thread in flight (twice that many held: the group in use and the next one's loads), fewer
/// where the accumulators (8 per row of x) and wider elements would leave too few registers.
template <class T, int MR>
constexpr int unroll_of() {
  return sizeof(T) == 4 ? (MR >= 8 ? 2 : 4) : (MR >= 16 ? 4 : 8);
}

// Eight consecutive elements of a weight row, as stored.
template <class T>
struct alignas(16) Pack {
  T v[8];
};

// griddepcontrol (sm_90, common.cuh): wait for the grids this one depends on (their writes visible), and
// let the grids that depend on this one be launched. Both are no-ops when the launch had no programmatic
// edge.
__device__ __forceinline__ void wait_for_producer() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void release_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

template <class T, bool kVec>
__device__ __forceinline__ void load_pack(Pack<T>& p, const T* __restrict__ row, int n0, int N) {
  if (kVec) {
    const uint4* src = reinterpret_cast<const uint4*>(row + n0);
    uint4* dst = reinterpret_cast<uint4*>(p.v);
#pragma unroll
    for (int w = 0; w < static_cast<int>(sizeof(Pack<T>) / 16); ++w) dst[w] = __ldg(src + w);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) p.v[e] = n0 + e < N ? row[n0 + e] : from_f32<T>(0.0f);
  }
}

__device__ __forceinline__ float epilogue(float v, float alpha, float b, int epi) {
  v = v * alpha + b;
  if (epi == static_cast<int>(Epilogue::gelu) || epi == static_cast<int>(Epilogue::gelu_bias))
    v = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  return v;
}

// W [K, N]. Grid (column tiles, splits); a cluster of `splits` blocks along y shares a column tile.
// Dynamic shared memory: x's rows over this block's K range as floats [MR][kc], later reused for the
// reduction (8 warps x MR x 64 partial sums, then MR x 64 block sums).
template <class T, int MR, bool kVec>
__global__ void __launch_bounds__(kThreads)
    skinny_kn_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                     T* __restrict__ out, int M, int K, int N, int kc, int splits, float alpha, int epi,
                     int early) {
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, cl = tid % kColThreads, rl = tid / kColThreads;
  const int n_tile = blockIdx.x * kTileN, n0 = n_tile + cl * 8;
  const int split = blockIdx.y;
  const int kbeg = split * kc, kend = min(K, kbeg + kc);
  const bool cols_in = n0 < N;
  // This thread's weight rows: kbeg + rl + kRowLanes * i, i < rows.
  const int first = kbeg + rl;
  const int rows = first < kend ? (kend - first + kRowLanes - 1) / kRowLanes : 0;

  constexpr int kUnroll = unroll_of<T, MR>();
  if (!early) wait_for_producer();
  Pack<T> buf[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (u < rows && cols_in)
      load_pack<T, kVec>(buf[u], w + static_cast<int64_t>(first + kRowLanes * u) * N, n0, N);
  if (early) wait_for_producer();
  release_dependents();

  // x [M, K] over [kbeg, kend) into shared memory (rows past M and columns past K are zeros).
  const int span = kend - kbeg;
  float* xs = smem;
  for (int e = tid; e < MR * kc; e += kThreads) {
    const int m = e / kc, kk = e % kc;
    xs[e] = m < M && kk < span ? to_f32(x[static_cast<int64_t>(m) * K + kbeg + kk]) : 0.0f;
  }
  __syncthreads();

  float acc[MR][8];
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[m][e] = 0.0f;

  for (int base = 0; base < rows; base += kUnroll) {
    Pack<T> cur[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = buf[u];
      // The next rows' loads go out before this group's arithmetic.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + kUnroll + u;
      if (i < rows && cols_in)
        load_pack<T, kVec>(buf[u], w + static_cast<int64_t>(first + kRowLanes * i) * N, n0, N);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u;
      if (i < rows) {
        const int kk = rl + kRowLanes * i;  // == first + kRowLanes * i - kbeg
        float wf[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) wf[e] = to_f32(cur[u].v[e]);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          const float xv = xs[m * kc + kk];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[m][e] = fmaf(xv, wf[e], acc[m][e]);
        }
      }
    }
  }

  // The four row lanes of a warp (lanes 8 apart share columns), then the block's eight warps.
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float v = acc[m][e];
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      acc[m][e] = v;
    }
  __syncthreads();  // xs is dead: the reduction reuses its bytes
  const int warp = tid / 32, lane = tid % 32;
  float* red = smem;                     // [8 warps][MR][kTileN]
  float* part = smem + 8 * MR * kTileN;  // [MR][kTileN]
  if (lane < kColThreads)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < 8; ++e) red[(warp * MR + m) * kTileN + lane * 8 + e] = acc[m][e];
  __syncthreads();
  for (int o = tid; o < MR * kTileN; o += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < kThreads / 32; ++g) s += red[g * MR * kTileN + o];
    part[o] = s;
  }

  if (splits == 1) {
    __syncthreads();
    for (int o = tid; o < MR * kTileN; o += kThreads) {
      const int m = o / kTileN, n = n_tile + o % kTileN;
      if (m < M && n < N)
        out[static_cast<int64_t>(m) * N + n] =
            from_f32<T>(epilogue(part[o], alpha, bias ? to_f32(bias[n]) : 0.0f, epi));
    }
    return;
  }
  // The cluster's blocks add their sums: block r finalises the outputs o with o % splits == r.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int o = static_cast<int>(cluster.block_rank()) + splits * tid; o < MR * kTileN;
       o += splits * kThreads) {
    float s = 0.0f;
    for (int r = 0; r < splits; ++r) s += cluster.map_shared_rank(part, r)[o];
    const int m = o / kTileN, n = n_tile + o % kTileN;
    if (m < M && n < N)
      out[static_cast<int64_t>(m) * N + n] =
          from_f32<T>(epilogue(s, alpha, bias ? to_f32(bias[n]) : 0.0f, epi));
  }
  cluster.sync();  // the other blocks' shared memory stays alive until every block has read it
}

// W [N, K]: a warp per output column n, its lanes over K in pieces of 8; x rows read through the cache.
template <class T, int MR, bool kVec>
__global__ void __launch_bounds__(kThreads)
    skinny_nk_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                     T* __restrict__ out, int M, int K, int N, float alpha, int epi, int early) {
  constexpr int kU = 4;
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  const bool live = n < N;
  const T* wr = w + static_cast<int64_t>(live ? n : 0) * K;
  const int pieces = (K + 7) / 8;  // pieces of 8 along K
  const int mine = lane < pieces ? (pieces - lane + 31) / 32 : 0;
  if (!early) wait_for_producer();
  Pack<T> buf[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (live && u < mine) load_pack<T, kVec>(buf[u], wr, 8 * (lane + 32 * u), K);
  if (early) wait_for_producer();
  release_dependents();
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
  for (int base = 0; base < mine; base += kU) {
    Pack<T> cur[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) cur[u] = buf[u];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + kU + u;
      if (live && i < mine) load_pack<T, kVec>(buf[u], wr, 8 * (lane + 32 * i), K);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u;
      if (live && i < mine) {
        const int k0 = 8 * (lane + 32 * i);
        float wf[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) wf[e] = to_f32(cur[u].v[e]);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          if (m < M) {
            Pack<T> xp;
            load_pack<T, kVec>(xp, x + static_cast<int64_t>(m) * K, k0, K);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[m] = fmaf(to_f32(xp.v[e]), wf[e], acc[m]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    float v = acc[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && live && m < M)
      out[static_cast<int64_t>(m) * N + n] =
          from_f32<T>(epilogue(v, alpha, bias ? to_f32(bias[n]) : 0.0f, epi));
  }
}

// --- Fused few-row products (plan 2.9: linear_multi, linear_gated) ------------------------------------------
// Several weights read by one launch: a decode step's q / k / v (linear_multi), or the gated MLP's gate and
// up with the activation product in the epilogue (linear_gated). At one row a product's time is mostly the
// kernel's fixed cost (docs/generation.md), so one launch for three weights saves two of them, and the gated
// form also saves the elementwise kernel and the round trip of both products through memory.

/// The weights of one fused launch. [K, N] layout: segment i covers blocks [end[i-1], end[i]) along x;
/// [N, K]: warps (output columns) [end[i-1], end[i]). Gated: one segment of N columns, w[0] the gate and
/// w[1] the up weight, out[0] the gated product.
struct Segs {
  const void* w[4];
  void* out[4];
  int n[4];
  int end[4];
  int count;
  int act;  // gated: the Unary code of the activation (silu 15, gelu_tanh 13, gelu_erf 14)
  // A plain product (one segment, skinny_linear through the streaming kernel): its bias (or null) and
  // Epilogue code.
  const void* bias;
  int epi;
  // norm_products (the streaming kernel only): x's rows are first added to res's (the sum, rounded to the
  // storage type, written to `sum` by block 0) and RMS-normalised with nscale and eps; res null: x as it is.
  const void* res;
  const void* nscale;
  void* sum;
  float eps;
};

constexpr float kInvSqrt2 = 0.7071067811865476f;

// The activations as kernels/cuda/elementwise.cu computes them.
__device__ __forceinline__ float activation(int act, float v) {
  if (act == static_cast<int>(Unary::silu)) return v / (1.0f + expf(-v));
  if (act == static_cast<int>(Unary::gelu_tanh))
    return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}

/// The gated output from the two fp32 sums: each product rounded to the storage type as the unfused
/// products are stored, then act(gate) * up in fp32 and one rounding, as the unfused gated kernel.
template <class T>
__device__ __forceinline__ T gated_out(float g, float u, float alpha, int act) {
  const float gr = to_f32(from_f32<T>(g * alpha)), ur = to_f32(from_f32<T>(u * alpha));
  return from_f32<T>(activation(act, gr) * ur);
}

/// Which segment `i` (a block or a warp index) falls in, and its index within it; selects instead of a
/// dynamically indexed parameter array, which would go through local memory.
__device__ __forceinline__ void segment_of(const Segs& sg, int i, int* seg, int* local) {
  int s = 0, start = 0;
#pragma unroll
  for (int k = 0; k < 3; ++k)
    if (k + 1 < sg.count && i >= sg.end[k]) {
      s = k + 1;
      start = sg.end[k];
    }
  *seg = s;
  *local = i - start;
}
template <class P>
__device__ __forceinline__ P pick(const P (&a)[4], int i) {
  return i == 0 ? a[0] : i == 1 ? a[1] : i == 2 ? a[2] : a[3];
}

// W [K, N] fused: as skinny_kn_kernel, with the block's weight, columns and output taken from its segment.
// Gated: a block covers 32 output columns; its column threads 0-3 read the gate's and 4-7 the up's.
/// The few-row kernels' last step: `outputs` sums of this block's K slab in shared memory (`part`, output o's
/// at index(o, 0), its up half's at index(o, 1) when gated) handed to store(o, sum, up sum). With the K split
/// over the `splits` blocks of a cluster, the blocks add their sums in rank order, block r finalising the
/// outputs o with o % splits == r, so that a result does not depend on which block finishes first.
template <bool kGated, class Index, class Store>
__device__ __forceinline__ void finish_splits(float* part, int outputs, int threads, int tid, int splits, Index index,
                                              Store store) {
  if (splits == 1) {
    __syncthreads();
    for (int o = tid; o < outputs; o += threads) store(o, part[index(o, 0)], kGated ? part[index(o, 1)] : 0.0f);
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int o = static_cast<int>(cluster.block_rank()) + splits * tid; o < outputs; o += splits * threads) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int r = 0; r < splits; ++r) {
      const float* pr = cluster.map_shared_rank(part, r);
      s0 += pr[index(o, 0)];
      if (kGated) s1 += pr[index(o, 1)];
    }
    store(o, s0, s1);
  }
  cluster.sync();  // the other blocks' shared memory stays alive until every block has read it
}

template <class T, int MR, bool kVec, bool kGated>
__global__ void __launch_bounds__(kThreads)
    skinny_kn_fused_kernel(const T* __restrict__ x, Segs sg, int M, int K, int kc, int splits, float alpha,
                           int early) {
  extern __shared__ __align__(16) float smem[];
  constexpr int kCols = kGated ? kTileN / 2 : kTileN;  // output columns of a block
  const int tid = threadIdx.x, cl = tid % kColThreads, rl = tid / kColThreads;
  int seg = 0, tile = 0;
  segment_of(sg, static_cast<int>(blockIdx.x), &seg, &tile);
  const T* __restrict__ w = static_cast<const T*>(pick(sg.w, kGated ? (cl < 4 ? 0 : 1) : seg));
  T* __restrict__ out = static_cast<T*>(pick(sg.out, kGated ? 0 : seg));
  const int N = pick(sg.n, kGated ? 0 : seg);
  const int n_tile = tile * kCols, n0 = n_tile + (kGated ? cl % 4 : cl) * 8;
  const int split = blockIdx.y;
  const int kbeg = split * kc, kend = min(K, kbeg + kc);
  const bool cols_in = n0 < N;
  const int first = kbeg + rl;
  const int rows = first < kend ? (kend - first + kRowLanes - 1) / kRowLanes : 0;

  constexpr int kUnroll = unroll_of<T, MR>();
  if (!early) wait_for_producer();
  Pack<T> buf[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (u < rows && cols_in)
      load_pack<T, kVec>(buf[u], w + static_cast<int64_t>(first + kRowLanes * u) * N, n0, N);
  if (early) wait_for_producer();
  release_dependents();

  const int span = kend - kbeg;
  float* xs = smem;
  for (int e = tid; e < MR * kc; e += kThreads) {
    const int m = e / kc, kk = e % kc;
    xs[e] = m < M && kk < span ? to_f32(x[static_cast<int64_t>(m) * K + kbeg + kk]) : 0.0f;
  }
  __syncthreads();

  float acc[MR][8];
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[m][e] = 0.0f;

  for (int base = 0; base < rows; base += kUnroll) {
    Pack<T> cur[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = buf[u];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + kUnroll + u;
      if (i < rows && cols_in)
        load_pack<T, kVec>(buf[u], w + static_cast<int64_t>(first + kRowLanes * i) * N, n0, N);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u;
      if (i < rows) {
        const int kk = rl + kRowLanes * i;
        float wf[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) wf[e] = to_f32(cur[u].v[e]);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          const float xv = xs[m * kc + kk];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[m][e] = fmaf(xv, wf[e], acc[m][e]);
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float v = acc[m][e];
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      acc[m][e] = v;
    }
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32;
  float* red = smem;
  float* part = smem + 8 * MR * kTileN;  // [MR][kTileN]: gated, columns 0-31 the gate's, 32-63 the up's
  if (lane < kColThreads)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < 8; ++e) red[(warp * MR + m) * kTileN + lane * 8 + e] = acc[m][e];
  __syncthreads();
  for (int o = tid; o < MR * kTileN; o += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < kThreads / 32; ++g) s += red[g * MR * kTileN + o];
    part[o] = s;
  }
  // Output o < MR x kCols: row m = o / kCols, column j = o % kCols of the block.
  auto store = [&](int o, float s0, float s1) {
    const int m = o / kCols, j = o % kCols, n = n_tile + j;
    if (m < M && n < N)
      out[static_cast<int64_t>(m) * N + n] = kGated ? gated_out<T>(s0, s1, alpha, sg.act) : from_f32<T>(s0 * alpha);
  };
  auto index = [&](int o, int half) { return (o / kCols) * kTileN + o % kCols + half * kCols; };
  finish_splits<kGated>(part, MR * kCols, kThreads, tid, splits, index, store);
}

// W [N, K] fused: a warp per output column of the concatenated segments (multi), or per gated column with
// both of its weight rows (gated).
template <class T, int MR, bool kVec, bool kGated>
__global__ void __launch_bounds__(kThreads)
    skinny_nk_fused_kernel(const T* __restrict__ x, Segs sg, int M, int K, float alpha, int early) {
  constexpr int kU = kGated ? 2 : 4;
  constexpr int kW = kGated ? 2 : 1;  // weight rows per warp
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  // Past the last segment's columns, n >= N: the warp computes nothing.
  int seg = 0, n = 0;
  segment_of(sg, c, &seg, &n);
  const int N = pick(sg.n, seg);
  const bool live = n < N;
  const T* wr[kW];
#pragma unroll
  for (int q = 0; q < kW; ++q)
    wr[q] = static_cast<const T*>(pick(sg.w, kGated ? q : seg)) + static_cast<int64_t>(live ? n : 0) * K;
  T* out = static_cast<T*>(pick(sg.out, seg));
  const int pieces = (K + 7) / 8;
  const int mine = lane < pieces ? (pieces - lane + 31) / 32 : 0;
  if (!early) wait_for_producer();
  Pack<T> buf[kW][kU];
#pragma unroll
  for (int q = 0; q < kW; ++q)
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (live && u < mine) load_pack<T, kVec>(buf[q][u], wr[q], 8 * (lane + 32 * u), K);
  if (early) wait_for_producer();
  release_dependents();
  float acc[kW][MR];
#pragma unroll
  for (int q = 0; q < kW; ++q)
#pragma unroll
    for (int m = 0; m < MR; ++m) acc[q][m] = 0.0f;
  for (int base = 0; base < mine; base += kU) {
    Pack<T> cur[kW][kU];
#pragma unroll
    for (int q = 0; q < kW; ++q)
#pragma unroll
      for (int u = 0; u < kU; ++u) cur[q][u] = buf[q][u];
#pragma unroll
    for (int q = 0; q < kW; ++q)
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + kU + u;
        if (live && i < mine) load_pack<T, kVec>(buf[q][u], wr[q], 8 * (lane + 32 * i), K);
      }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u;
      if (live && i < mine) {
        const int k0 = 8 * (lane + 32 * i);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          if (m < M) {
            Pack<T> xp;
            load_pack<T, kVec>(xp, x + static_cast<int64_t>(m) * K, k0, K);
#pragma unroll
            for (int q = 0; q < kW; ++q)
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[q][m] = fmaf(to_f32(xp.v[e]), to_f32(cur[q][u].v[e]), acc[q][m]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    float v[kW];
#pragma unroll
    for (int q = 0; q < kW; ++q) {
      v[q] = acc[q][m];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_xor_sync(0xffffffffu, v[q], o);
    }
    if (lane == 0 && live && m < M)
      out[static_cast<int64_t>(m) * N + n] = kGated ? gated_out<T>(v[0], v[kW - 1], alpha, sg.act)
                                                    : from_f32<T>(v[0] * alpha);
  }
}

// --- The streaming few-row kernel (sessions 7 and 9) --------------------------------------------------------
// One kernel for the plain, multi and gated products over W [K, N] where x's rows fit the shared memory (the
// plan's kernel code FewRows::stream, zk/few_rows_kernels.h). The grid is (strips, splits): block (s, k)
// reads strip s (kTN weight columns) over the K-slab k (kc consecutive rows), through a ring of cp.async
// copies into shared memory. A thread keeps kStreamDepth - 1 pieces of 16 bytes in flight without holding
// them in registers (the [K, N] kernels above hold eight in registers, which is what capped their
// occupancy), and the first of them go out before the wait for the previous kernel, so the weight stream
// begins before x exists. Each thread consumes only the pieces it copied, so the ring needs no block
// barrier. The strip width and the K split are chosen together (stream_shape) so that the grid fills the
// SMs in one wave with equal blocks (session 8 measured the earlier choice, whole-K strips, at 1.33 waves for
// llama-1b's gate/up); the K split's partial sums are added within a thread-block cluster through
// distributed shared memory, in rank order (one kernel, no workspace, the same sums on every run).
constexpr int kStreamDepth = 16;                // ring slots per thread (15 pieces in flight)
constexpr int kStreamRingBytes = kStreamDepth * kThreads * 16;
constexpr int kStreamMaxXBytes = static_cast<int>(zk::cuda::kStreamMaxXBytes);  // x's slab as floats

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <class T>
__device__ __forceinline__ void unpack16(const uint4& raw, float (&f)[16 / sizeof(T)]) {
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int e = 0; e < static_cast<int>(16 / sizeof(T)); ++e) f[e] = to_f32(v[e]);
}

// Grid: (strips, splits), one cluster of `splits` blocks along y per strip when splits > 1 (segment_of maps
// strips to segments). kTN weight columns per strip: kTN / EP column threads (EP elements of 16 bytes each),
// the others rows. Gated: the first half of the column threads read the gate's columns, the second half the
// same columns of the up weight; a strip then has kTN / 2 outputs. Dynamic shared memory: the ring
// [kStreamDepth][kThreads] of 16-byte slots, then x's K-slab [MR][kc] as floats; the ring's bytes hold the
// reduction afterwards (the warps' sums, then the block's, which the cluster's blocks read).
template <class T, int MR, int kTN, bool kGated>
__global__ void __launch_bounds__(kThreads, 2)
    skinny_stream_kernel(const T* __restrict__ x, Segs sg, int M, int K, int kc, int splits, float alpha,
                         int early) {
  extern __shared__ __align__(16) unsigned char sbytes[];
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  constexpr int CT = kTN / EP;                      // column threads
  constexpr int RL = kThreads / CT;                 // weight rows read at once
  constexpr int kCols = kGated ? kTN / 2 : kTN;     // output columns of a strip
  constexpr int D = kStreamDepth;
  constexpr int kWarps = kThreads / 32;
  static_assert(CT >= 2 && CT <= 32 && (32 % CT) == 0, "column threads must divide a warp");
  static_assert((kWarps + 1) * MR * kTN * 4 <= kStreamRingBytes, "the reduction must fit the ring's bytes");
  uint4* ring = reinterpret_cast<uint4*>(sbytes);
  float* xs = reinterpret_cast<float*>(sbytes + kStreamRingBytes);
  const int tid = threadIdx.x, c = tid % CT, r = tid / CT;
  int seg = 0, strip = 0;
  segment_of(sg, static_cast<int>(blockIdx.x), &seg, &strip);
  const T* __restrict__ w = static_cast<const T*>(pick(sg.w, kGated ? (c < CT / 2 ? 0 : 1) : seg));
  T* __restrict__ out = static_cast<T*>(pick(sg.out, kGated ? 0 : seg));
  const int N = pick(sg.n, kGated ? 0 : seg);
  const int n0 = strip * kCols + (kGated ? c % (CT / 2) : c) * EP;
  const bool live = n0 < N;  // N is a multiple of EP: a piece is wholly in or out
  const int kbeg = static_cast<int>(blockIdx.y) * kc, kend = min(K, kbeg + kc);
  const int span = kend > kbeg ? kend - kbeg : 0;
  const int rows = r < span ? (span - r + RL - 1) / RL : 0;
  const T* wp = w + static_cast<int64_t>(kbeg + r) * N + (live ? n0 : 0);
  const int64_t step = static_cast<int64_t>(RL) * N;
  uint4* slot = ring + tid;  // this thread's slots, kThreads apart
  // Piece i (weight row kbeg + r + RL i) goes to slot i % D; every call commits one group, empty or not, so
  // that "group i done" is "at most (groups committed - i - 1) pending".
  auto issue = [&](int i) {
    if (live && i < rows) cp_async16(slot + (i % D) * kThreads, wp + i * step);
    cp_async_commit();
  };

  if (!early) wait_for_producer();
#pragma unroll
  for (int i = 0; i < D - 1; ++i) issue(i);
  if (early) wait_for_producer();
  release_dependents();

  // x's rows in 16-byte pieces where K is a whole number of them and every row operand is 16-byte aligned (the
  // K-slab then starts and ends on a piece: kbeg is a multiple of RL, 16 rows or more); else element by element.
  auto al16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool vec = K % EP == 0 && al16(x) && (!sg.res || (al16(sg.res) && al16(sg.nscale) && al16(sg.sum)));
  if (sg.res) {
    // The residual add and RMS norm of norm_products, as the residual_norm kernel computes them (the norm of
    // the rounded sum, the normed value rounded to the storage type): every block normalises the rows itself
    // (K wide, at most kStreamMaxRows of them, from the L2) and keeps its K-slab; block (0, 0) writes the sum.
    // This runs after the wait for the previous kernel, so its loads are issued together: x's and res's
    // pieces kU at a time before any use (two: more registers would cost the third block an SM that the next
    // kernel's early start needs), and the first piece of the norm scale this thread applies.
    const T* __restrict__ res = static_cast<const T*>(sg.res);
    const T* __restrict__ g = static_cast<const T*>(sg.nscale);
    T* __restrict__ sum_out = static_cast<T*>(sg.sum);
    const bool writer = blockIdx.x == 0 && blockIdx.y == 0;
    const int ps = span / EP;  // pieces of the slab a row (vec)
    uint4 g0 = make_uint4(0, 0, 0, 0);
    if (vec && tid < MR * ps) g0 = *reinterpret_cast<const uint4*>(g + kbeg + (tid % ps) * EP);
    float ss[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) ss[m] = 0.0f;
    if (vec) {
      constexpr int kU = 2;
      const int pk = K / EP;
      for (int e0 = tid; e0 < MR * pk; e0 += kU * kThreads) {
        uint4 xa[kU], ra[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int e = e0 + u * kThreads;
          if (e < MR * pk && e / pk < M) {
            xa[u] = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(e) * EP);
            ra[u] = *reinterpret_cast<const uint4*>(res + static_cast<int64_t>(e) * EP);
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int e = e0 + u * kThreads;
          if (e >= MR * pk) continue;
          const int m = e / pk, k0 = (e % pk) * EP;
          float v[EP];
          if (m < M) {
            const T* xv = reinterpret_cast<const T*>(&xa[u]);
            const T* rv = reinterpret_cast<const T*>(&ra[u]);
            uint4 packed;
            T* t = reinterpret_cast<T*>(&packed);
#pragma unroll
            for (int j = 0; j < EP; ++j) {
              t[j] = from_f32<T>(to_f32(xv[j]) + to_f32(rv[j]));
              v[j] = to_f32(t[j]);
            }
            if (writer) *reinterpret_cast<uint4*>(sum_out + static_cast<int64_t>(e) * EP) = packed;
          } else {
#pragma unroll
            for (int j = 0; j < EP; ++j) v[j] = 0.0f;
          }
          if (k0 >= kbeg && k0 < kend)
#pragma unroll
            for (int j = 0; j < EP; ++j) xs[m * kc + k0 + j - kbeg] = v[j];
          float sq = 0.0f;
#pragma unroll
          for (int j = 0; j < EP; ++j) sq += v[j] * v[j];
#pragma unroll
          for (int mm = 0; mm < MR; ++mm) ss[mm] += mm == m ? sq : 0.0f;
        }
      }
    } else {
      for (int e = tid; e < MR * K; e += kThreads) {
        const int m = e / K, kk = e % K;
        float v = 0.0f;
        if (m < M) {
          const T t = from_f32<T>(to_f32(x[e]) + to_f32(res[e]));
          if (writer) sum_out[e] = t;
          v = to_f32(t);
        }
        if (kk >= kbeg && kk < kend) xs[m * kc + kk - kbeg] = v;
#pragma unroll
        for (int mm = 0; mm < MR; ++mm) ss[mm] += mm == m ? v * v : 0.0f;
      }
    }
    __shared__ float nred[kWarps][MR];
    const int w32 = tid / 32, l32 = tid % 32;
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      float v = ss[m];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (l32 == 0) nred[w32][m] = v;
    }
    __syncthreads();
    float inv[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int q = 0; q < kWarps; ++q) t += nred[q][m];
      inv[m] = rsqrtf(t / static_cast<float>(K) + sg.eps);
    }
    if (vec) {
      for (int e = tid; e < MR * ps; e += kThreads) {
        const int m = e / ps, j0 = (e % ps) * EP;
        const uint4 ga = e == tid ? g0 : *reinterpret_cast<const uint4*>(g + kbeg + j0);
        const T* gv = reinterpret_cast<const T*>(&ga);
        float iv = 0.0f;
#pragma unroll
        for (int mm = 0; mm < MR; ++mm) iv = mm == m ? inv[mm] : iv;
#pragma unroll
        for (int j = 0; j < EP; ++j) {
          float o = xs[m * kc + j0 + j] * iv;
          o *= to_f32(gv[j]);
          xs[m * kc + j0 + j] = to_f32(from_f32<T>(o));
        }
      }
    } else {
      for (int e = tid; e < MR * span; e += kThreads) {
        const int m = e / span, j = e % span;
        float iv = 0.0f;
#pragma unroll
        for (int mm = 0; mm < MR; ++mm) iv = mm == m ? inv[mm] : iv;
        float o = xs[m * kc + j] * iv;
        o *= to_f32(g[kbeg + j]);
        xs[m * kc + j] = to_f32(from_f32<T>(o));
      }
    }
  } else if (vec) {
    const int ps = span / EP;
    for (int e = tid; e < MR * ps; e += kThreads) {
      const int m = e / ps, j0 = (e % ps) * EP;
      float v[EP];
      if (m < M) {
        const uint4 a = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * K + kbeg + j0);
        unpack16<T>(a, v);
      } else {
#pragma unroll
        for (int j = 0; j < EP; ++j) v[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < EP; ++j) xs[m * kc + j0 + j] = v[j];
    }
  } else {
    for (int e = tid; e < MR * span; e += kThreads) {
      const int m = e / span, j = e % span;
      xs[m * kc + j] = m < M ? to_f32(x[static_cast<int64_t>(m) * K + kbeg + j]) : 0.0f;
    }
  }
  __syncthreads();

  float acc[MR][EP];
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < EP; ++e) acc[m][e] = 0.0f;
  for (int i = 0; i < rows; ++i) {
    // Groups committed: D - 1 + i; piece i's is done when at most D - 2 are pending.
    cp_async_wait<D - 2>();
    const uint4 raw = slot[(i % D) * kThreads];
    // The slot refilled now is the one read in the previous iteration, whose values are long consumed.
    issue(i + D - 1);
    float wf[EP];
    unpack16<T>(raw, wf);
    const float* xk = xs + r + RL * i;
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const float xv = xk[m * kc];
#pragma unroll
      for (int e = 0; e < EP; ++e) acc[m][e] = fmaf(xv, wf[e], acc[m][e]);
    }
  }
  cp_async_wait<0>();

  // The row lanes of a warp (lanes CT apart share columns), then the block's warps, in one pass.
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < EP; ++e) {
      float v = acc[m][e];
#pragma unroll
      for (int o = CT; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[m][e] = v;
    }
  __syncthreads();  // every thread is past its ring: the reduction reuses its bytes
  float* red = reinterpret_cast<float*>(sbytes);  // [kWarps][MR][kTN]
  float* part = red + kWarps * MR * kTN;          // [MR][kTN]: the block's sums over its K-slab
  const int warp = tid / 32, lane = tid % 32;
  if (lane < CT)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < EP; ++e) red[(warp * MR + m) * kTN + lane * EP + e] = acc[m][e];
  __syncthreads();
  for (int o = tid; o < MR * kTN; o += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) s += red[q * MR * kTN + o];
    part[o] = s;
  }
  // Output o < MR x kCols: row m = o / kCols, column j = o % kCols of the strip; half 1 is the up weight's.
  auto store = [&](int o, float s0, float s1) {
    const int m = o / kCols, j = o % kCols, n = strip * kCols + j;
    if (m >= M || n >= N) return;
    if (kGated) {
      out[static_cast<int64_t>(m) * N + n] = gated_out<T>(s0, s1, alpha, sg.act);
    } else {
      const T* bias = static_cast<const T*>(sg.bias);
      out[static_cast<int64_t>(m) * N + n] = from_f32<T>(epilogue(s0, alpha, bias ? to_f32(bias[n]) : 0.0f, sg.epi));
    }
  };
  auto index = [&](int o, int half) { return (o / kCols) * kTN + o % kCols + half * kCols; };
  finish_splits<kGated>(part, MR * kCols, kThreads, tid, splits, index, store);
}

/// The launch of a kernel that may start while the previous kernel of the stream ends (programmatic
/// dependent launch), in a cluster of `cluster_y` blocks along y when that is above 1.
template <class... KArgs, class... Args>
cudaError_t launch_dependent(void (*kernel)(KArgs...), dim3 grid, size_t smem, int cluster_y, cudaStream_t s,
                             Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attrs[2];
  int n = 0;
  if (cluster_y > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = 1;
    attrs[n].val.clusterDim.y = static_cast<unsigned>(cluster_y);
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  cfg.attrs = attrs;
  if (detail::pdl_enabled()) {
    // The programmatic attribute after the cluster's. Where it is refused, the launch goes without it: a
    // plain launch disables it for every later one (detail::pdl_disable), a cluster launch only for itself.
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = static_cast<unsigned>(n + 1);
    if (cudaLaunchKernelEx(&cfg, kernel, args...) == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();
    if (cluster_y <= 1) detail::pdl_disable();
  }
  cfg.numAttrs = static_cast<unsigned>(n);
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v > 0 ? v : 132;
  }();
  return n;
}

int rows_template(int64_t M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : M <= 8 ? 8 : 16; }

/// The K split of the [K, N] kernel: enough blocks for two per SM where the columns give fewer, at least 128
/// weight rows per block, and x's slice within the shared memory; 0 when no split fits.
int kn_splits(int64_t M, int64_t K, int64_t N, size_t es_unused) {
  (void)es_unused;
  const int mr = rows_template(M);
  const int64_t tiles = (N + kTileN - 1) / kTileN;
  const int64_t kc_max = static_cast<int64_t>(kSmemBytes / sizeof(float)) / mr;
  int splits = 1;
  while (splits < kMaxSplits && tiles * splits < 2 * sm_count() && K / (2 * splits) >= 128) splits *= 2;
  const int64_t need = (K + kc_max - 1) / kc_max;
  if (need > kMaxSplits) return 0;
  return static_cast<int>(std::max<int64_t>(splits, need));
}

/// Whether the streaming kernel holds a [K, N] product of M rows (zk/few_rows_kernels.h's stream_holds) with
/// every weight in 16-byte aligned storage.
bool stream_fits(int64_t M, int64_t K, const Segs& sg, int nw) {
  int64_t n[4] = {0, 0, 0, 0};
  for (int i = 0; i < sg.count; ++i) n[i] = sg.n[i];
  if (!stream_holds(false, M, K, n, sg.count)) return false;
  for (int i = 0; i < nw; ++i)
    if (reinterpret_cast<uintptr_t>(sg.w[i]) % 16 != 0) return false;
  return true;
}

/// Strips of a streaming launch with tn weight columns each (tn / 2 outputs when gated) over these widths.
int64_t stream_strips(const int64_t* n, int count, int tn, bool gated) {
  const int cols = gated ? tn / 2 : tn;
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += (n[i] + cols - 1) / cols;
  return total;
}

/// The rows of the K-slab of each of `splits` blocks: K itself unsplit, else a whole number of the block's
/// row lanes (rl) so that its threads read alike; 0 when the last block would have no rows.
int64_t stream_kc(int64_t K, int splits, int rl) {
  if (splits == 1) return K;
  const int64_t kc = ((K + splits - 1) / splits + rl - 1) / rl * rl;
  return (splits - 1) * kc < K ? kc : 0;
}

/// The launch shape (see StreamShape): of the strip widths of 2, 4, 8 and 16 pieces and the K splits 1..8
/// whose grid fits one wave at two blocks an SM, the one whose blocks fill the SMs most evenly (blocks over
/// SMs x the waves of blocks an SM runs), then the most blocks (the most loads in flight), then the widest
/// strip (whole 128-byte lines of a row), then the fewest splits; a split gives each thread at least four
/// pieces. Where no grid fits one wave, the widest strip unsplit. llama-1b at one row in bf16 on 132 SMs:
/// q/k/v 64 columns x 5 splits (240 blocks), gate/up 128 x 3 (264), o and down 64 x 8 (256).
StreamShape choose_stream_shape(size_t es, int64_t K, const int64_t* n, int count, bool gated, int sms) {
  const int ep = static_cast<int>(16 / es);
  const int64_t cap = 2 * static_cast<int64_t>(sms);
  StreamShape best{16 * ep, 1};
  double best_fill = -1.0;
  int64_t best_blocks = 0;
  for (int pieces : {16, 8, 4, 2}) {
    const int tn = pieces * ep, rl = kThreads / pieces;
    const int64_t strips = stream_strips(n, count, tn, gated);
    for (int s = 1; s <= kMaxSplits; ++s) {
      const int64_t kc = stream_kc(K, s, rl);
      if (kc == 0 || (s > 1 && kc < 4 * rl)) continue;
      const int64_t blocks = strips * s;
      if (blocks > cap) break;
      const int64_t waves = (blocks + sms - 1) / sms;
      const double fill = std::floor(100.0 * static_cast<double>(blocks) / static_cast<double>(sms * waves)) / 100.0;
      if (fill > best_fill || (fill == best_fill && blocks > best_blocks)) {
        best = StreamShape{tn, s};
        best_fill = fill;
        best_blocks = blocks;
      }
    }
  }
  return best;
}

template <class T, int MR, int kTN, bool kGated>
cudaError_t launch_stream_tn(const T* x, Segs sg, int64_t M, int64_t K, int splits, float alpha, int early,
                             cudaStream_t s) {
  constexpr int cols = kGated ? kTN / 2 : kTN;
  constexpr int rl = kThreads / (kTN / (16 / static_cast<int>(sizeof(T))));
  const int64_t kc = stream_kc(K, splits, rl);
  if (kc == 0 || static_cast<int64_t>(MR) * kc * 4 > kStreamMaxXBytes) return cudaErrorInvalidValue;
  int64_t strips = 0;
  for (int i = 0; i < sg.count; ++i) sg.end[i] = static_cast<int>(strips += (sg.n[i] + cols - 1) / cols);
  const size_t smem = static_cast<size_t>(kStreamRingBytes) + static_cast<size_t>(MR) * kc * sizeof(float);
  auto kernel = skinny_stream_kernel<T, MR, kTN, kGated>;
  // Above 48 KiB a kernel's dynamic shared memory needs the opt-in; once per instantiation, for the most it
  // ever asks (the ring and kStreamMaxXBytes of x).
  static const cudaError_t attr = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStreamRingBytes + kStreamMaxXBytes);
  if (attr != cudaSuccess) return attr;
  return launch_dependent(kernel, dim3(static_cast<unsigned>(strips), static_cast<unsigned>(splits)), smem, splits,
                          s, x, sg, static_cast<int>(M), static_cast<int>(K), static_cast<int>(kc), splits, alpha,
                          early);
}

/// The streaming kernel at x's rows (rows_template of M, at most kStreamMaxRows), in `shape` (its cols
/// 0: choose_stream_shape's).
template <class T, bool kGated>
cudaError_t launch_stream_rows(const T* x, const Segs& sg, int64_t M, int64_t K, float alpha, int early,
                               const StreamShape& shape, cudaStream_t s) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  StreamShape sh = shape;
  if (sh.cols == 0) {
    int64_t n[4] = {0, 0, 0, 0};
    for (int i = 0; i < sg.count; ++i) n[i] = sg.n[i];
    sh = choose_stream_shape(sizeof(T), K, n, sg.count, kGated, sm_count());
  }
  if (sh.splits < 1 || sh.splits > kMaxSplits) return cudaErrorInvalidValue;
  auto by_rows = [&](auto mr) -> cudaError_t {
    constexpr int MR = decltype(mr)::value;
    switch (sh.cols / EP) {
      case 2:
        return launch_stream_tn<T, MR, 2 * EP, kGated>(x, sg, M, K, sh.splits, alpha, early, s);
      case 4:
        return launch_stream_tn<T, MR, 4 * EP, kGated>(x, sg, M, K, sh.splits, alpha, early, s);
      case 8:
        return launch_stream_tn<T, MR, 8 * EP, kGated>(x, sg, M, K, sh.splits, alpha, early, s);
      case 16:
        return launch_stream_tn<T, MR, 16 * EP, kGated>(x, sg, M, K, sh.splits, alpha, early, s);
      default:
        return cudaErrorInvalidValue;
    }
  };
  if (sh.cols % EP != 0) return cudaErrorInvalidValue;
  switch (rows_template(M)) {
    case 1:
      return by_rows(std::integral_constant<int, 1>{});
    case 2:
      return by_rows(std::integral_constant<int, 2>{});
    default:
      return by_rows(std::integral_constant<int, 4>{});
  }
}

template <class T, int MR>
cudaError_t launch_rows(const In& x, const In& w, const In& bias, const Out& out, bool tw, int64_t M,
                        int64_t K, int64_t N, float alpha, Epilogue epi, int early, cudaStream_t s) {
  // The cluster kernels (FewRows::cluster); the streaming kernel is launch_stream_rows.
  const T *xp = static_cast<const T*>(x.data), *wp = static_cast<const T*>(w.data);
  const T* bp = static_cast<const T*>(bias.data);
  T* op = static_cast<T*>(out.data);
  const int e = static_cast<int>(epi);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (tw) {
    const bool vec = K % 8 == 0 && aligned(xp) && aligned(wp);
    const dim3 grid(static_cast<unsigned>((N + kThreads / 32 - 1) / (kThreads / 32)));
    if (vec)
      return launch_dependent(skinny_nk_kernel<T, MR, true>, grid, 0, 1, s, xp, wp, bp, op,
                              static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), alpha, e, early);
    return launch_dependent(skinny_nk_kernel<T, MR, false>, grid, 0, 1, s, xp, wp, bp, op,
                            static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), alpha, e, early);
  }
  const int splits = kn_splits(M, K, N, sizeof(T));
  const int kc = static_cast<int>((K + splits - 1) / splits);
  const size_t smem =
      std::max(static_cast<size_t>(MR) * kc, static_cast<size_t>(9) * MR * kTileN) * sizeof(float);
  const dim3 grid(static_cast<unsigned>((N + kTileN - 1) / kTileN), static_cast<unsigned>(splits));
  const bool vec = N % 8 == 0 && aligned(wp);
  if (vec)
    return launch_dependent(skinny_kn_kernel<T, MR, true>, grid, smem, splits, s, xp, wp, bp, op,
                            static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), kc, splits, alpha,
                            e, early);
  return launch_dependent(skinny_kn_kernel<T, MR, false>, grid, smem, splits, s, xp, wp, bp, op,
                          static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), kc, splits, alpha, e,
                          early);
}

template <class T>
cudaError_t launch_typed(const In& x, const In& w, const In& bias, const Out& out, bool tw, int64_t M,
                         int64_t K, int64_t N, float alpha, Epilogue epi, int early, cudaStream_t s) {
  switch (rows_template(M)) {
    case 1:
      return launch_rows<T, 1>(x, w, bias, out, tw, M, K, N, alpha, epi, early, s);
    case 2:
      return launch_rows<T, 2>(x, w, bias, out, tw, M, K, N, alpha, epi, early, s);
    case 4:
      return launch_rows<T, 4>(x, w, bias, out, tw, M, K, N, alpha, epi, early, s);
    case 8:
      return launch_rows<T, 8>(x, w, bias, out, tw, M, K, N, alpha, epi, early, s);
    default:
      return launch_rows<T, 16>(x, w, bias, out, tw, M, K, N, alpha, epi, early, s);
  }
}

/// The K split of a [K, N] launch over `tiles` column blocks (kn_splits' rule).
int kn_splits_tiles(int64_t M, int64_t K, int64_t tiles) {
  const int mr = rows_template(M);
  const int64_t kc_max = static_cast<int64_t>(kSmemBytes / sizeof(float)) / mr;
  int splits = 1;
  while (splits < kMaxSplits && tiles * splits < 2 * sm_count() && K / (2 * splits) >= 128) splits *= 2;
  const int64_t need = (K + kc_max - 1) / kc_max;
  if (need > kMaxSplits) return 0;
  return static_cast<int>(std::max<int64_t>(splits, need));
}

template <class T, int MR, bool kGated>
cudaError_t launch_fused_rows(const In& x, Segs sg, bool tw, int64_t M, int64_t K, float alpha, int early,
                              cudaStream_t s) {
  const T* xp = static_cast<const T*>(x.data);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int nw = kGated ? 2 : sg.count;
  bool w_aligned = true;
  for (int i = 0; i < nw; ++i) w_aligned = w_aligned && aligned(sg.w[i]);
  if (tw) {
    // Warps (output columns) per segment, cumulative.
    int64_t total = 0;
    for (int i = 0; i < sg.count; ++i) sg.end[i] = static_cast<int>(total += sg.n[i]);
    const bool vec = K % 8 == 0 && aligned(xp) && w_aligned;
    const dim3 grid(static_cast<unsigned>((total + kThreads / 32 - 1) / (kThreads / 32)));
    if (vec)
      return launch_dependent(skinny_nk_fused_kernel<T, MR, true, kGated>, grid, 0, 1, s, xp, sg,
                              static_cast<int>(M), static_cast<int>(K), alpha, early);
    return launch_dependent(skinny_nk_fused_kernel<T, MR, false, kGated>, grid, 0, 1, s, xp, sg,
                            static_cast<int>(M), static_cast<int>(K), alpha, early);
  }
  constexpr int kCols = kGated ? kTileN / 2 : kTileN;
  int64_t tiles = 0;
  bool n_vec = true;
  for (int i = 0; i < sg.count; ++i) {
    sg.end[i] = static_cast<int>(tiles += (sg.n[i] + kCols - 1) / kCols);
    n_vec = n_vec && sg.n[i] % 8 == 0;
  }
  const int splits = kn_splits_tiles(M, K, tiles);
  const int kc = static_cast<int>((K + splits - 1) / splits);
  const size_t smem =
      std::max(static_cast<size_t>(MR) * kc, static_cast<size_t>(9) * MR * kTileN) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  if (n_vec && w_aligned)
    return launch_dependent(skinny_kn_fused_kernel<T, MR, true, kGated>, grid, smem, splits, s, xp, sg,
                            static_cast<int>(M), static_cast<int>(K), kc, splits, alpha, early);
  return launch_dependent(skinny_kn_fused_kernel<T, MR, false, kGated>, grid, smem, splits, s, xp, sg,
                          static_cast<int>(M), static_cast<int>(K), kc, splits, alpha, early);
}

template <class T, bool kGated>
cudaError_t launch_fused_typed(const In& x, const Segs& sg, bool tw, int64_t M, int64_t K, float alpha, int early,
                               cudaStream_t s) {
  switch (rows_template(M)) {
    case 1:
      return launch_fused_rows<T, 1, kGated>(x, sg, tw, M, K, alpha, early, s);
    case 2:
      return launch_fused_rows<T, 2, kGated>(x, sg, tw, M, K, alpha, early, s);
    case 4:
      return launch_fused_rows<T, 4, kGated>(x, sg, tw, M, K, alpha, early, s);
    case 8:
      return launch_fused_rows<T, 8, kGated>(x, sg, tw, M, K, alpha, early, s);
    default:
      return launch_fused_rows<T, 16, kGated>(x, sg, tw, M, K, alpha, early, s);
  }
}

/// The streaming kernel in x's dtype.
cudaError_t launch_stream_typed(DType dtype, bool gated, const void* x, const Segs& sg, int64_t M, int64_t K,
                                float alpha, int early, const StreamShape& shape, cudaStream_t s) {
  switch (dtype) {
    case DType::bf16: {
      const auto* xp = static_cast<const __nv_bfloat16*>(x);
      return gated ? launch_stream_rows<__nv_bfloat16, true>(xp, sg, M, K, alpha, early, shape, s)
                   : launch_stream_rows<__nv_bfloat16, false>(xp, sg, M, K, alpha, early, shape, s);
    }
    case DType::f16: {
      const auto* xp = static_cast<const __half*>(x);
      return gated ? launch_stream_rows<__half, true>(xp, sg, M, K, alpha, early, shape, s)
                   : launch_stream_rows<__half, false>(xp, sg, M, K, alpha, early, shape, s);
    }
    default: {
      const auto* xp = static_cast<const float*>(x);
      return gated ? launch_stream_rows<float, true>(xp, sg, M, K, alpha, early, shape, s)
                   : launch_stream_rows<float, false>(xp, sg, M, K, alpha, early, shape, s);
    }
  }
}

/// Checks the fused products' operands and launches the plan's kernel: gated with act != 0.
GpuStatus fused_products(const In& x, const In* w, const Out* out, int n, bool tw, float alpha, int act,
                         bool early_weights, FewRows kernel, const StreamShape& shape, cudaStream_t s) {
  if (kernel != FewRows::cluster && kernel != FewRows::stream)
    return kernel_failure("skinny fused products: the kernel must be the cluster (1) or the streaming (2) kernel");
  if (n < 1 || n > 4) return kernel_failure("skinny fused products: one to four weights");
  if (x.shape.rank < 1) return kernel_failure("skinny fused products: x must have rank >= 1");
  const int64_t K = x.shape.d[x.shape.rank - 1];
  if (!is_float(x.dtype)) return kernel_failure("skinny fused products: x must be a float tensor");
  Segs sg = {};
  sg.count = act ? 1 : n;
  sg.act = act;
  int64_t M = 0;
  for (int i = 0; i < n; ++i) {
    if (w[i].shape.rank != 2 || (tw ? w[i].shape.d[1] : w[i].shape.d[0]) != K)
      return kernel_failure("skinny fused products: a weight does not match x's last dim");
    if (w[i].dtype != x.dtype) return kernel_failure("skinny fused products: x and the weights must share one dtype");
    const int64_t N = tw ? w[i].shape.d[0] : w[i].shape.d[1];
    const Out& o = out[act ? 0 : i];
    if (o.dtype != x.dtype || o.shape.rank != x.shape.rank || o.shape.d[o.shape.rank - 1] != N)
      return kernel_failure("skinny fused products: an output is not [..., N] of x's dtype");
    for (int d = 0; d + 1 < x.shape.rank; ++d)
      if (o.shape.d[d] != x.shape.d[d]) return kernel_failure("skinny fused products: output leading dims differ");
    if (!skinny_linear_fits(x.dtype, o.shape.numel() / (N ? N : 1), K, N, tw))
      return kernel_failure("skinny fused products: a product is outside the kernel's cases (skinny_linear_fits)");
    M = o.shape.numel() / (N ? N : 1);
    sg.w[i] = w[i].data;
    if (!act || i == 0) {
      sg.out[i] = o.data;
      sg.n[i] = static_cast<int>(N);
    }
  }
  if (act && (n != 2 || w[0].shape != w[1].shape))
    return kernel_failure("skinny_linear_gated: the gate and up weights must have one shape");
  if (M == 0 || K == 0) return kernel_failure("skinny fused products: empty products are not fused");
  const int early = early_weights ? 1 : 0;
  if (kernel == FewRows::stream) {
    if (tw || !stream_fits(M, K, sg, act ? 2 : n))
      return kernel_failure("skinny fused products: the plan names the streaming kernel for a product it does not "
                            "hold (W [K, N], at most 4 rows, K x rows within 16384, widths a multiple of 8, "
                            "16-byte aligned weights)");
    ZK_CUDA_TRY(launch_stream_typed(x.dtype, act != 0, x.data, sg, M, K, alpha, early, shape, s));
    return {};
  }
  cudaError_t e;
  switch (x.dtype) {
    case DType::bf16:
      e = act ? launch_fused_typed<__nv_bfloat16, true>(x, sg, tw, M, K, alpha, early, s)
              : launch_fused_typed<__nv_bfloat16, false>(x, sg, tw, M, K, alpha, early, s);
      break;
    case DType::f16:
      e = act ? launch_fused_typed<__half, true>(x, sg, tw, M, K, alpha, early, s)
              : launch_fused_typed<__half, false>(x, sg, tw, M, K, alpha, early, s);
      break;
    default:
      e = act ? launch_fused_typed<float, true>(x, sg, tw, M, K, alpha, early, s)
              : launch_fused_typed<float, false>(x, sg, tw, M, K, alpha, early, s);
      break;
  }
  ZK_CUDA_TRY(e);
  return {};
}

}  // namespace

StreamShape skinny_stream_shape(DType dtype, int64_t K, const int64_t* n, int count, bool gated) {
  return choose_stream_shape(dtype_size(dtype), K, n, count, gated, sm_count());
}

bool skinny_linear_fits(DType dtype, int64_t M, int64_t K, int64_t N, bool trans_w) {
  if (!is_float(dtype) || M < 1 || M > kSkinnyMaxRows || K < 1 || N < 1) return false;
  if (K >= (int64_t{1} << 30) || N >= (int64_t{1} << 30) || M * K >= (int64_t{1} << 31) ||
      M * N >= (int64_t{1} << 31))
    return false;
  if (trans_w) return (N + 7) / 8 < (int64_t{1} << 31);
  return kn_splits(M, K, N, dtype_size(dtype)) > 0 && (N + kTileN - 1) / kTileN < (int64_t{1} << 31);
}

GpuStatus skinny_linear(const In& x, const In& w, const In& bias, const Out& out, bool trans_w, float alpha,
                        Epilogue epi, bool early_weights, cudaStream_t s, FewRows kernel, StreamShape shape) {
  if (kernel != FewRows::cluster && kernel != FewRows::stream)
    return kernel_failure("skinny_linear: the kernel must be the cluster (1) or the streaming (2) kernel");
  const int early = early_weights ? 1 : 0;
  if (x.shape.rank < 1 || w.shape.rank != 2)
    return kernel_failure("skinny_linear: x must have rank >= 1 and W rank 2");
  const int64_t K = x.shape.d[x.shape.rank - 1];
  const int64_t N = trans_w ? w.shape.d[0] : w.shape.d[1];
  if ((trans_w ? w.shape.d[1] : w.shape.d[0]) != K)
    return kernel_failure("skinny_linear: W does not match x's last dim");
  if (out.shape.rank != x.shape.rank || out.shape.d[out.shape.rank - 1] != N)
    return kernel_failure("skinny_linear: the output is not [..., N]");
  for (int i = 0; i + 1 < x.shape.rank; ++i)
    if (out.shape.d[i] != x.shape.d[i])
      return kernel_failure("skinny_linear: output leading dims differ from x's");
  if (!is_float(x.dtype) || w.dtype != x.dtype || out.dtype != x.dtype)
    return kernel_failure("skinny_linear: x, W and out must share one float dtype");
  const bool wants_bias = epi == Epilogue::bias || epi == Epilogue::gelu_bias;
  if (wants_bias != (bias.data != nullptr))
    return kernel_failure("skinny_linear: the epilogue and the bias operand disagree");
  if (bias.data && (bias.shape.numel() != N || bias.dtype != x.dtype))
    return kernel_failure("skinny_linear: bias must be [N] of x's dtype");
  const int64_t M = N ? out.shape.numel() / N : 0;
  if (!skinny_linear_fits(x.dtype, M, K, N, trans_w))
    return kernel_failure("skinny_linear: the product is outside the kernel's cases (skinny_linear_fits)");
  if (kernel == FewRows::stream) {
    Segs sg = {};
    sg.w[0] = w.data;
    sg.out[0] = out.data;
    sg.n[0] = static_cast<int>(N);
    sg.count = 1;
    sg.bias = bias.data;
    sg.epi = static_cast<int>(epi);
    if (trans_w || !stream_fits(M, K, sg, 1))
      return kernel_failure("skinny_linear: the plan names the streaming kernel for a product it does not hold (W "
                            "[K, N], at most 4 rows, K x rows within 16384, N a multiple of 8, a 16-byte aligned "
                            "weight)");
    ZK_CUDA_TRY(launch_stream_typed(x.dtype, false, x.data, sg, M, K, alpha, early, shape, s));
    return {};
  }
  switch (x.dtype) {
    case DType::bf16:
      ZK_CUDA_TRY(launch_typed<__nv_bfloat16>(x, w, bias, out, trans_w, M, K, N, alpha, epi, early, s));
      break;
    case DType::f16:
      ZK_CUDA_TRY(launch_typed<__half>(x, w, bias, out, trans_w, M, K, N, alpha, epi, early, s));
      break;
    default:
      ZK_CUDA_TRY(launch_typed<float>(x, w, bias, out, trans_w, M, K, N, alpha, epi, early, s));
      break;
  }
  return {};
}


GpuStatus skinny_norm_products(const In& x, const In& residual, const In& scale, const In* w, const Out& sum,
                               const Out* out, int n, Unary act, bool gated, float alpha, float eps,
                               bool early_weights, cudaStream_t s, StreamShape shape) {
  if (n < 1 || n > 4 || (gated && n != 2)) return kernel_failure("norm_products: one to four weights (gated: two)");
  if (x.shape.rank < 1) return kernel_failure("norm_products: x must have rank >= 1");
  const int64_t K = x.shape.d[x.shape.rank - 1];
  if (!is_float(x.dtype) || residual.dtype != x.dtype || sum.dtype != x.dtype || scale.dtype != x.dtype ||
      residual.shape != x.shape || sum.shape != x.shape || scale.shape.numel() != K)
    return kernel_failure("norm_products: x, residual, sum and scale ([K]) must share one float dtype and x's shape");
  if (gated && act != Unary::silu && act != Unary::gelu_tanh && act != Unary::gelu_erf)
    return kernel_failure("norm_products: the activation must be silu, gelu_tanh or gelu_erf");
  Segs sg = {};
  sg.count = gated ? 1 : n;
  sg.act = gated ? static_cast<int>(act) : 0;
  sg.res = residual.data;
  sg.nscale = scale.data;
  sg.sum = sum.data;
  sg.eps = eps;
  const int64_t M = K ? x.shape.numel() / K : 0;
  for (int i = 0; i < n; ++i) {
    if (w[i].shape.rank != 2 || w[i].shape.d[0] != K || w[i].dtype != x.dtype)
      return kernel_failure("norm_products: a weight is not [K, N] of x's dtype");
    const int64_t N = w[i].shape.d[1];
    const Out& o = out[gated ? 0 : i];
    if (o.dtype != x.dtype || o.shape.rank != x.shape.rank || o.shape.d[o.shape.rank - 1] != N ||
        o.shape.numel() != M * N)
      return kernel_failure("norm_products: an output is not [..., N] of x's rows and dtype");
    sg.w[i] = w[i].data;
    if (!gated || i == 0) {
      sg.out[i] = o.data;
      sg.n[i] = static_cast<int>(N);
    }
  }
  if (gated && w[0].shape != w[1].shape) return kernel_failure("norm_products: the gate and up weights differ");
  // Only the streaming kernel folds the norm: its limits are the op's (the compiler writes it within them).
  if (!stream_fits(M, K, sg, n))
    return kernel_failure("norm_products: outside the streaming kernel's cases (at most 4 rows, K x rows within "
                          "16384, N a multiple of 8, 16-byte aligned weights)");
  ZK_CUDA_TRY(launch_stream_typed(x.dtype, gated, x.data, sg, M, K, alpha, early_weights ? 1 : 0, shape, s));
  return {};
}

GpuStatus skinny_linear_multi(const In& x, const In* w, const Out* out, int n, bool trans_w, float alpha,
                              bool early_weights, cudaStream_t s, FewRows kernel, StreamShape shape) {
  if (n < 2) return kernel_failure("skinny_linear_multi: two to four weights");
  return fused_products(x, w, out, n, trans_w, alpha, 0, early_weights, kernel, shape, s);
}

GpuStatus skinny_linear_gated(Unary act, const In& x, const In& w_gate, const In& w_up, const Out& out,
                              bool trans_w, float alpha, bool early_weights, cudaStream_t s, FewRows kernel,
                              StreamShape shape) {
  if (act != Unary::silu && act != Unary::gelu_tanh && act != Unary::gelu_erf)
    return kernel_failure("skinny_linear_gated: the activation must be silu, gelu_tanh or gelu_erf");
  const In w[2] = {w_gate, w_up};
  const Out o[2] = {out, out};
  return fused_products(x, w, o, 2, trans_w, alpha, static_cast<int>(act), early_weights, kernel, shape, s);
}

}  // namespace cuda
}  // namespace zk
