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
// The oracle is the CPU reference kernel (zk::cpu::linear), tests/cuda/generate_kernels_test.cpp; which of
// this kernel and cuBLASLt runs a product is measured per shape (gemm.cpp).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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

template <class T, int MR>
cudaError_t launch_rows(const In& x, const In& w, const In& bias, const Out& out, bool tw, int64_t M,
                        int64_t K, int64_t N, float alpha, Epilogue epi, int early, cudaStream_t s) {
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

}  // namespace

bool skinny_linear_fits(DType dtype, int64_t M, int64_t K, int64_t N, bool trans_w) {
  if (!is_float(dtype) || M < 1 || M > kSkinnyMaxRows || K < 1 || N < 1) return false;
  if (K >= (int64_t{1} << 30) || N >= (int64_t{1} << 30) || M * K >= (int64_t{1} << 31) ||
      M * N >= (int64_t{1} << 31))
    return false;
  if (trans_w) return (N + 7) / 8 < (int64_t{1} << 31);
  return kn_splits(M, K, N, dtype_size(dtype)) > 0 && (N + kTileN - 1) / kTileN < (int64_t{1} << 31);
}

GpuStatus skinny_linear(const In& x, const In& w, const In& bias, const Out& out, bool trans_w, float alpha,
                        Epilogue epi, bool early_weights, cudaStream_t s) {
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

}  // namespace cuda
}  // namespace zk
