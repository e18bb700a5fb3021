// Flash-style attention backward. Nothing of size S x T is stored: each kernel recomputes its tile of
// scores from q and k and turns them into probabilities with the forward's log-sum-exp, P = exp(s - lse).
// With D_i = dout_i . out_i (the softmax backward's row term, computed once by delta_kernel):
//   dS_ij = P_ij (dout_i . v_j - D_i),  dq_i = scale sum_j dS_ij k_j,
//   dk_j = scale sum_{h in group, i} dS_hij q_hi,  dv_j = sum_{h in group, i} P_hij dout_hi.
// dkdv_kernel owns a tile of keys of one kv head and walks every query of the heads sharing it (GQA), so
// dk and dv are summed inside one block: no atomics, the same result on every run. dq_kernel owns a tile
// of queries and walks the keys. Causal tiles that see nothing are skipped. Two implementations:
//  - the tensor-core path (bf16/f16 with head dims 64 and 128; the default there): 64 x 64 tiles, the
//    products S, dP, dV += P^T dO, dK += dS^T Q and dQ += dS K on WMMA with fp32 accumulation; P and dS
//    are rounded to the 16-bit type for their products, as FlashAttention does;
//  - the exact path (every other case, kept as the cross-check): 32 x 32 tiles in fp32 shared memory, fp32 math
//    on CUDA cores, head dims up to 256.
// Which one runs is the plan's choice (attention_grad's kernel code: exact, wmma, or mma, the register kernels
// at head dim 64; zk/attention_kernels.h); direct callers (the GPU tests) name one with ZK_CUDA_ATTENTION_GRAD.
#include <mma.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "common.cuh"
#include "mma.cuh"
#include "zk/attention_kernels.h"
#include "zk/cuda_train_kernels.h"
#include "zk/cuda_workspace.h"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
namespace wmma = nvcuda::wmma;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kTile = 32;      // queries and keys per tile
constexpr int kThreads = 256;  // 8 warps

struct GradDims {
  int B, Hq, Hkv, S, T, Dh;
  int causal;
  float scale;
  const void *mask;
  DType mask_dtype;
  int64_t mst[4];
};

// --- tier 1 ------------------------------------------------------------------------------------------------
/// D[row] = dout[row] . out[row], one warp per row.
template <class T>
__global__ void delta_kernel(const T *__restrict__ out, const T *__restrict__ dout, float *__restrict__ D, int64_t rows,
                             int Dh) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int c = lane; c < Dh; c += 32) acc += to_f32(out[row * Dh + c]) * to_f32(dout[row * Dh + c]);
  acc = detail::warp_sum(acc);
  if (lane == 0) D[row] = acc;
}

/// Loads `rows` rows of Dh elements starting at row r0 of a [*, Dh] matrix into fp32 shared memory (row
/// stride ld); rows past `valid` are zero.
template <class T>
__device__ __forceinline__ void load_rows(float *dst, const T *src, int r0, int rows, int valid, int Dh, int ld) {
  for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int r = e / Dh, c = e % Dh;
    dst[r * ld + c] = r0 + r < valid ? to_f32(src[static_cast<int64_t>(r0 + r) * Dh + c]) : 0.0f;
  }
}

/// Fills P and dS [kTile x kTile] for queries i0.. of head h (batch b) against keys j0.. from the tiles in
/// shared memory: Qs, dOs (queries) and Ks, Vs (keys), with the rows' lse and D.
__device__ __forceinline__ void score_tile(const GradDims &d, int b, int h, int i0, int j0, const float *Qs,
                                           const float *dOs, const float *Ks, const float *Vs, const float *lse_s,
                                           const float *D_s, float *P, float *dS, int ld) {
  const int shift = d.T - d.S;
  for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
    const int r = e / kTile, c = e % kTile;
    const int i = i0 + r, j = j0 + c;
    float p = 0.0f, ds = 0.0f;
    const float l = lse_s[r];
    if (i < d.S && j < d.T && (!d.causal || j <= i + shift) && l != -INFINITY) {
      float dot = 0.0f, dp = 0.0f;
      for (int x = 0; x < d.Dh; ++x) {
        dot = fmaf(Qs[r * ld + x], Ks[c * ld + x], dot);
        dp = fmaf(dOs[r * ld + x], Vs[c * ld + x], dp);
      }
      float sc = dot * d.scale;
      if (d.mask)
        sc += detail::load_f(d.mask, d.mask_dtype,
                             b * d.mst[0] + h * d.mst[1] + static_cast<int64_t>(i) * d.mst[2] +
                                 static_cast<int64_t>(j) * d.mst[3]);
      p = expf(sc - l);
      ds = p * (dp - D_s[r]);
    }
    P[r * (kTile + 1) + c] = p;
    dS[r * (kTile + 1) + c] = ds;
  }
}

/// Shared memory of both kernels: four [kTile, Dh] fp32 tiles, two accumulators of the same size, P, dS,
/// and the rows' lse and D.
inline size_t grad_smem(int Dh) {
  const size_t ld = static_cast<size_t>(Dh) + 1;
  return (6 * kTile * ld + 2 * kTile * (kTile + 1) + 2 * kTile) * sizeof(float);
}

template <class T>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                         const T *__restrict__ v, const T *__restrict__ dout,
                                                         const float *__restrict__ lse, const float *__restrict__ D,
                                                         T *__restrict__ dk, T *__restrict__ dv, GradDims d) {
  extern __shared__ float sh[];
  const int ld = d.Dh + 1;  // odd stride: threads reading one column of consecutive rows hit distinct banks
  float *Qs = sh, *dOs = Qs + kTile * ld, *Ks = dOs + kTile * ld, *Vs = Ks + kTile * ld;
  float *dKa = Vs + kTile * ld, *dVa = dKa + kTile * ld;
  float *P = dVa + kTile * ld, *dS = P + kTile * (kTile + 1);
  float *lse_s = dS + kTile * (kTile + 1), *D_s = lse_s + kTile;
  const int j0 = blockIdx.x * kTile, bk = blockIdx.y, b = bk / d.Hkv, kh = bk % d.Hkv;
  const int group = d.Hq / d.Hkv;
  const T *kp = k + static_cast<int64_t>(bk) * d.T * d.Dh, *vp = v + static_cast<int64_t>(bk) * d.T * d.Dh;
  load_rows(Ks, kp, j0, kTile, d.T, d.Dh, ld);
  load_rows(Vs, vp, j0, kTile, d.T, d.Dh, ld);
  for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) {
    const int r = e / d.Dh, c = e % d.Dh;
    dKa[r * ld + c] = 0.0f;
    dVa[r * ld + c] = 0.0f;
  }
  // Under the causal mask key j is seen by queries i >= j - (T - S): earlier query tiles are skipped.
  const int first = d.causal ? max(0, j0 - (d.T - d.S)) / kTile * kTile : 0;
  for (int g = 0; g < group; ++g) {
    const int h = kh * group + g;
    const int64_t bh = static_cast<int64_t>(b) * d.Hq + h;
    const T *qp = q + bh * d.S * d.Dh, *dop = dout + bh * d.S * d.Dh;
    for (int i0 = first; i0 < d.S; i0 += kTile) {
      __syncthreads();  // the previous tile's P and dS have been consumed
      load_rows(Qs, qp, i0, kTile, d.S, d.Dh, ld);
      load_rows(dOs, dop, i0, kTile, d.S, d.Dh, ld);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        lse_s[r] = i0 + r < d.S ? lse[bh * d.S + i0 + r] : -INFINITY;
        D_s[r] = i0 + r < d.S ? D[bh * d.S + i0 + r] : 0.0f;
      }
      __syncthreads();
      score_tile(d, b, h, i0, j0, Qs, dOs, Ks, Vs, lse_s, D_s, P, dS, ld);
      __syncthreads();
      // dV[c] += sum_r P[r][c] dO[r];  dK[c] += sum_r dS[r][c] Q[r]. Each thread owns fixed (c, x) entries.
      for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) {
        const int c = e / d.Dh, x = e % d.Dh;
        float av = dVa[c * ld + x], ak = dKa[c * ld + x];
#pragma unroll 8
        for (int r = 0; r < kTile; ++r) {
          av = fmaf(P[r * (kTile + 1) + c], dOs[r * ld + x], av);
          ak = fmaf(dS[r * (kTile + 1) + c], Qs[r * ld + x], ak);
        }
        dVa[c * ld + x] = av;
        dKa[c * ld + x] = ak;
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) {
    const int r = e / d.Dh, c = e % d.Dh;
    if (j0 + r < d.T) {
      const int64_t at = (static_cast<int64_t>(bk) * d.T + j0 + r) * d.Dh + c;
      dk[at] = from_f32<T>(dKa[r * ld + c] * d.scale);
      dv[at] = from_f32<T>(dVa[r * ld + c]);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) dq_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                       const T *__restrict__ v, const T *__restrict__ dout,
                                                       const float *__restrict__ lse, const float *__restrict__ D,
                                                       T *__restrict__ dq, GradDims d) {
  extern __shared__ float sh[];
  const int ld = d.Dh + 1;
  float *Qs = sh, *dOs = Qs + kTile * ld, *Ks = dOs + kTile * ld, *Vs = Ks + kTile * ld;
  float *dQa = Vs + kTile * ld;
  float *P = dQa + 2 * kTile * ld, *dS = P + kTile * (kTile + 1);
  float *lse_s = dS + kTile * (kTile + 1), *D_s = lse_s + kTile;
  const int i0 = blockIdx.x * kTile, bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const T *qp = q + static_cast<int64_t>(bh) * d.S * d.Dh, *dop = dout + static_cast<int64_t>(bh) * d.S * d.Dh;
  const T *kp = k + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * d.Dh;
  const T *vp = v + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * d.Dh;
  load_rows(Qs, qp, i0, kTile, d.S, d.Dh, ld);
  load_rows(dOs, dop, i0, kTile, d.S, d.Dh, ld);
  for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
    lse_s[r] = i0 + r < d.S ? lse[static_cast<int64_t>(bh) * d.S + i0 + r] : -INFINITY;
    D_s[r] = i0 + r < d.S ? D[static_cast<int64_t>(bh) * d.S + i0 + r] : 0.0f;
  }
  for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) dQa[(e / d.Dh) * ld + e % d.Dh] = 0.0f;
  // Under the causal mask the tile's last query sees keys up to i0 + kTile - 1 + (T - S).
  const int end = d.causal ? min(d.T, i0 + kTile + (d.T - d.S)) : d.T;
  for (int j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    load_rows(Ks, kp, j0, kTile, d.T, d.Dh, ld);
    load_rows(Vs, vp, j0, kTile, d.T, d.Dh, ld);
    __syncthreads();
    score_tile(d, b, h, i0, j0, Qs, dOs, Ks, Vs, lse_s, D_s, P, dS, ld);
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) {
      const int r = e / d.Dh, x = e % d.Dh;
      float a = dQa[r * ld + x];
#pragma unroll 8
      for (int c = 0; c < kTile; ++c) a = fmaf(dS[r * (kTile + 1) + c], Ks[c * ld + x], a);
      dQa[r * ld + x] = a;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kTile * d.Dh; e += blockDim.x) {
    const int r = e / d.Dh, c = e % d.Dh;
    if (i0 + r < d.S) dq[(static_cast<int64_t>(bh) * d.S + i0 + r) * d.Dh + c] = from_f32<T>(dQa[r * ld + c] * d.scale);
  }
}

// --- tier 1: tensor-core path -----------------------------------------------------------------------------
constexpr int kTc = 64;        // queries and keys per tile
constexpr int kTcWarps = 4;    // each warp owns 16 rows of the block's tile

/// Shared-memory layout of both tensor-core kernels: four 16-bit [64, Dh] tiles (Q, dO, K, V), two fp32
/// [64, 64] score tiles (S, dP), two 16-bit [64, 64] tiles (P, dS) and the rows' lse and D. The accumulators
/// (dK and dV, or dQ) live in registers as WMMA fragments for the whole walk; only at the end are they staged
/// through shared memory (over the tiles, which are free by then) to be scaled and converted. Without
/// accumulators in shared memory two blocks fit on an SM at Dh 64. Row strides are padded against bank
/// conflicts and keep every WMMA pointer 32-byte aligned.
template <int Dh>
struct TcSmem {
  static constexpr int ld = Dh + 8, lds = kTc + 4, ldp = kTc + 8, lda = Dh + 4;
  static constexpr size_t tile = size_t(kTc) * ld * 2, score = size_t(kTc) * lds * 4, prob = size_t(kTc) * ldp * 2;
  static constexpr size_t acc = size_t(kTc) * lda * 4;  // one staged accumulator
  static constexpr size_t bytes = 4 * tile + 2 * score + 2 * prob + 2 * kTc * 4;
  static_assert(2 * acc <= bytes, "the two staged accumulators must fit over the tiles");
};

/// Copies `rows` rows of Dh 16-bit elements (row stride Dh in global memory) into shared rows of stride
/// ld, 16 bytes per thread per step; rows past `valid` are zero.
template <int Dh, class T>
__device__ __forceinline__ void load_tile16(T *dst, const T *src, int valid, int ld) {
  constexpr int per_row = Dh / 8;
  for (int e = threadIdx.x; e < kTc * per_row; e += blockDim.x) {
    const int r = e / per_row, c = (e % per_row) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < valid) val = *reinterpret_cast<const uint4 *>(src + static_cast<int64_t>(r) * Dh + c);
    *reinterpret_cast<uint4 *>(dst + r * ld + c) = val;
  }
}

/// For the warp's 16 rows: X = A B^T and Y = C E^T over Dh (A, C: the warp's rows of a [64, Dh] tile;
/// B, E: all 64 rows of another), stored to fp32 [16, 64] tiles Xs and Ys (row stride lds).
template <class T, int Dh>
__device__ __forceinline__ void two_products(const T *A, const T *B, const T *C, const T *E, float *Xs, float *Ys) {
  using L = TcSmem<Dh>;
#pragma unroll
  for (int nb = 0; nb < kTc / 16; ++nb) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> x, y;
    wmma::fill_fragment(x, 0.0f);
    wmma::fill_fragment(y, 0.0f);
#pragma unroll
    for (int kk = 0; kk < Dh / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;  // B^T: B's rows read as columns
      wmma::load_matrix_sync(a, A + kk * 16, L::ld);
      wmma::load_matrix_sync(bt, B + nb * 16 * L::ld + kk * 16, L::ld);
      wmma::mma_sync(x, a, bt, x);
      wmma::load_matrix_sync(a, C + kk * 16, L::ld);
      wmma::load_matrix_sync(bt, E + nb * 16 * L::ld + kk * 16, L::ld);
      wmma::mma_sync(y, a, bt, y);
    }
    wmma::store_matrix_sync(Xs + nb * 16, x, L::lds, wmma::mem_row_major);
    wmma::store_matrix_sync(Ys + nb * 16, y, L::lds, wmma::mem_row_major);
  }
}

using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// acc[16, Dh] (the warp's rows, fp32 fragments in registers) += P[16, 64] (16-bit, stride ldp) X[64, Dh]
/// (16-bit, stride ld).
template <class T, int Dh>
__device__ __forceinline__ void accumulate_product(AccFrag (&acc)[Dh / 16], const T *P, const T *X) {
  using L = TcSmem<Dh>;
#pragma unroll
  for (int kk = 0; kk < kTc / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::load_matrix_sync(a, P + kk * 16, L::ldp);
#pragma unroll
    for (int nd = 0; nd < Dh / 16; ++nd) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
      wmma::load_matrix_sync(b, X + kk * 16 * L::ld + nd * 16, L::ld);
      wmma::mma_sync(acc[nd], a, b, acc[nd]);
    }
  }
}

/// Stores the warp's accumulator rows into a fp32 [64, Dh] staging tile (stride lda) at rows 16 warp ..
template <int Dh>
__device__ __forceinline__ void stage_acc(float *stage, const AccFrag (&acc)[Dh / 16], int warp) {
  using L = TcSmem<Dh>;
#pragma unroll
  for (int nd = 0; nd < Dh / 16; ++nd)
    wmma::store_matrix_sync(stage + warp * 16 * L::lda + nd * 16, acc[nd], L::lda, wmma::mem_row_major);
}

template <class T, int Dh>
struct TcPtrs {
  T *Qs, *dOs, *Ks, *Vs;
  float *Ss, *dPs;
  T *Ps, *dSs;
  float *lse_s, *D_s;
  __device__ explicit TcPtrs(unsigned char *smem) {
    using L = TcSmem<Dh>;
    Qs = reinterpret_cast<T *>(smem);
    dOs = reinterpret_cast<T *>(smem + L::tile);
    Ks = reinterpret_cast<T *>(smem + 2 * L::tile);
    Vs = reinterpret_cast<T *>(smem + 3 * L::tile);
    unsigned char *p = smem + 4 * L::tile;
    Ss = reinterpret_cast<float *>(p);
    dPs = reinterpret_cast<float *>(p + L::score);
    p += 2 * L::score;
    Ps = reinterpret_cast<T *>(p);
    dSs = reinterpret_cast<T *>(p + L::prob);
    p += 2 * L::prob;
    lse_s = reinterpret_cast<float *>(p);
    D_s = lse_s + kTc;
  }
};

/// dK and dV for 64 keys of one kv head, over every query of the heads sharing it. Warp w owns keys
/// 16w .. 16w + 15: it computes S^T = K Q^T and dP^T = V dO^T for them, then P^T, dS^T, and adds
/// P^T dO and dS^T Q into its rows of the accumulators.
template <class T, int Dh>
__global__ void __launch_bounds__(kTcWarps * 32) dkdv_tc_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                                 const T *__restrict__ v, const T *__restrict__ dout,
                                                                 const float *__restrict__ lse,
                                                                 const float *__restrict__ D, T *__restrict__ dk,
                                                                 T *__restrict__ dv, GradDims d) {
  using L = TcSmem<Dh>;
  extern __shared__ __align__(128) unsigned char smem[];
  TcPtrs<T, Dh> sp(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j0 = blockIdx.x * kTc, bk = blockIdx.y, b = bk / d.Hkv, kh = bk % d.Hkv;
  const int group = d.Hq / d.Hkv, shift = d.T - d.S;
  const int64_t kvbase = static_cast<int64_t>(bk) * d.T * Dh;
  load_tile16<Dh>(sp.Ks, k + kvbase + static_cast<int64_t>(j0) * Dh, min(kTc, d.T - j0), L::ld);
  load_tile16<Dh>(sp.Vs, v + kvbase + static_cast<int64_t>(j0) * Dh, min(kTc, d.T - j0), L::ld);
  AccFrag dK[Dh / 16], dV[Dh / 16];
#pragma unroll
  for (int nd = 0; nd < Dh / 16; ++nd) {
    wmma::fill_fragment(dK[nd], 0.0f);
    wmma::fill_fragment(dV[nd], 0.0f);
  }
  float *Ss = sp.Ss + warp * 16 * L::lds, *dPs = sp.dPs + warp * 16 * L::lds;
  T *Ps = sp.Ps + warp * 16 * L::ldp, *dSs = sp.dSs + warp * 16 * L::ldp;
  const int first = d.causal ? max(0, j0 - shift) / kTc * kTc : 0;
  for (int g = 0; g < group; ++g) {
    const int h = kh * group + g;
    const int64_t bh = static_cast<int64_t>(b) * d.Hq + h;
    for (int i0 = first; i0 < d.S; i0 += kTc) {
      __syncthreads();  // every warp is done with the previous Q and dO tiles
      load_tile16<Dh>(sp.Qs, q + (bh * d.S + i0) * Dh, min(kTc, d.S - i0), L::ld);
      load_tile16<Dh>(sp.dOs, dout + (bh * d.S + i0) * Dh, min(kTc, d.S - i0), L::ld);
      for (int r = threadIdx.x; r < kTc; r += blockDim.x) {
        sp.lse_s[r] = i0 + r < d.S ? lse[bh * d.S + i0 + r] : -INFINITY;
        sp.D_s[r] = i0 + r < d.S ? D[bh * d.S + i0 + r] : 0.0f;
      }
      __syncthreads();
      two_products<T, Dh>(sp.Ks + warp * 16 * L::ld, sp.Qs, sp.Vs + warp * 16 * L::ld, sp.dOs, Ss, dPs);
      __syncwarp();
      for (int e = lane; e < 16 * kTc; e += 32) {
        const int r = e / kTc, c = e % kTc;
        const int j = j0 + warp * 16 + r, i = i0 + c;
        const float l = sp.lse_s[c];
        float p = 0.0f, ds = 0.0f;
        if (j < d.T && i < d.S && (!d.causal || j <= i + shift) && l != -INFINITY) {
          float sc = Ss[r * L::lds + c] * d.scale;
          if (d.mask)
            sc += detail::load_f(d.mask, d.mask_dtype,
                                 b * d.mst[0] + h * d.mst[1] + static_cast<int64_t>(i) * d.mst[2] +
                                     static_cast<int64_t>(j) * d.mst[3]);
          p = expf(sc - l);
          ds = p * (dPs[r * L::lds + c] - sp.D_s[c]);
        }
        Ps[r * L::ldp + c] = from_f32<T>(p);
        dSs[r * L::ldp + c] = from_f32<T>(ds);
      }
      __syncwarp();
      accumulate_product<T, Dh>(dV, Ps, sp.dOs);  // dV += P^T dO
      accumulate_product<T, Dh>(dK, dSs, sp.Qs);  // dK += dS^T Q
    }
  }
  __syncthreads();  // every warp is done with the tiles: stage the accumulators over them
  float *stage_k = reinterpret_cast<float *>(smem), *stage_v = stage_k + kTc * L::lda;
  stage_acc<Dh>(stage_k, dK, warp);
  stage_acc<Dh>(stage_v, dV, warp);
  __syncthreads();
  for (int e = threadIdx.x; e < kTc * Dh; e += blockDim.x) {
    const int r = e / Dh, c = e % Dh;
    if (j0 + r < d.T) {
      const int64_t at = kvbase + static_cast<int64_t>(j0 + r) * Dh + c;
      dk[at] = from_f32<T>(stage_k[r * L::lda + c] * d.scale);
      dv[at] = from_f32<T>(stage_v[r * L::lda + c]);
    }
  }
}

/// dQ for 64 queries of one head, over every key it sees. Warp w owns queries 16w .. 16w + 15.
template <class T, int Dh>
__global__ void __launch_bounds__(kTcWarps * 32) dq_tc_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                               const T *__restrict__ v, const T *__restrict__ dout,
                                                               const float *__restrict__ lse, const float *__restrict__ D,
                                                               T *__restrict__ dq, GradDims d) {
  using L = TcSmem<Dh>;
  extern __shared__ __align__(128) unsigned char smem[];
  TcPtrs<T, Dh> sp(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i0 = blockIdx.x * kTc, bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv), shift = d.T - d.S;
  const int64_t qbase = static_cast<int64_t>(bh) * d.S * Dh;
  const int64_t kvbase = (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  load_tile16<Dh>(sp.Qs, q + qbase + static_cast<int64_t>(i0) * Dh, min(kTc, d.S - i0), L::ld);
  load_tile16<Dh>(sp.dOs, dout + qbase + static_cast<int64_t>(i0) * Dh, min(kTc, d.S - i0), L::ld);
  for (int r = threadIdx.x; r < kTc; r += blockDim.x) {
    sp.lse_s[r] = i0 + r < d.S ? lse[static_cast<int64_t>(bh) * d.S + i0 + r] : -INFINITY;
    sp.D_s[r] = i0 + r < d.S ? D[static_cast<int64_t>(bh) * d.S + i0 + r] : 0.0f;
  }
  AccFrag dQ[Dh / 16];
#pragma unroll
  for (int nd = 0; nd < Dh / 16; ++nd) wmma::fill_fragment(dQ[nd], 0.0f);
  float *Ss = sp.Ss + warp * 16 * L::lds, *dPs = sp.dPs + warp * 16 * L::lds;
  T *dSs = sp.dSs + warp * 16 * L::ldp;
  const int end = d.causal ? min(d.T, i0 + kTc + shift) : d.T;
  for (int j0 = 0; j0 < end; j0 += kTc) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile16<Dh>(sp.Ks, k + kvbase + static_cast<int64_t>(j0) * Dh, min(kTc, d.T - j0), L::ld);
    load_tile16<Dh>(sp.Vs, v + kvbase + static_cast<int64_t>(j0) * Dh, min(kTc, d.T - j0), L::ld);
    __syncthreads();
    two_products<T, Dh>(sp.Qs + warp * 16 * L::ld, sp.Ks, sp.dOs + warp * 16 * L::ld, sp.Vs, Ss, dPs);
    __syncwarp();
    for (int e = lane; e < 16 * kTc; e += 32) {
      const int r = e / kTc, c = e % kTc;
      const int i = i0 + warp * 16 + r, j = j0 + c;
      const float l = sp.lse_s[warp * 16 + r];
      float ds = 0.0f;
      if (j < d.T && i < d.S && (!d.causal || j <= i + shift) && l != -INFINITY) {
        float sc = Ss[r * L::lds + c] * d.scale;
        if (d.mask)
          sc += detail::load_f(d.mask, d.mask_dtype,
                               b * d.mst[0] + h * d.mst[1] + static_cast<int64_t>(i) * d.mst[2] +
                                   static_cast<int64_t>(j) * d.mst[3]);
        const float p = expf(sc - l);
        ds = p * (dPs[r * L::lds + c] - sp.D_s[warp * 16 + r]);
      }
      dSs[r * L::ldp + c] = from_f32<T>(ds);
    }
    __syncwarp();
    accumulate_product<T, Dh>(dQ, dSs, sp.Ks);  // dQ += dS K
  }
  __syncthreads();  // every warp is done with the tiles: stage the accumulator over them
  float *stage = reinterpret_cast<float *>(smem);
  stage_acc<Dh>(stage, dQ, warp);
  __syncthreads();
  for (int e = threadIdx.x; e < kTc * Dh; e += blockDim.x) {
    const int r = e / Dh, c = e % Dh;
    if (i0 + r < d.S) dq[qbase + static_cast<int64_t>(i0 + r) * Dh + c] = from_f32<T>(stage[r * L::lda + c] * d.scale);
  }
}


// --- tier 1: register-level tensor-core path (the default for bf16/f16 with head dim 64) --------------------
// FlashAttention-2's backward on mma.sync.m16n8k16 (helpers and fragment layouts in mma.cuh). Every product
// keeps its accumulators in registers and feeds the next product from registers: a score accumulator pair
// is an A fragment, so P and dS never touch shared memory. Shared memory holds only the streamed tiles,
// double-buffered by cp.async so that the next tile arrives while this one is multiplied.
//  - dkdv_mma_kernel: a block of 4 warps owns 64 keys of one kv head, warp w keys 16w .. 16w + 15, with
//    their K and V rows as A fragments in registers. It walks the query tiles of every head of the group:
//    S^T = K Q^T and dP^T = V dO^T (B fragments by ldmatrix from the Q and dO tiles), P^T and dS^T in
//    registers, then dV += P^T dO and dK += dS^T Q (B fragments by ldmatrix.trans).
//  - dq_mma_kernel: a block owns 64 queries of one head, warp w queries 16w .. 16w + 15, with Q and dO as
//    A fragments; it walks the key tiles: S = Q K^T, dP = dO V^T, dS, then dQ += dS K.
// dQ is computed apart from dK and dV (two more products than one fused kernel with atomics), so that every
// sum has one fixed order: the result is the same on every run, as on the other paths.
constexpr int kMmaTile = 64, kMmaWarps = 4, kMmaDh = 64;

template <int Dh>
struct MmaGradSmem {
  static constexpr int ld = Dh + 8;                     // 16-byte padded rows: conflict-free ldmatrix
  static constexpr size_t tile = size_t(kMmaTile) * ld * 2;
  // dkdv: K, V (once), then Q and dO double-buffered, and the query rows' lse and D, double-buffered.
  static constexpr size_t dkdv = 6 * tile + 2 * 2 * kMmaTile * sizeof(float);
  // dq: K and V double-buffered; Q and dO pass through buffer 1 before the walk starts.
  static constexpr size_t dq = 4 * tile;
};

/// The four A fragments (16 rows x Dh, in 16-wide steps) of the warp's 16 rows of a shared [64, Dh] tile.
template <int Dh, class T>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[Dh / 16][4], const T *tile, int warp, int g, int t) {
  constexpr int ld = MmaGradSmem<Dh>::ld;
#pragma unroll
  for (int kk = 0; kk < Dh / 16; ++kk) {
    const T *base = tile + (warp * 16) * ld + kk * 16;
    a[kk][0] = *reinterpret_cast<const uint32_t *>(base + g * ld + 2 * t);
    a[kk][1] = *reinterpret_cast<const uint32_t *>(base + (g + 8) * ld + 2 * t);
    a[kk][2] = *reinterpret_cast<const uint32_t *>(base + g * ld + 2 * t + 8);
    a[kk][3] = *reinterpret_cast<const uint32_t *>(base + (g + 8) * ld + 2 * t + 8);
  }
}

/// acc[16, 64] = A[16, Dh] X^T for the 64 rows of X (a shared [64, Dh] tile read by ldmatrix).
template <int Dh, class T>
__device__ __forceinline__ void product_abt(float (&acc)[8][4], const uint32_t (&a)[Dh / 16][4], const T *X, int lane) {
  constexpr int ld = MmaGradSmem<Dh>::ld;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const int m = lane >> 3, r = lane & 7;
#pragma unroll
  for (int nt = 0; nt < 8; nt += 2) {
#pragma unroll
    for (int kk = 0; kk < Dh / 16; ++kk) {
      uint32_t bf[4];
      mma::ldsm_x4(bf, X + (nt * 8 + r + (m >> 1) * 8) * ld + kk * 16 + (m & 1) * 8);
      mma::mma16816<T>(acc[nt], a[kk], bf[0], bf[1]);
      mma::mma16816<T>(acc[nt + 1], a[kk], bf[2], bf[3]);
    }
  }
}

/// acc[16, Dh] += P[16, 64] X[64, Dh]: P as fp32 accumulators (rounded to T here), X a shared [64, Dh]
/// tile read by ldmatrix.trans.
template <int Dh, class T>
__device__ __forceinline__ void product_ab(float (&acc)[Dh / 8][4], const float (&p)[8][4], const T *X, int lane) {
  constexpr int ld = MmaGradSmem<Dh>::ld;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t pa[4];
    pa[0] = mma::pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    pa[1] = mma::pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    pa[2] = mma::pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    pa[3] = mma::pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int nd = 0; nd < Dh / 8; nd += 2) {
      uint32_t bf[4];
      mma::ldsm_x4_t(bf, X + (kk * 16 + (lane & 15)) * ld + nd * 8 + (lane >> 4) * 8);
      mma::mma16816<T>(acc[nd], pa, bf[0], bf[1]);
      mma::mma16816<T>(acc[nd + 1], pa, bf[2], bf[3]);
    }
  }
}

/// Stores a warp's [16, Dh] accumulator (rows row0 + g and row0 + g + 8) times `mul` as T rows of a
/// [*, Dh] array, skipping rows at or past `valid`.
template <int Dh, class T>
__device__ __forceinline__ void store_rows(T *dst, const float (&acc)[Dh / 8][4], int row0, int valid, float mul, int g,
                                           int t) {
  const int r0 = row0 + g, r1 = r0 + 8;
#pragma unroll
  for (int nd = 0; nd < Dh / 8; ++nd) {
    const int c = nd * 8 + 2 * t;
    if (r0 < valid)
      *reinterpret_cast<uint32_t *>(dst + static_cast<int64_t>(r0) * Dh + c) = mma::pack2<T>(acc[nd][0] * mul, acc[nd][1] * mul);
    if (r1 < valid)
      *reinterpret_cast<uint32_t *>(dst + static_cast<int64_t>(r1) * Dh + c) = mma::pack2<T>(acc[nd][2] * mul, acc[nd][3] * mul);
  }
}

template <class T>
__global__ void __launch_bounds__(kMmaWarps * 32) dkdv_mma_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                                   const T *__restrict__ v, const T *__restrict__ dout,
                                                                   const float *__restrict__ lse,
                                                                   const float *__restrict__ D, T *__restrict__ dk,
                                                                   T *__restrict__ dv, GradDims d) {
  constexpr int Dh = kMmaDh, ND = Dh / 8, threads = kMmaWarps * 32;
  using L = MmaGradSmem<Dh>;
  extern __shared__ __align__(16) unsigned char smem[];
  T *Ks = reinterpret_cast<T *>(smem), *Vs = reinterpret_cast<T *>(smem + L::tile);
  auto Qb = [&](int i) { return reinterpret_cast<T *>(smem + (2 + 2 * i) * L::tile); };
  auto dOb = [&](int i) { return reinterpret_cast<T *>(smem + (3 + 2 * i) * L::tile); };
  // Per buffer: 64 lse values (times log2 e) and then 64 D values.
  auto Rb = [&](int i) { return reinterpret_cast<float *>(smem + 6 * L::tile) + i * 2 * kMmaTile; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int j0 = blockIdx.x * kMmaTile, bk = blockIdx.y, b = bk / d.Hkv, kh = bk % d.Hkv;
  const int group = d.Hq / d.Hkv, shift = d.T - d.S;
  const int64_t kvbase = static_cast<int64_t>(bk) * d.T * Dh;
  // Under the causal mask key j is seen by queries i >= j - shift: earlier query tiles are skipped.
  const int first = d.causal ? max(0, j0 - shift) / kMmaTile * kMmaTile : 0;
  const int per_head = d.S > first ? (d.S - first + kMmaTile - 1) / kMmaTile : 0;
  const int steps = group * per_head;
  const float sl = d.scale * kLog2e;

  // Step s covers head kh * group + s / per_head, queries first + (s % per_head) * 64 ..
  auto issue = [&](int s, int buf) {
    const int h = kh * group + s / per_head, i0 = first + (s % per_head) * kMmaTile;
    const int64_t row0 = (static_cast<int64_t>(b) * d.Hq + h) * d.S + i0;
    mma::async_tile<kMmaTile, Dh, L::ld, threads>(Qb(buf), q + row0 * Dh, min(kMmaTile, d.S - i0));
    mma::async_tile<kMmaTile, Dh, L::ld, threads>(dOb(buf), dout + row0 * Dh, min(kMmaTile, d.S - i0));
  };
  // The rows' lse and D go through registers: loaded when the step's tiles are issued, stored to shared
  // memory once the step before has been computed (so the loads' latency hides behind it).
  auto load_rows_of = [&](int s) {
    const int h = kh * group + s / per_head, i0 = first + (s % per_head) * kMmaTile;
    const int r = threadIdx.x & (kMmaTile - 1), i = i0 + r;
    const int64_t at = (static_cast<int64_t>(b) * d.Hq + h) * d.S + i;
    if (threadIdx.x < kMmaTile) return i < d.S ? lse[at] * kLog2e : -INFINITY;
    return i < d.S ? D[at] : 0.0f;
  };

  mma::async_tile<kMmaTile, Dh, L::ld, threads>(Ks, k + kvbase + static_cast<int64_t>(j0) * Dh, min(kMmaTile, d.T - j0));
  mma::async_tile<kMmaTile, Dh, L::ld, threads>(Vs, v + kvbase + static_cast<int64_t>(j0) * Dh, min(kMmaTile, d.T - j0));
  if (steps > 0) issue(0, 0);
  mma::cp_async_commit();
  if (steps > 0) Rb(0)[threadIdx.x] = load_rows_of(0);
  mma::cp_async_wait<0>();
  __syncthreads();
  uint32_t ka[Dh / 16][4], va[Dh / 16][4];
  load_a_frags<Dh>(ka, Ks, warp, g, t);
  load_a_frags<Dh>(va, Vs, warp, g, t);

  float dK[ND][4], dV[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) dK[i][0] = dK[i][1] = dK[i][2] = dK[i][3] = dV[i][0] = dV[i][1] = dV[i][2] = dV[i][3] = 0.0f;
  const int jr0 = j0 + warp * 16 + g, jr1 = jr0 + 8;  // this thread's two key rows

  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1;
    float next_row = 0.0f;
    if (s + 1 < steps) {
      issue(s + 1, cur ^ 1);
      next_row = load_rows_of(s + 1);
    }
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    __syncthreads();
    const int h = kh * group + s / per_head, i0 = first + (s % per_head) * kMmaTile;
    const T *Qs = Qb(cur), *dOs = dOb(cur);
    const float *l2 = Rb(cur), *Dr = Rb(cur) + kMmaTile;

    float sp[8][4], dp[8][4];  // S^T then P^T; dP^T then dS^T: rows are keys, columns queries
    product_abt<Dh>(sp, ka, Qs, lane);
    product_abt<Dh>(dp, va, dOs, lane);
    // Whole-tile visibility: every key of the warp sees every query of the tile (no per-element test).
    const bool full = (!d.causal || jr0 - g + 15 <= i0 + shift) && i0 + kMmaTile <= d.S && j0 + warp * 16 + 16 <= d.T &&
                      !d.mask;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = nt * 8 + 2 * t + (e & 1), i = i0 + c, j = e < 2 ? jr0 : jr1;
        const float lc = l2[c];
        float x = sp[nt][e] * sl;
        bool vis = full || (i < d.S && j < d.T && (!d.causal || j <= i + shift));
        vis = vis && lc != -INFINITY;
        if (!full && vis && d.mask)
          x += detail::load_f(d.mask, d.mask_dtype,
                              b * d.mst[0] + h * d.mst[1] + static_cast<int64_t>(i) * d.mst[2] +
                                  static_cast<int64_t>(j) * d.mst[3]) *
               kLog2e;
        const float p = vis ? exp2f(x - lc) : 0.0f;
        sp[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - Dr[c]);
      }
    product_ab<Dh>(dV, sp, dOs, lane);  // dV += P^T dO
    product_ab<Dh>(dK, dp, Qs, lane);   // dK += dS^T Q
    if (s + 1 < steps) Rb(cur ^ 1)[threadIdx.x] = next_row;
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  mma::cp_async_wait<0>();
  store_rows<Dh>(dk + kvbase, dK, j0 + warp * 16, d.T, d.scale, g, t);
  store_rows<Dh>(dv + kvbase, dV, j0 + warp * 16, d.T, 1.0f, g, t);
}

template <class T>
__global__ void __launch_bounds__(kMmaWarps * 32) dq_mma_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                                 const T *__restrict__ v, const T *__restrict__ dout,
                                                                 const float *__restrict__ lse,
                                                                 const float *__restrict__ D, T *__restrict__ dq,
                                                                 GradDims d) {
  constexpr int Dh = kMmaDh, ND = Dh / 8, threads = kMmaWarps * 32;
  using L = MmaGradSmem<Dh>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto Kb = [&](int i) { return reinterpret_cast<T *>(smem + 2 * i * L::tile); };
  auto Vb = [&](int i) { return reinterpret_cast<T *>(smem + (2 * i + 1) * L::tile); };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int i0 = blockIdx.x * kMmaTile, bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv), shift = d.T - d.S;
  const int64_t qbase = static_cast<int64_t>(bh) * d.S * Dh;
  const T *kp = k + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  const T *vp = v + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  // Under the causal mask the tile's last query sees keys up to i0 + 63 + shift.
  const int end = d.causal ? min(d.T, i0 + kMmaTile + shift) : d.T;
  const int ntiles = (end + kMmaTile - 1) / kMmaTile;

  // Q and dO through buffer 1 (free until the second key tile), key tile 0 into buffer 0.
  mma::async_tile<kMmaTile, Dh, L::ld, threads>(Kb(1), q + qbase + static_cast<int64_t>(i0) * Dh, min(kMmaTile, d.S - i0));
  mma::async_tile<kMmaTile, Dh, L::ld, threads>(Vb(1), dout + qbase + static_cast<int64_t>(i0) * Dh, min(kMmaTile, d.S - i0));
  mma::cp_async_commit();
  if (ntiles > 0) {
    mma::async_tile<kMmaTile, Dh, L::ld, threads>(Kb(0), kp, min(kMmaTile, d.T));
    mma::async_tile<kMmaTile, Dh, L::ld, threads>(Vb(0), vp, min(kMmaTile, d.T));
  }
  mma::cp_async_commit();
  const int ir0 = i0 + warp * 16 + g, ir1 = ir0 + 8;  // this thread's two query rows
  const float l0 = ir0 < d.S ? lse[static_cast<int64_t>(bh) * d.S + ir0] * kLog2e : -INFINITY;
  const float l1 = ir1 < d.S ? lse[static_cast<int64_t>(bh) * d.S + ir1] * kLog2e : -INFINITY;
  const float D0 = ir0 < d.S ? D[static_cast<int64_t>(bh) * d.S + ir0] : 0.0f;
  const float D1 = ir1 < d.S ? D[static_cast<int64_t>(bh) * d.S + ir1] : 0.0f;
  mma::cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[Dh / 16][4], doa[Dh / 16][4];
  load_a_frags<Dh>(qa, Kb(1), warp, g, t);
  load_a_frags<Dh>(doa, Vb(1), warp, g, t);
  __syncthreads();  // Q and dO are in registers: buffer 1 may be overwritten

  float dQ[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) dQ[i][0] = dQ[i][1] = dQ[i][2] = dQ[i][3] = 0.0f;
  const float sl = d.scale * kLog2e;
  for (int it = 0; it < ntiles; ++it) {
    const int j0 = it * kMmaTile, cur = it & 1;
    if (it + 1 < ntiles) {
      const int n0 = j0 + kMmaTile;
      mma::async_tile<kMmaTile, Dh, L::ld, threads>(Kb(cur ^ 1), kp + static_cast<int64_t>(n0) * Dh, min(kMmaTile, d.T - n0));
      mma::async_tile<kMmaTile, Dh, L::ld, threads>(Vb(cur ^ 1), vp + static_cast<int64_t>(n0) * Dh, min(kMmaTile, d.T - n0));
    }
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    __syncthreads();
    const T *Ks = Kb(cur), *Vs = Vb(cur);
    float sp[8][4], dp[8][4];  // S then P; dP then dS: rows are queries, columns keys
    product_abt<Dh>(sp, qa, Ks, lane);
    product_abt<Dh>(dp, doa, Vs, lane);
    const bool full = (!d.causal || j0 + kMmaTile - 1 <= i0 + warp * 16 + shift) && j0 + kMmaTile <= d.T &&
                      i0 + warp * 16 + 16 <= d.S && !d.mask;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), i = e < 2 ? ir0 : ir1;
        const float lr = e < 2 ? l0 : l1;
        float x = sp[nt][e] * sl;
        bool vis = full || (i < d.S && j < d.T && (!d.causal || j <= i + shift));
        vis = vis && lr != -INFINITY;
        if (!full && vis && d.mask)
          x += detail::load_f(d.mask, d.mask_dtype,
                              b * d.mst[0] + h * d.mst[1] + static_cast<int64_t>(i) * d.mst[2] +
                                  static_cast<int64_t>(j) * d.mst[3]) *
               kLog2e;
        const float p = vis ? exp2f(x - lr) : 0.0f;
        dp[nt][e] = p * (dp[nt][e] - (e < 2 ? D0 : D1));
      }
    product_ab<Dh>(dQ, dp, Ks, lane);  // dQ += dS K
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  mma::cp_async_wait<0>();
  store_rows<Dh>(dq + qbase, dQ, i0 + warp * 16, d.S, d.scale, g, t);
}

}  // namespace

// --- tier 2 ---------------------------------------------------------------------------------------------------
namespace launch {

template <class T>
cudaError_t attention_grad(const T *q, const T *k, const T *v, const T *out, const T *dout, const float *lse, T *dq,
                           T *dk, T *dv, float *D, const GradDims &d, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(d.B) * d.Hq * d.S;
  if (rows > 0)
    delta_kernel<T><<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(out, dout, D, rows,
                                                                                                       d.Dh);
  const size_t smem = grad_smem(d.Dh);
  // The opt-in limit is a host-side attribute of each function; raising it is not a stream operation.
  static const int most = static_cast<int>(grad_smem(256));
  static cudaError_t a1 = cudaFuncSetAttribute(dkdv_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  static cudaError_t a2 = cudaFuncSetAttribute(dq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (a1 != cudaSuccess) return a1;
  if (a2 != cudaSuccess) return a2;
  if (d.T > 0)
    dkdv_kernel<T><<<dim3((d.T + kTile - 1) / kTile, d.B * d.Hkv), kThreads, smem, s>>>(q, k, v, dout, lse, D, dk, dv, d);
  if (d.S > 0)
    dq_kernel<T><<<dim3((d.S + kTile - 1) / kTile, d.B * d.Hq), kThreads, smem, s>>>(q, k, v, dout, lse, D, dq, d);
  return detail::launched();
}

template <class T, int Dh>
cudaError_t attention_grad_tc(const T *q, const T *k, const T *v, const T *out, const T *dout, const float *lse, T *dq,
                              T *dk, T *dv, float *D, const GradDims &d, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(d.B) * d.Hq * d.S;
  if (rows > 0)
    delta_kernel<T><<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(out, dout, D, rows,
                                                                                                       d.Dh);
  const size_t smem = TcSmem<Dh>::bytes;
  static cudaError_t a1 = cudaFuncSetAttribute(dkdv_tc_kernel<T, Dh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
  static cudaError_t a2 = cudaFuncSetAttribute(dq_tc_kernel<T, Dh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
  if (a1 != cudaSuccess) return a1;
  if (a2 != cudaSuccess) return a2;
  if (d.T > 0)
    dkdv_tc_kernel<T, Dh><<<dim3((d.T + kTc - 1) / kTc, d.B * d.Hkv), kTcWarps * 32, smem, s>>>(q, k, v, dout, lse, D, dk,
                                                                                                dv, d);
  if (d.S > 0)
    dq_tc_kernel<T, Dh><<<dim3((d.S + kTc - 1) / kTc, d.B * d.Hq), kTcWarps * 32, smem, s>>>(q, k, v, dout, lse, D, dq, d);
  return detail::launched();
}

template <class T>
cudaError_t attention_grad_mma(const T *q, const T *k, const T *v, const T *out, const T *dout, const float *lse, T *dq,
                               T *dk, T *dv, float *D, const GradDims &d, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(d.B) * d.Hq * d.S;
  if (rows > 0)
    delta_kernel<T><<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(out, dout, D, rows,
                                                                                                       d.Dh);
  using L = MmaGradSmem<kMmaDh>;
  static cudaError_t a1 = cudaFuncSetAttribute(dkdv_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::dkdv));
  static cudaError_t a2 = cudaFuncSetAttribute(dq_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::dq));
  if (a1 != cudaSuccess) return a1;
  if (a2 != cudaSuccess) return a2;
  if (d.T > 0)
    dkdv_mma_kernel<T><<<dim3((d.T + kMmaTile - 1) / kMmaTile, d.B * d.Hkv), kMmaWarps * 32, L::dkdv, s>>>(
        q, k, v, dout, lse, D, dk, dv, d);
  if (d.S > 0)
    dq_mma_kernel<T><<<dim3((d.S + kMmaTile - 1) / kMmaTile, d.B * d.Hq), kMmaWarps * 32, L::dq, s>>>(q, k, v, dout, lse, D,
                                                                                                     dq, d);
  return detail::launched();
}

}  // namespace launch

// --- tier 3 ---------------------------------------------------------------------------------------------------
size_t attention_grad_workspace(const In &q) {
  return q.shape.rank == 4 ? static_cast<size_t>(workspace::attention_grad(q.shape.d[0], q.shape.d[1], q.shape.d[2])) : 0;
}

namespace {

/// The backward kernel and how it was chosen (the forward's Choice in attention.cu): strict for a plan's.
GpuStatus attention_grad_impl(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                              const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                              void *workspace, const AttentionKernel *kernel, bool strict, cudaStream_t s);

}  // namespace

GpuStatus attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                         const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                         void *workspace, cudaStream_t s) {
  // ZK_CUDA_ATTENTION_GRAD=exact selects the fp32 path and =wmma the first tensor-core path, for direct
  // callers (the GPU tests: cross-checks and bisection); plans name their kernel.
  const char *path = std::getenv("ZK_CUDA_ATTENTION_GRAD");
  const AttentionKernel *kernel = path && *path ? attention_grad_kernel(path) : nullptr;
  return attention_grad_impl(q, k, v, out, dout, lse, mask, dq, dk, dv, causal, scale, workspace, kernel, false, s);
}

GpuStatus attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                         const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                         void *workspace, int kernel, cudaStream_t s) {
  const AttentionKernel *chosen = nullptr;
  if (kernel != 0) {
    chosen = attention_grad_kernel(kernel);
    if (!chosen) return kernel_failure((std::string("attention_grad: the plan names unknown kernel code ") + std::to_string(kernel)).c_str());
  }
  return attention_grad_impl(q, k, v, out, dout, lse, mask, dq, dk, dv, causal, scale, workspace, chosen, kernel != 0,
                             s);
}

namespace {

GpuStatus attention_grad_impl(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                              const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                              void *workspace, const AttentionKernel *kernel, bool strict, cudaStream_t s) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape.rank != 4)
    return kernel_failure("attention_grad: q, k, v must be rank 4");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], T = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh) return kernel_failure("attention_grad: k must be [B, Hkv, T, Dh]");
  if (v.shape != k.shape) return kernel_failure("attention_grad: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return kernel_failure("attention_grad: Hq must be a multiple of Hkv");
  if (out.shape != q.shape || dout.shape != q.shape || dq.shape != q.shape)
    return kernel_failure("attention_grad: out, dout and dq must have q's shape");
  if (dk.shape != k.shape || dv.shape != k.shape) return kernel_failure("attention_grad: dk and dv must have k's shape");
  if (lse.dtype != DType::f32 || lse.shape != Dims{B, Hq, S}) return kernel_failure("attention_grad: lse must be f32 [B, Hq, S]");
  if (!is_float(q.dtype))  return kernel_failure("attention_grad: operands must be float");
  for (DType t : {k.dtype, v.dtype, out.dtype, dout.dtype, dq.dtype, dk.dtype, dv.dtype})
    if (t != q.dtype) return kernel_failure("attention_grad: q, k, v, out, dout, dq, dk and dv must share one dtype");
  if (causal && S > T) return kernel_failure("attention_grad: causal needs S <= T");
  if (Dh < 1 || Dh > 256) return kernel_failure("attention_grad: head dim must be in [1, 256]");
  if (B * Hq > 65535 || S > (1LL << 30) || T > (1LL << 30)) return kernel_failure("attention_grad: sizes too large");
  if (!workspace && B * Hq * S > 0) return kernel_failure("attention_grad: workspace missing");
  GradDims d{static_cast<int>(B), static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(S), static_cast<int>(T),
             static_cast<int>(Dh), causal ? 1 : 0, scale, nullptr, DType::f32, {0, 0, 0, 0}};
  if (mask.data) {
    const Dims full{B, Hq, S, T};
    if (!broadcastable(mask.shape, full)) return kernel_failure("attention_grad: mask does not broadcast to [B, Hq, S, T]");
    if (!is_float(mask.dtype)) return kernel_failure("attention_grad: mask must be float");
    int64_t st[kMaxRank];
    detail::broadcast_strides(mask.shape, full, st);
    d.mask = mask.data;
    d.mask_dtype = mask.dtype;
    for (int i = 0; i < 4; ++i) d.mst[i] = st[i];
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(q.data) | reinterpret_cast<uintptr_t>(k.data) |
                        reinterpret_cast<uintptr_t>(v.data) | reinterpret_cast<uintptr_t>(dout.data)) % 16 == 0;
  // The kernel: the plan's, or the default by dtype and head dim (zk/attention_kernels.h). The tensor-core
  // kernels need 16-bit floats, head dim 64 or 128 (the register kernels 64) and 16-byte aligned operands.
  const bool half = q.dtype == DType::bf16 || q.dtype == DType::f16;
  const bool tc_shape = half && (Dh == 64 || Dh == 128);
  if (!kernel) kernel = default_attention_grad_kernel(Dh, tc_shape);
  bool runs = kernel->family == AttnFamily::rows ||
              (tc_shape && aligned && (kernel->family != AttnFamily::mma || Dh == kMmaDh));
  if (!runs) {
    if (strict)
      return kernel_failure((std::string("attention_grad: the plan's kernel '") + kernel->name + "' cannot take " +
                             dtype_name(q.dtype) + " at head dim " + std::to_string(Dh) +
                             (tc_shape ? " (unaligned operands, or the register kernels' head dim 64 only)" : "") +
                             ": recompile the plan with this release's zplan")
                                .c_str());
    kernel = tc_shape && aligned ? attention_grad_kernel("wmma") : attention_grad_kernel("exact");
  }
  const bool tc = kernel->family != AttnFamily::rows;
  const bool mma_path = kernel->family == AttnFamily::mma;
  auto run_tc = [&](auto *tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    auto *qp = static_cast<const E *>(q.data), *kp = static_cast<const E *>(k.data), *vp = static_cast<const E *>(v.data);
    auto *op = static_cast<const E *>(out.data), *dop = static_cast<const E *>(dout.data);
    auto *lp = static_cast<const float *>(lse.data);
    auto *dqp = static_cast<E *>(dq.data), *dkp = static_cast<E *>(dk.data), *dvp = static_cast<E *>(dv.data);
    auto *ws = static_cast<float *>(workspace);
    if (mma_path) return launch::attention_grad_mma<E>(qp, kp, vp, op, dop, lp, dqp, dkp, dvp, ws, d, s);
    return Dh == 64 ? launch::attention_grad_tc<E, 64>(qp, kp, vp, op, dop, lp, dqp, dkp, dvp, ws, d, s)
                    : launch::attention_grad_tc<E, 128>(qp, kp, vp, op, dop, lp, dqp, dkp, dvp, ws, d, s);
  };
  if (tc) {
    if (q.dtype == DType::bf16) ZK_CUDA_TRY(run_tc(static_cast<__nv_bfloat16 *>(nullptr)));
    else ZK_CUDA_TRY(run_tc(static_cast<__half *>(nullptr)));
    return {};
  }
  auto run = [&](auto *tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    return launch::attention_grad<E>(static_cast<const E *>(q.data), static_cast<const E *>(k.data),
                                     static_cast<const E *>(v.data), static_cast<const E *>(out.data),
                                     static_cast<const E *>(dout.data), static_cast<const float *>(lse.data),
                                     static_cast<E *>(dq.data), static_cast<E *>(dk.data), static_cast<E *>(dv.data),
                                     static_cast<float *>(workspace), d, s);
  };
  switch (q.dtype) {
    case DType::f32: ZK_CUDA_TRY(run(static_cast<float *>(nullptr))); break;
    case DType::bf16: ZK_CUDA_TRY(run(static_cast<__nv_bfloat16 *>(nullptr))); break;
    default: ZK_CUDA_TRY(run(static_cast<__half *>(nullptr))); break;
  }
  return {};
}

}  // namespace

}  // namespace cuda
}  // namespace zk
