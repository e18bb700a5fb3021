// Flash-style attention backward. Nothing of size S x T is stored: each kernel recomputes its tile of
// scores from q and k and turns them into probabilities with the forward's log-sum-exp, P = exp(s - lse).
// With D_i = dout_i . out_i (the softmax backward's row term, computed once by delta_kernel):
//   dS_ij = P_ij (dout_i . v_j - D_i),  dq_i = scale sum_j dS_ij k_j,
//   dk_j = scale sum_{h in group, i} dS_hij q_hi,  dv_j = sum_{h in group, i} P_hij dout_hi.
// dkdv_kernel owns a tile of keys of one kv head and walks every query of the heads sharing it (GQA), so
// dk and dv are summed inside one block: no atomics, the same result on every run. dq_kernel owns a tile
// of queries and walks the keys. Tiles live in shared memory in fp32; the math is fp32 on CUDA cores
// (a tensor-core version for bf16 is the next step). Causal tiles that see nothing are skipped.
#include <type_traits>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

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

}  // namespace launch

// --- tier 3 ---------------------------------------------------------------------------------------------------
size_t attention_grad_workspace(const In &q) {
  return q.shape.rank == 4 ? static_cast<size_t>(q.shape.d[0] * q.shape.d[1] * q.shape.d[2]) * sizeof(float) : 0;
}

GpuStatus attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                         const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                         void *workspace, cudaStream_t s) {
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

}  // namespace cuda
}  // namespace zk
