// Internal to the forward attention kernels: the launch descriptors that attention.cu (the sm_90 kernels and
// the dispatch) and attention_sm90a.cu (the wgmma kernels, built for sm_90a alone) share, and the per-warp
// pieces of the online softmax that the register kernel (fa) and the wgmma kernels have in common.
#ifndef ZK_CUDA_ATTENTION_CUH
#define ZK_CUDA_ATTENTION_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common.cuh"
#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// The additive mask as a broadcast view: element (b, h, i, j) at b*st[0] + h*st[1] + i*st[2] + j*st[3].
struct MaskView {
  const void *data = nullptr;
  DType dtype = DType::f32;
  int64_t st[4] = {};
};

/// Element strides of an operand's batch, head and position dims (its head dim is contiguous).
struct Strides {
  int64_t b = 0, h = 0, s = 0;
};

struct AttnDims {
  int B, Hq, Hkv, S, T;
  int causal;
  float scale;
  float *lse = nullptr;  // optional [B, Hq, S]: the natural log-sum-exp of each row's scaled, masked scores
  Strides q, k, v, o;
  // Scheduling of the first register path: 1 = each block's query rows in launch order and every tile masked
  // element by element (the kernel before longest-first scheduling and unmasked interior tiles; kept so
  // that the two can be timed against each other, ZK_CUDA_ATTENTION_PLAIN=1).
  int plain = 0;
};

/// The wgmma kernels (attention_sm90a.cu): one or two warpgroups of 64 query rows per block (`groups` 1 or 2; 3:
/// two, held to 128 registers; 4: two in ping-pong), or (`groups` 0) one warpgroup whose products overlap its
/// softmax, or (`groups` 5) a producer warpgroup issuing tensor copies for two consumer warpgroups (wg3);
/// head dim 64 or 128, bf16 or f16 (`bf16`). Their operands and rules are the register kernels'
/// (16-byte aligned rows and strides).
/// Fails with cudaErrorNoKernelImageForDevice off sm_90 (it is built for sm_90a alone).
cudaError_t wgmma_forward(const void *q, const void *k, const void *v, void *out, const AttnDims &d,
                          const MaskView &mask, int head_dim, bool bf16, int groups, cudaStream_t s);

// --- per-warp pieces of the online softmax -------------------------------------------------------------------
// A warp owns 16 query rows. Its scores, probabilities and output accumulators are in the accumulator layout
// of mma.sync m16n8 (and of wgmma m64nN, which is that layout per warp, repeated along N): with g = lane / 4
// and t = lane % 4, element 4 nt + e of a row of 8-column tiles is column 8 nt + 2t + (e & 1) of row g (e < 2)
// or g + 8 (e >= 2).

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Two floats rounded to the 16-bit type T and packed low then high, with one conversion instruction.
template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
}

/// The online softmax of one tile of 2 N keys (first key k0) for a warp's 16 rows (first query position qw):
/// scales and masks the scores in s, turns them into probabilities against the new running max, updates m
/// (base-2 units) and the per-thread partial sums l, and returns in alpha the factors the output rows must be
/// rescaled by. Element masks only where something may be masked (an additive mask, the end of the keys, the
/// causal diagonal, or a scale that is not positive); elsewhere the max is taken over the raw scores and the
/// scale folded into one multiply-add per score.
template <int N>
__device__ __forceinline__ void softmax_tile(float (&s)[N], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             const AttnDims &d, const MaskView &mask, int k0, int qw, int g, int t,
                                             int b, int h, float sl) {
  constexpr int NT = N / 4, Bc = 8 * NT;
  const int shift = d.T - d.S;
  const bool masked = !(sl > 0.0f) || mask.data || k0 + Bc > d.T || (d.causal && k0 + Bc - 1 > qw + shift);
  float mx[2];
  float mul;  // what turns the values in s into base-2 scaled scores
  if (masked) {
    mx[0] = mx[1] = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = k0 + nt * 8 + 2 * t + (e & 1);
        const int qi = qw + g + (e >> 1) * 8;
        float val = s[4 * nt + e] * sl;
        const bool vis = j < d.T && (!d.causal || j <= qi + shift);
        if (vis && mask.data && qi < d.S)
          val += detail::load_f(mask.data, mask.dtype,
                                b * mask.st[0] + h * mask.st[1] + static_cast<int64_t>(qi) * mask.st[2] +
                                    static_cast<int64_t>(j) * mask.st[3]) *
                 kLog2e;
        val = vis ? val : -INFINITY;
        s[4 * nt + e] = val;
        mx[e >> 1] = fmaxf(mx[e >> 1], val);
      }
    mul = 1.0f;
  } else {
    // The scale is positive: the max of the raw scores is the max of the scaled ones.
    mx[0] = fmaxf(s[0], s[1]);
    mx[1] = fmaxf(s[2], s[3]);
#pragma unroll
    for (int nt = 1; nt < NT; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[4 * nt], s[4 * nt + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    mul = sl;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float x = mx[r];
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    const float nm = fmaxf(m[r], x * mul);
    alpha[r] = nm == -INFINITY ? 1.0f : ex2(m[r] - nm);  // a row with nothing visible yet stays empty
    m[r] = nm;
    const float base = nm == -INFINITY ? 0.0f : nm;
    float ps = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // 2^(-inf) is 0: masked scores and an empty row (base 0) give zeros without a test.
      s[4 * nt + 2 * r] = ex2(fmaf(s[4 * nt + 2 * r], mul, -base));
      s[4 * nt + 2 * r + 1] = ex2(fmaf(s[4 * nt + 2 * r + 1], mul, -base));
      ps += s[4 * nt + 2 * r] + s[4 * nt + 2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + ps;  // per-thread partial sums; the quad is summed once at the end
  }
}

/// The output rows times the factors of softmax_tile (rows g and g + 8).
template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    o[i] *= alpha[0];
    o[i + 1] *= alpha[0];
    o[i + 2] *= alpha[1];
    o[i + 3] *= alpha[1];
  }
}

/// P's A fragments (mma.sync and register-A wgmma) for KS steps of 16 keys: score tiles 2kk and 2kk + 1 are
/// keys 16kk .. 16kk + 15.
template <class T, int KS>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[KS][4], const float (&s)[8 * KS]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    pa[kk][0] = pack<T>(s[8 * kk], s[8 * kk + 1]);
    pa[kk][1] = pack<T>(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack<T>(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

/// The end of row g + 8r of a warp whose first query position is qw: sums the quad's partial sums of l,
/// writes the row's lse where asked (m is in base-2 units, the lse natural) and returns the factor that
/// normalises the row (0 for a row with nothing visible).
__device__ __forceinline__ float finish_row(float m, float l, const AttnDims &d, int bh, int qi, int t) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (d.lse && t == 0 && qi < d.S)
    d.lse[static_cast<int64_t>(bh) * d.S + qi] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  return l > 0.0f ? 1.0f / l : 0.0f;
}

/// Normalises a warp's 16 output rows, writes their lse, and stores them through the warp's own 16 staging
/// rows (st, row stride ld elements, padded against bank conflicts) as 16-byte stores along each row.
template <class T, int Dh, int ld>
__device__ __forceinline__ void write_rows(const float (&o)[Dh / 2], const float (&m)[2], const float (&l)[2], T *st,
                                           const AttnDims &d, int bh, int b, int h, int qw, int g, int t, int lane,
                                           T *out) {
  constexpr int ND = Dh / 8;
  T *op = out + b * d.o.b + h * d.o.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = finish_row(m[r], l[r], d, bh, qw + g + 8 * r, t);
    T *row = st + (g + 8 * r) * ld + 2 * t;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<uint32_t *>(row + nd * 8) = pack<T>(o[4 * nd + 2 * r] * inv, o[4 * nd + 2 * r + 1] * inv);
  }
  __syncwarp();
  constexpr int per_row = Dh / 8;
#pragma unroll
  for (int e = lane; e < 16 * per_row; e += 32) {
    const int r = e / per_row, c = (e % per_row) * 8, qi = qw + r;
    if (qi < d.S)
      *reinterpret_cast<uint4 *>(op + static_cast<int64_t>(qi) * d.o.s + c) =
          *reinterpret_cast<const uint4 *>(st + r * ld + c);
  }
}

}  // namespace attn
}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_ATTENTION_CUH
