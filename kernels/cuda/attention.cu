// Fused attention. Two paths:
//  - flash_kernel (bf16/f16, head dim 64 or 128): flash-attention style. A block of 4 warps owns 64 query
//    rows of one (batch, head); K and V stream through shared memory in tiles of 64 keys; each warp computes
//    its 16x64 score tile on tensor cores (WMMA, fp32 accumulation), updates its rows' running max and sum
//    (online softmax, base-2 exponentials), rescales its fp32 output rows in shared memory and adds P.V on
//    tensor cores. Causal tiles past the diagonal are skipped. Scores are never written to device memory.
//  - row_kernel (every other case, fp32 included): one block per query row, scores in shared memory, a
//    plain two-pass softmax; exact fp32, used as the reference-grade path.
// GQA: query head h reads kv head h / (Hq / Hkv). A fully masked row yields zeros, as the reference does.
#include <mma.h>

#include <type_traits>

#include "common.cuh"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
namespace wmma = nvcuda::wmma;

constexpr float kLog2e = 1.4426950408889634f;

/// The additive mask as a broadcast view: element (b, h, i, j) at b*st[0] + h*st[1] + i*st[2] + j*st[3].
struct MaskView {
  const void *data = nullptr;
  DType dtype = DType::f32;
  int64_t st[4] = {};
};

struct AttnDims {
  int B, Hq, Hkv, S, T;
  int causal;
  float scale;
};

// --- tier 1: tensor-core path ---------------------------------------------------------------------------------
constexpr int kBr = 64, kBc = 64, kWarps = 4;

template <int Dh>
struct FlashSmem {
  static constexpr int ld = Dh + 8;      // 16-bit rows padded by 16 bytes against bank conflicts
  static constexpr int lds = kBc + 4;    // fp32 score rows
  static constexpr int ldp = kBc + 8;    // 16-bit probability rows
  static constexpr int ldo = Dh + 4;     // fp32 output rows
  static constexpr size_t q = size_t(kBr) * ld * 2, k = size_t(kBc) * ld * 2, v = k;
  static constexpr size_t s = size_t(kWarps) * 16 * lds * 4, p = size_t(kWarps) * 16 * ldp * 2;
  static constexpr size_t o = size_t(kWarps) * 16 * ldo * 4;
  static constexpr size_t bytes = q + k + v + s + p + o;
};

/// Copies `rows` rows of Dh 16-bit elements (row stride Dh in global memory) into shared memory rows of
/// stride `ld`, 16 bytes per thread per step; rows past `valid` are zero so that they add nothing.
template <int Dh, class T>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int rows, int valid, int ld) {
  constexpr int vec = 8;  // 16 bytes of 16-bit elements
  constexpr int per_row = Dh / vec;
  for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
    const int r = e / per_row, c = (e % per_row) * vec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < valid) val = *reinterpret_cast<const uint4 *>(src + static_cast<int64_t>(r) * Dh + c);
    *reinterpret_cast<uint4 *>(dst + r * ld + c) = val;
  }
}

template <class T, int Dh>
__global__ void __launch_bounds__(kWarps * 32) flash_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                             const T *__restrict__ v, T *__restrict__ out, AttnDims d,
                                                             MaskView mask) {
  using L = FlashSmem<Dh>;
  extern __shared__ __align__(16) unsigned char smem[];
  T *Qs = reinterpret_cast<T *>(smem);
  T *Ks = reinterpret_cast<T *>(smem + L::q);
  T *Vs = reinterpret_cast<T *>(smem + L::q + L::k);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *Ss = reinterpret_cast<float *>(smem + L::q + L::k + L::v) + warp * 16 * L::lds;
  T *Ps = reinterpret_cast<T *>(smem + L::q + L::k + L::v + L::s) + warp * 16 * L::ldp;
  float *Os = reinterpret_cast<float *>(smem + L::q + L::k + L::v + L::s + L::p) + warp * 16 * L::ldo;

  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int q0 = blockIdx.x * kBr;
  const T *qp = q + (static_cast<int64_t>(bh) * d.S + q0) * Dh;
  const T *kp = k + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  const T *vp = v + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;

  load_tile<Dh>(Qs, qp, kBr, min(kBr, d.S - q0), L::ld);
  for (int e = lane; e < 16 * L::ldo; e += 32) Os[e] = 0.0f;
  __syncthreads();

  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qf[Dh / 16];
#pragma unroll
  for (int kk = 0; kk < Dh / 16; ++kk) wmma::load_matrix_sync(qf[kk], Qs + warp * 16 * L::ld + kk * 16, L::ld);

  // Each lane owns half of one of the warp's 16 rows: row lane/2, columns (lane%2)*32 .. +32.
  const int row = lane >> 1, half = lane & 1;
  const int qi = q0 + warp * 16 + row;  // this lane's query position
  const int shift = d.T - d.S;          // causal: query i sees keys j <= i + shift
  float m = -INFINITY, l = 0.0f;
  const float sl = d.scale * kLog2e;

  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + kBr + shift);  // keys past the block's last visible one are skipped
  for (int k0 = 0; k0 < kend; k0 += kBc) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<Dh>(Ks, kp + static_cast<int64_t>(k0) * Dh, kBc, min(kBc, d.T - k0), L::ld);
    load_tile<Dh>(Vs, vp + static_cast<int64_t>(k0) * Dh, kBc, min(kBc, d.T - k0), L::ld);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
#pragma unroll
    for (int nb = 0; nb < kBc / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf;
      wmma::fill_fragment(sf, 0.0f);
#pragma unroll
      for (int kk = 0; kk < Dh / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, Ks + nb * 16 * L::ld + kk * 16, L::ld);
        wmma::mma_sync(sf, qf[kk], kf, sf);
      }
      wmma::store_matrix_sync(Ss + nb * 16, sf, L::lds, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this lane's 32 columns, combined with the partner lane holding the other half.
    float sv[32];
    float tmax = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int j = k0 + half * 32 + c;
      float s = Ss[row * L::lds + half * 32 + c] * sl;
      const bool visible = j < d.T && qi < d.S && (!d.causal || j <= qi + shift);
      if (visible && mask.data)
        s += detail::load_f(mask.data, mask.dtype,
                            b * mask.st[0] + h * mask.st[1] + static_cast<int64_t>(qi) * mask.st[2] +
                                static_cast<int64_t>(j) * mask.st[3]) *
             kLog2e;
      sv[c] = visible ? s : -INFINITY;
      tmax = fmaxf(tmax, sv[c]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float mnew = fmaxf(m, tmax);
    // With nothing visible yet the row stays empty: no exponentials of (-inf) - (-inf).
    const float alpha = mnew == -INFINITY ? 1.0f : exp2f(m - mnew);
    float psum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = mnew == -INFINITY ? 0.0f : exp2f(sv[c] - mnew);
      psum += p;
      Ps[row * L::ldp + half * 32 + c] = from_f32<T>(p);
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l = l * alpha + psum;
    m = mnew;
#pragma unroll 8
    for (int c = 0; c < Dh / 2; ++c) Os[row * L::ldo + half * (Dh / 2) + c] *= alpha;
    __syncwarp();

    // O += P V on tensor cores, accumulating into the rescaled rows.
#pragma unroll
    for (int nb = 0; nb < Dh / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
      wmma::load_matrix_sync(of, Os + nb * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, Ps + kk * 16, L::ldp);
        wmma::load_matrix_sync(vf, Vs + kk * 16 * L::ld + nb * 16, L::ld);
        wmma::mma_sync(of, pf, vf, of);
      }
      wmma::store_matrix_sync(Os + nb * 16, of, L::ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (qi < d.S) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T *op = out + (static_cast<int64_t>(bh) * d.S + qi) * Dh + half * (Dh / 2);
#pragma unroll 8
    for (int c = 0; c < Dh / 2; ++c) op[c] = from_f32<T>(Os[row * L::ldo + half * (Dh / 2) + c] * inv);
  }
}

// --- tier 1: exact path -------------------------------------------------------------------------------------------
template <class T>
__global__ void row_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ out,
                           AttnDims d, int Dh, MaskView mask) {
  extern __shared__ float sh[];
  __shared__ float red[32];
  float *qs = sh;        // [Dh]
  float *sc = sh + Dh;   // [T]
  const int i = blockIdx.x, bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const T *qp = q + (static_cast<int64_t>(bh) * d.S + i) * Dh;
  const T *kp = k + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  const T *vp = v + (static_cast<int64_t>(b) * d.Hkv + kh) * d.T * Dh;
  for (int c = threadIdx.x; c < Dh; c += blockDim.x) qs[c] = to_f32(qp[c]);
  __syncthreads();
  const int shift = d.T - d.S;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < d.T; j += blockDim.x) {
    float s = -INFINITY;
    if (!d.causal || j <= i + shift) {
      float dot = 0.0f;
      for (int c = 0; c < Dh; ++c) dot = fmaf(qs[c], to_f32(kp[static_cast<int64_t>(j) * Dh + c]), dot);
      s = dot * d.scale;
      if (mask.data)
        s += detail::load_f(mask.data, mask.dtype,
                            b * mask.st[0] + h * mask.st[1] + static_cast<int64_t>(i) * mask.st[2] +
                                static_cast<int64_t>(j) * mask.st[3]);
    }
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = detail::block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < d.T; j += blockDim.x) {
    const float p = isfinite(mx) ? expf(sc[j] - mx) : 0.0f;
    sc[j] = p;
    sum += p;
  }
  sum = detail::block_sum(sum, red);  // its barriers also publish sc[] to every thread
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int c = threadIdx.x; c < Dh; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < d.T; ++j) acc = fmaf(sc[j], to_f32(vp[static_cast<int64_t>(j) * Dh + c]), acc);
    out[(static_cast<int64_t>(bh) * d.S + i) * Dh + c] = from_f32<T>(acc * inv);
  }
}

}  // namespace

// --- tier 2 ------------------------------------------------------------------------------------------------------------
namespace launch {

template <class T, int Dh>
cudaError_t flash(const T *q, const T *k, const T *v, T *out, const AttnDims &d, const MaskView &mask, cudaStream_t s) {
  const size_t smem = FlashSmem<Dh>::bytes;
  // Raising the opt-in limit is a host-side attribute of the function; doing it once is enough, and it is
  // not a stream operation, so it is safe during graph capture.
  static cudaError_t attr = cudaFuncSetAttribute(flash_kernel<T, Dh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  dim3 grid((d.S + kBr - 1) / kBr, d.B * d.Hq);
  flash_kernel<T, Dh><<<grid, kWarps * 32, smem, s>>>(q, k, v, out, d, mask);
  return detail::launched();
}

template <class T>
cudaError_t rows(const T *q, const T *k, const T *v, T *out, const AttnDims &d, int Dh, const MaskView &mask,
                 cudaStream_t s) {
  const size_t smem = (static_cast<size_t>(Dh) + d.T) * sizeof(float);
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(row_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  dim3 grid(d.S, d.B * d.Hq);
  row_kernel<T><<<grid, 128, smem, s>>>(q, k, v, out, d, Dh, mask);
  return detail::launched();
}

}  // namespace launch

// --- tier 3 ------------------------------------------------------------------------------------------------------------
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                    cudaStream_t s) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape.rank != 4) return kernel_failure("attention: q, k, v must be rank 4");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], T = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh) return kernel_failure("attention: k must be [B, Hkv, T, Dh]");
  if (v.shape != k.shape) return kernel_failure("attention: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return kernel_failure("attention: Hq must be a multiple of Hkv");
  if (out.shape != q.shape) return kernel_failure("attention: output shape differs from q's");
  if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype || out.dtype != q.dtype)
    return kernel_failure("attention: q, k, v and out must share one float dtype");
  if (causal && S > T) return kernel_failure("attention: causal needs S <= T");
  if (B * Hq > 65535 * 1024LL || S > (1LL << 30) || T > (1LL << 30)) return kernel_failure("attention: sizes too large");
  MaskView mv;
  if (mask.data) {
    const Dims full{B, Hq, S, T};
    if (!broadcastable(mask.shape, full)) return kernel_failure("attention: mask does not broadcast to [B, Hq, S, T]");
    if (!is_float(mask.dtype)) return kernel_failure("attention: mask must be float");
    int64_t st[kMaxRank];
    detail::broadcast_strides(mask.shape, full, st);
    mv.data = mask.data;
    mv.dtype = mask.dtype;
    for (int i = 0; i < 4; ++i) mv.st[i] = st[i];
  }
  if (out.shape.numel() == 0) return {};
  AttnDims d{static_cast<int>(B), static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(S), static_cast<int>(T),
             causal ? 1 : 0, scale};
  const bool aligned = (reinterpret_cast<uintptr_t>(q.data) | reinterpret_cast<uintptr_t>(k.data) |
                        reinterpret_cast<uintptr_t>(v.data)) % 16 == 0;
  const bool tc = (q.dtype == DType::bf16 || q.dtype == DType::f16) && (Dh == 64 || Dh == 128) && aligned && T > 0;
  if (tc) {
    if (q.dtype == DType::bf16) {
      using E = __nv_bfloat16;
      auto *qp = static_cast<const E *>(q.data), *kp = static_cast<const E *>(k.data), *vp = static_cast<const E *>(v.data);
      auto *op = static_cast<E *>(out.data);
      ZK_CUDA_TRY((Dh == 64 ? launch::flash<E, 64>(qp, kp, vp, op, d, mv, s) : launch::flash<E, 128>(qp, kp, vp, op, d, mv, s)));
    } else {
      using E = __half;
      auto *qp = static_cast<const E *>(q.data), *kp = static_cast<const E *>(k.data), *vp = static_cast<const E *>(v.data);
      auto *op = static_cast<E *>(out.data);
      ZK_CUDA_TRY((Dh == 64 ? launch::flash<E, 64>(qp, kp, vp, op, d, mv, s) : launch::flash<E, 128>(qp, kp, vp, op, d, mv, s)));
    }
    return {};
  }
  if ((static_cast<size_t>(Dh) + T) * sizeof(float) > 200 * 1024)
    return kernel_failure("attention: the exact path holds a row of T scores in shared memory; T is too long");
  switch (q.dtype) {
    case DType::f32:
      ZK_CUDA_TRY(launch::rows<float>(static_cast<const float *>(q.data), static_cast<const float *>(k.data),
                                      static_cast<const float *>(v.data), static_cast<float *>(out.data), d,
                                      static_cast<int>(Dh), mv, s));
      break;
    case DType::bf16:
      ZK_CUDA_TRY(launch::rows<__nv_bfloat16>(static_cast<const __nv_bfloat16 *>(q.data),
                                              static_cast<const __nv_bfloat16 *>(k.data),
                                              static_cast<const __nv_bfloat16 *>(v.data),
                                              static_cast<__nv_bfloat16 *>(out.data), d, static_cast<int>(Dh), mv, s));
      break;
    default:
      ZK_CUDA_TRY(launch::rows<__half>(static_cast<const __half *>(q.data), static_cast<const __half *>(k.data),
                                       static_cast<const __half *>(v.data), static_cast<__half *>(out.data), d,
                                       static_cast<int>(Dh), mv, s));
      break;
  }
  return {};
}

}  // namespace cuda
}  // namespace zk
