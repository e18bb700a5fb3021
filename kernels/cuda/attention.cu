// Fused attention. Which kernel runs is the plan's choice (its attention's kernel code, zplan --cuda-arch and
// --attention-kernel; the names and codes are zk/attention_kernels.h's table); direct callers of the library
// (the GPU tests and benchmarks) pick one by name with ZK_CUDA_ATTENTION. The paths:
//  - fa::fa_kernel (bf16/f16, head dim 64 or 128; fa4x1r / fa4x1, the compiler's default off sm_90): the
//    second FlashAttention-2 kernel on mma.sync, everything per row in registers; see its comment.
//  - the wgmma kernels (attention_sm90a.cu, sm_90a: wg1, wg2, wg2r, wg2pp, wgp, and wg3: a TMA producer
//    warpgroup and two consumer warpgroups): wg2 is the compiler's default for sm_90.
//  - flash_mma_kernel (bf16/f16, head dim 64 or 128; old and the mma* shapes): the first register kernel, the
//    default before fa_kernel.
//  - flash_kernel (bf16/f16, head dim 64 or 128): flash-attention style. A block of 4 warps owns 64 query
//    rows of one (batch, head); K and V stream through shared memory in tiles of 64 keys; each warp computes
//    its 16x64 score tile on tensor cores (WMMA, fp32 accumulation), updates its rows' running max and sum
//    (online softmax, base-2 exponentials), rescales its fp32 output rows in shared memory and adds P.V on
//    tensor cores. Causal tiles past the diagonal are skipped. Scores are never written to device memory.
//  - row_kernel ("rows"; every attention the others cannot take, fp32 included): one block per query row,
//    scores in shared memory, a plain two-pass softmax; exact fp32, used as the reference-grade path.
// GQA: query head h reads kv head h / (Hq / Hkv). A fully masked row yields zeros, as the reference does.
// Every path can also write each row's log-sum-exp (lse), which the backward (attention_grad.cu) recomputes
// the probabilities from.
// Layouts: every path addresses q, k, v and out through (batch, head, position) strides with the head dim
// contiguous, so each operand may be head-major [B, H, S, Dh] or sequence-major [B, S, H, Dh] (the
// `seq_major` bits of zk/cpu_kernels.h). Sequence-major is what the projections produce and the output
// projection reads: with it the plan needs no head split / merge transposes around the attention.
#include <mma.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "attention.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "zk/attention_kernels.h"
#include "zk/cuda_train_kernels.h"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
namespace wmma = nvcuda::wmma;

using attn::AttnDims;
using attn::kLn2;
using attn::kLog2e;
using attn::MaskView;
using attn::Strides;

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

/// Copies `rows` rows of Dh 16-bit elements (row stride `stride` elements in global memory) into shared
/// memory rows of stride `ld`, 16 bytes per thread per step; rows past `valid` are zero so that they add nothing.
template <int Dh, class T>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int rows, int valid, int ld, int64_t stride) {
  constexpr int vec = 8;  // 16 bytes of 16-bit elements
  constexpr int per_row = Dh / vec;
  for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
    const int r = e / per_row, c = (e % per_row) * vec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < valid) val = *reinterpret_cast<const uint4 *>(src + static_cast<int64_t>(r) * stride + c);
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
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(q0) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;

  load_tile<Dh>(Qs, qp, kBr, min(kBr, d.S - q0), L::ld, d.q.s);
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
    load_tile<Dh>(Ks, kp + static_cast<int64_t>(k0) * d.k.s, kBc, min(kBc, d.T - k0), L::ld, d.k.s);
    load_tile<Dh>(Vs, vp + static_cast<int64_t>(k0) * d.v.s, kBc, min(kBc, d.T - k0), L::ld, d.v.s);
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
    // m is in base-2 units (scores times log2 e); the lse is natural.
    if (d.lse && half == 0) d.lse[static_cast<int64_t>(bh) * d.S + qi] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
    T *op = out + b * d.o.b + h * d.o.h + static_cast<int64_t>(qi) * d.o.s + half * (Dh / 2);
#pragma unroll 8
    for (int c = 0; c < Dh / 2; ++c) op[c] = from_f32<T>(Os[row * L::ldo + half * (Dh / 2) + c] * inv);
  }
}

// --- tier 1: the first register-level tensor-core path (kernel "old") --------------------------------
// FlashAttention-2 layout on mma.sync.m16n8k16: each warp keeps its 16 query rows' Q fragments, its scores,
// probabilities and output accumulators in registers (fragment layouts as the PTX ISA defines them:
// groupID g = lane / 4 owns rows g and g + 8, thread t = lane % 4 owns columns 2t, 2t + 1 of each 8-wide
// tile). The score accumulators of two adjacent 8-key tiles are exactly the A fragment of P for 16 keys,
// so P never leaves registers. K and V tiles arrive by cp.async, double-buffered, while the previous tile
// is being multiplied; K is read with ldmatrix, V with ldmatrix.trans.
// A block is W warps (16 W query rows) sharing each K/V tile: 8 warps halve the K/V traffic per query row
// against 4, 4 warps fit more warps on a multiprocessor at head dim 64 (flash_mma_any picks). Causal blocks run longest first (the last query block of a head has the most key tiles), so
// that the short ones fill the tail of the grid instead of the long ones. Only the tiles that cross the
// diagonal or the end of the keys, or any tile under an additive mask, are masked element by element; a
// warp skips the products of tiles that lie wholly past its own rows' diagonal.
using mma::async_rows;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldsm_x4;
using mma::ldsm_x4_t;
using mma::mma16816;
using mma::pack2;

template <int Dh>
struct Mma2Smem {
  static constexpr int ld = Dh + 8;                          // 16-byte padded rows: conflict-free ldmatrix
  static constexpr size_t tile = size_t(kBc) * ld * 2;       // one K or V tile
  static constexpr size_t bytes = 4 * tile;                   // K and V, double-buffered (Q reuses buffer 1)
};

template <class T, int Dh, int W, int MinBlocks>
__global__ void __launch_bounds__(W * 32, MinBlocks) flash_mma_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                            const T *__restrict__ v, T *__restrict__ out,
                                                            AttnDims d, MaskView mask) {
  using L = Mma2Smem<Dh>;
  constexpr int ld = L::ld, ND = Dh / 8, KD = Dh / 16, Br = 16 * W, NT = W * 32;
  static_assert(Br <= 2 * kBc, "Q is staged in the second K/V buffer pair");
  extern __shared__ __align__(16) unsigned char smem[];
  // Buffer i holds K at smem + 2i tiles and V right after it (computed, not indexed from an array, so
  // that nothing lands in local memory).
  auto Kb = [&](int i) { return reinterpret_cast<T *>(smem + 2 * i * L::tile); };
  auto Vb = [&](int i) { return reinterpret_cast<T *>(smem + (2 * i + 1) * L::tile); };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int qblock = d.causal && !d.plain ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = qblock * Br;
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(q0) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;
  const int shift = d.T - d.S;
  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + Br + shift);
  const int ntiles = (kend + kBc - 1) / kBc;

  // Q through buffer pair 1 (free until the second K/V tile), tile 0 of K and V into buffer 0.
  T *Qs = Kb(1);
  async_rows<Br, Dh, NT>(Qs, qp, min(Br, d.S - q0), d.q.s);
  cp_async_commit();
  if (ntiles > 0) {
    async_rows<kBc, Dh, NT>(Kb(0), kp, min(kBc, d.T), d.k.s);
    async_rows<kBc, Dh, NT>(Vb(0), vp, min(kBc, d.T), d.v.s);
  }
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    const T *base = Qs + (warp * 16) * ld + kk * 16;
    qa[kk][0] = *reinterpret_cast<const uint32_t *>(base + g * ld + 2 * t);
    qa[kk][1] = *reinterpret_cast<const uint32_t *>(base + (g + 8) * ld + 2 * t);
    qa[kk][2] = *reinterpret_cast<const uint32_t *>(base + g * ld + 2 * t + 8);
    qa[kk][3] = *reinterpret_cast<const uint32_t *>(base + (g + 8) * ld + 2 * t + 8);
  }
  __syncthreads();  // Q is in registers: buffer pair 1 may be overwritten

  float o[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8
  const int qw = q0 + warp * 16;  // this warp's first query row
  const int qi0 = qw + g, qi1 = qi0 + 8;
  const float sl = d.scale * kLog2e;

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = it * kBc, cur = it & 1;
    if (it + 1 < ntiles) {  // the next tile streams in while this one is multiplied
      const int n0 = k0 + kBc;
      async_rows<kBc, Dh, NT>(Kb(cur ^ 1), kp + static_cast<int64_t>(n0) * d.k.s, min(kBc, d.T - n0), d.k.s);
      async_rows<kBc, Dh, NT>(Vb(cur ^ 1), vp + static_cast<int64_t>(n0) * d.v.s, min(kBc, d.T - n0), d.v.s);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T *Ks = Kb(cur), *Vs = Vb(cur);
    // Warp-uniform: a tile wholly past the diagonal of this warp's last row adds nothing to its rows.
    const bool past = d.causal && !d.plain && k0 > qw + 15 + shift;
    if (!past) {
      // S = Q K^T: 8 tiles of 8 keys; ldmatrix.x4 yields the B fragments of two key tiles for one k-step.
      float s[8][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; nt += 2) {
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
          const int m = lane >> 3, r = lane & 7;
          uint32_t bf[4];
          ldsm_x4(bf, Ks + (nt * 8 + r + (m >> 1) * 8) * ld + kk * 16 + (m & 1) * 8);
          mma16816<T>(s[nt], qa[kk], bf[0], bf[1]);
          mma16816<T>(s[nt + 1], qa[kk], bf[2], bf[3]);
        }
      }

      // Scale, mask, online softmax for rows g (elements 0, 1) and g + 8 (elements 2, 3). Element by
      // element only where something may be masked: a mask, the end of the keys, or the diagonal.
      const bool masked = d.plain || mask.data || k0 + kBc > d.T || (d.causal && k0 + kBc - 1 > qw + shift);
      float mx0 = -INFINITY, mx1 = -INFINITY;
      if (masked) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = k0 + nt * 8 + 2 * t + (e & 1);
            const int qi = e < 2 ? qi0 : qi1;
            float val = s[nt][e] * sl;
            const bool vis = j < d.T && qi < d.S && (!d.causal || j <= qi + shift);
            if (vis && mask.data)
              val += detail::load_f(mask.data, mask.dtype,
                                    b * mask.st[0] + h * mask.st[1] + static_cast<int64_t>(qi) * mask.st[2] +
                                        static_cast<int64_t>(j) * mask.st[3]) *
                     kLog2e;
            val = vis ? val : -INFINITY;
            s[nt][e] = val;
            if (e < 2) mx0 = fmaxf(mx0, val);
            else mx1 = fmaxf(mx1, val);
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          s[nt][0] *= sl;
          s[nt][1] *= sl;
          s[nt][2] *= sl;
          s[nt][3] *= sl;
          mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
          mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float n0m = fmaxf(m0, mx0), n1m = fmaxf(m1, mx1);
      // A row with nothing visible yet stays empty: no (-inf) - (-inf).
      const float a0 = n0m == -INFINITY ? 1.0f : exp2f(m0 - n0m), a1 = n1m == -INFINITY ? 1.0f : exp2f(m1 - n1m);
      m0 = n0m;
      m1 = n1m;
      const float b0 = n0m == -INFINITY ? 0.0f : n0m, b1 = n1m == -INFINITY ? 0.0f : n1m;
      float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        // exp2(-inf - finite) is 0, so an empty row (b = 0, every score -inf) gives zeros without a test.
        s[nt][0] = exp2f(s[nt][0] - b0);
        s[nt][1] = exp2f(s[nt][1] - b0);
        s[nt][2] = exp2f(s[nt][2] - b1);
        s[nt][3] = exp2f(s[nt][3] - b1);
        ps0 += s[nt][0] + s[nt][1];
        ps1 += s[nt][2] + s[nt][3];
      }
      l0 = l0 * a0 + ps0;  // per-thread partial sums; the quad is summed once at the end
      l1 = l1 * a1 + ps1;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        o[nd][0] *= a0;
        o[nd][1] *= a0;
        o[nd][2] *= a1;
        o[nd][3] *= a1;
      }

      // O += P V: the score tiles 2kk and 2kk + 1 are P's A fragment for keys 16kk .. 16kk + 15.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t pa[4];
        pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int nd = 0; nd < ND; nd += 2) {
          uint32_t bf[4];
          ldsm_x4_t(bf, Vs + (kk * 16 + (lane & 15)) * ld + nd * 8 + (lane >> 4) * 8);
          mma16816<T>(o[nd], pa, bf[0], bf[1]);
          mma16816<T>(o[nd + 1], pa, bf[2], bf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  T *op = out + b * d.o.b + h * d.o.h;
  if (d.lse && t == 0) {  // m is in base-2 units (scores times log2 e); the lse is natural
    if (qi0 < d.S) d.lse[static_cast<int64_t>(bh) * d.S + qi0] = l0 > 0.0f ? (m0 + log2f(l0)) * kLn2 : -INFINITY;
    if (qi1 < d.S) d.lse[static_cast<int64_t>(bh) * d.S + qi1] = l1 > 0.0f ? (m1 + log2f(l1)) * kLn2 : -INFINITY;
  }
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) {
    const int c = nd * 8 + 2 * t;
    if (qi0 < d.S) *reinterpret_cast<uint32_t *>(op + static_cast<int64_t>(qi0) * d.o.s + c) = pack2<T>(o[nd][0] * i0, o[nd][1] * i0);
    if (qi1 < d.S) *reinterpret_cast<uint32_t *>(op + static_cast<int64_t>(qi1) * d.o.s + c) = pack2<T>(o[nd][2] * i1, o[nd][3] * i1);
  }
}

// --- tier 1: the second register kernel (fa; the default) -------------------------------------------------------
// FlashAttention-2 on mma.sync again, rebuilt around what held the first one near 120 TFLOP/s on the H200
// (docs/gpu-plan-runs.md): per 64-key tile and warp it issued about as many ordinary instructions as tensor
// instructions, and each B fragment that ldmatrix brought from shared memory fed only one 16-row product.
//  - A warp may own MT = 2 row tiles (32 query rows), so every K and V fragment feeds two products: half the
//    ldmatrix traffic per product.
//  - The exponentials are single ex2.approx instructions (exp2f without fast-math is several), and the
//    scale is folded into one fused multiply-add per score: the running max is taken over the raw scores
//    (the scale is positive), p = 2^(s * scale * log2 e - m). Tiles that need element masks (the diagonal,
//    the key end, an additive mask, or a scale that is not positive) scale first and use a factor of 1.
//  - Probabilities are packed two at a time with one conversion (cvt.rn.bf16x2 / f16x2).
//  - One barrier per key tile: the copy of tile j + 1 is issued right after the barrier that opens tile j,
//    into the buffer every warp finished with in tile j - 1.
//  - Q may stay in shared memory (QR false) and be read with ldmatrix at each tile, which frees 32 or 64
//    registers for the larger row tiles.
//  - The output leaves through shared memory (the warp's own Q rows) as 16-byte row stores.
// Everything else is the first kernel's: fragment layouts, longest-first causal order, GQA, the strides
// that carry every layout (sequence-major, packed), the lse and the additive mask.
namespace fa {

using attn::pack;

template <int Dh, int W, int MT>
struct Smem {
  static constexpr int ld = Dh + 8;  // 16-byte padded rows: conflict-free ldmatrix and staging
  static constexpr int Br = 16 * MT * W;
  static constexpr size_t q = size_t(Br) * ld * 2;
  static constexpr size_t tile = size_t(kBc) * ld * 2;
  static constexpr size_t bytes = q + 4 * tile;  // Q, then K and V double-buffered
};

template <class T, int Dh, int W, int MT, bool QR, int MinBlocks>
__global__ void __launch_bounds__(W * 32, MinBlocks) fa_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                                const T *__restrict__ v, T *__restrict__ out,
                                                                AttnDims d, MaskView mask) {
  using L = Smem<Dh, W, MT>;
  constexpr int ld = L::ld, ND = Dh / 8, KD = Dh / 16, Br = L::Br, NT = W * 32, WR = 16 * MT;
  extern __shared__ __align__(16) unsigned char smem[];
  T *Qs = reinterpret_cast<T *>(smem);
  auto Kb = [&](int i) { return reinterpret_cast<T *>(smem + L::q + 2 * i * L::tile); };
  auto Vb = [&](int i) { return reinterpret_cast<T *>(smem + L::q + (2 * i + 1) * L::tile); };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int qblock = d.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = qblock * Br;
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(q0) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;
  const int shift = d.T - d.S;
  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + Br + shift);
  const int ntiles = (kend + kBc - 1) / kBc;

  async_rows<Br, Dh, NT>(Qs, qp, min(Br, d.S - q0), d.q.s);
  cp_async_commit();
  if (ntiles > 0) {
    async_rows<kBc, Dh, NT>(Kb(0), kp, min(kBc, d.T), d.k.s);
    async_rows<kBc, Dh, NT>(Vb(0), vp, min(kBc, d.T), d.v.s);
  }
  cp_async_commit();

  const int wrow = warp * WR;      // this warp's first row in the block
  const int qw = q0 + wrow;        // and its query position
  const float sl = d.scale * kLog2e;
  // ldmatrix.x4 of an A fragment: lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at 8.
  const int arow = lane & 15, acol = (lane >> 4) * 8;
  uint32_t qa[QR ? MT : 1][QR ? KD : 1][4];
  if constexpr (QR) {
    cp_async_wait<1>();
    __syncthreads();  // every thread's part of Q has landed
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) ldsm_x4(qa[mt][kk], Qs + (wrow + mt * 16 + arow) * ld + kk * 16 + acol);
  }

  float o[MT][ND][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < ND; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = it * kBc, cur = it & 1;
    cp_async_wait<0>();
    __syncthreads();  // tile it has landed everywhere, and every warp is done with tile it - 1's buffer
    if (it + 1 < ntiles) {
      const int n0 = k0 + kBc;
      async_rows<kBc, Dh, NT>(Kb(cur ^ 1), kp + static_cast<int64_t>(n0) * d.k.s, min(kBc, d.T - n0), d.k.s);
      async_rows<kBc, Dh, NT>(Vb(cur ^ 1), vp + static_cast<int64_t>(n0) * d.v.s, min(kBc, d.T - n0), d.v.s);
    }
    cp_async_commit();
    const T *Ks = Kb(cur), *Vs = Vb(cur);
    // Warp-uniform: a tile wholly past the diagonal of this warp's last row adds nothing to its rows.
    if (d.causal && k0 > qw + WR - 1 + shift) continue;

    // S = Q K^T: 8 tiles of 8 keys per row tile; one ldmatrix.x4 gives the B fragments of two key tiles.
    float s[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t a[QR ? 1 : MT][4];
      if constexpr (!QR) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldsm_x4(a[mt], Qs + (wrow + mt * 16 + arow) * ld + kk * 16 + acol);
      }
#pragma unroll
      for (int nt = 0; nt < 8; nt += 2) {
        const int mi = lane >> 3, r = lane & 7;
        uint32_t bf[4];
        ldsm_x4(bf, Ks + (nt * 8 + r + (mi >> 1) * 8) * ld + kk * 16 + (mi & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (QR) {
            mma16816<T>(s[mt][nt], qa[mt][kk], bf[0], bf[1]);
            mma16816<T>(s[mt][nt + 1], qa[mt][kk], bf[2], bf[3]);
          } else {
            mma16816<T>(s[mt][nt], a[mt], bf[0], bf[1]);
            mma16816<T>(s[mt][nt + 1], a[mt], bf[2], bf[3]);
          }
        }
      }
    }

    // Online softmax (attention.cuh), rows g and g + 8 of each row tile, and the output rows rescaled.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float alpha[2];
      attn::softmax_tile(reinterpret_cast<float(&)[32]>(s[mt]), m[mt], l[mt], alpha, d, mask, k0, qw + mt * 16, g, t,
                         b, h, sl);
      attn::rescale(reinterpret_cast<float(&)[Dh / 2]>(o[mt]), alpha);
    }

    // O += P V: the score tiles 2kk and 2kk + 1 are P's A fragment for keys 16kk .. 16kk + 15.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = pack<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int nd = 0; nd < ND; nd += 2) {
        uint32_t bf[4];
        ldsm_x4_t(bf, Vs + (kk * 16 + (lane & 15)) * ld + nd * 8 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][nd], pa[mt], bf[0], bf[1]);
          mma16816<T>(o[mt][nd + 1], pa[mt], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Normalise, write the lse, and stage the rows in this warp's own rows of Qs (no other warp reads them)
  // so that they leave as 16-byte stores along each row.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    attn::write_rows<T, Dh, ld>(reinterpret_cast<const float(&)[Dh / 2]>(o[mt]), m[mt], l[mt],
                                Qs + (wrow + mt * 16) * ld, d, bh, b, h, qw + mt * 16, g, t, lane, out);
}

}  // namespace fa

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
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(i) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;
  for (int c = threadIdx.x; c < Dh; c += blockDim.x) qs[c] = to_f32(qp[c]);
  __syncthreads();
  const int shift = d.T - d.S;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < d.T; j += blockDim.x) {
    float s = -INFINITY;
    if (!d.causal || j <= i + shift) {
      float dot = 0.0f;
      for (int c = 0; c < Dh; ++c) dot = fmaf(qs[c], to_f32(kp[static_cast<int64_t>(j) * d.k.s + c]), dot);
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
  if (d.lse && threadIdx.x == 0)
    d.lse[static_cast<int64_t>(bh) * d.S + i] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
  for (int c = threadIdx.x; c < Dh; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < d.T; ++j) acc = fmaf(sc[j], to_f32(vp[static_cast<int64_t>(j) * d.v.s + c]), acc);
    out[b * d.o.b + h * d.o.h + static_cast<int64_t>(i) * d.o.s + c] = from_f32<T>(acc * inv);
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

template <class T, int Dh, int W, int MinBlocks>
cudaError_t flash_mma(const T *q, const T *k, const T *v, T *out, const AttnDims &d, const MaskView &mask, cudaStream_t s) {
  const size_t smem = Mma2Smem<Dh>::bytes;
  static cudaError_t attr = cudaFuncSetAttribute(flash_mma_kernel<T, Dh, W, MinBlocks>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  constexpr int Br = 16 * W;
  dim3 grid((d.S + Br - 1) / Br, d.B * d.Hq);
  flash_mma_kernel<T, Dh, W, MinBlocks><<<grid, W * 32, smem, s>>>(q, k, v, out, d, mask);
  return detail::launched();
}

/// The register path with the block shape the kernel names (old, mma64, mma128, mma128r). By default 4 warps
/// (64 query rows) at head dim 64 and 8 warps (128 rows) at head dim 128: measured on the H200 (docs/gpu-plan-runs.md,
/// 2026-12-01), 64-row blocks ran gpt2-350m's forward in 14.43 ms against 14.97 ms with 128-row blocks (three
/// 4-warp blocks fit a multiprocessor at 140 registers, one 8-warp block at 138); at head dim 128 both shapes
/// fit 8 warps, and 128 rows halve the K/V traffic per row. mma64 / mma128 force a shape; mma128r holds the
/// 8-warp kernel to 128 registers so that two blocks share a multiprocessor (head dim 64; a few spill).
template <class T, int Dh>
cudaError_t flash_mma_any(const T *q, const T *k, const T *v, T *out, const AttnDims &d, const MaskView &mask, int shape,
                          cudaStream_t s) {
  // MinBlocks 0 leaves the register count to the compiler.
  if (shape == 1 || (shape == 0 && Dh == 64)) return flash_mma<T, Dh, 4, 0>(q, k, v, out, d, mask, s);
  if constexpr (Dh == 64)
    if (shape == 2) return flash_mma<T, Dh, 8, 2>(q, k, v, out, d, mask, s);
  return flash_mma<T, Dh, 8, 0>(q, k, v, out, d, mask, s);
}

template <class T, int Dh, int W, int MT, bool QR, int MinBlocks = 0>
cudaError_t fa(const T *q, const T *k, const T *v, T *out, const AttnDims &d, const MaskView &mask, cudaStream_t s) {
  using L = fa::Smem<Dh, W, MT>;
  static cudaError_t attr = cudaFuncSetAttribute(fa::fa_kernel<T, Dh, W, MT, QR, MinBlocks>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::bytes));
  if (attr != cudaSuccess) return attr;
  dim3 grid((d.S + L::Br - 1) / L::Br, d.B * d.Hq);
  fa::fa_kernel<T, Dh, W, MT, QR, MinBlocks><<<grid, W * 32, L::bytes, s>>>(q, k, v, out, d, mask);
  return detail::launched();
}

/// The second register kernel's shapes (kernels faWxM[s]: W warps of M row tiles of 16 each, s =
/// Q read from shared memory at every tile instead of held in registers; fa4x1r and fa8x1r: fa4x1 and fa8x1
/// held to the registers that let four and two blocks share a multiprocessor at head dim 64). At head dim 128 a warp of two row
/// tiles keeps Q in shared memory (fa4x2 is fa4x2s there): held in registers it would spill.
/// The order is that of the fa variants of zk/attention_kernels.h (fa4x1 0 ... fa8x1r 5).
enum class FaShape { w4m1, w4m2, w8m1, w4m2s, w4m1r, w8m1r };

template <class T, int Dh>
cudaError_t fa_any(const T *q, const T *k, const T *v, T *out, const AttnDims &d, const MaskView &mask, FaShape shape,
                   cudaStream_t s) {
  switch (shape) {
    case FaShape::w4m1: return fa<T, Dh, 4, 1, true>(q, k, v, out, d, mask, s);
    case FaShape::w4m1r: return fa<T, Dh, 4, 1, true, Dh == 64 ? 4 : 2>(q, k, v, out, d, mask, s);
    case FaShape::w8m1: return fa<T, Dh, 8, 1, true>(q, k, v, out, d, mask, s);
    case FaShape::w8m1r: return fa<T, Dh, 8, 1, true, Dh == 64 ? 2 : 1>(q, k, v, out, d, mask, s);
    case FaShape::w4m2:
      if constexpr (Dh == 64) return fa<T, Dh, 4, 2, true>(q, k, v, out, d, mask, s);
      [[fallthrough]];
    case FaShape::w4m2s: break;
  }
  return fa<T, Dh, 4, 2, false>(q, k, v, out, d, mask, s);
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
  return attention(q, k, v, mask, out, Out{}, causal, scale, 0, s);
}

GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, cudaStream_t s) {
  return attention(q, k, v, mask, out, lse, causal, scale, 0, s);
}

namespace {

/// An operand's logical [B, H, S, Dh] dims and its strides, head-major or sequence-major.
struct Operand {
  int64_t B = 0, H = 0, S = 0, Dh = 0;
  Strides st;
  bool same(const Operand &o) const { return B == o.B && H == o.H && S == o.S && Dh == o.Dh; }
};

Operand operand(const Dims &d, bool seq_major) {
  Operand o;
  o.B = d.d[0];
  o.H = seq_major ? d.d[2] : d.d[1];
  o.S = seq_major ? d.d[1] : d.d[2];
  o.Dh = d.d[3];
  o.st.b = o.H * o.S * o.Dh;
  o.st.h = seq_major ? o.Dh : o.S * o.Dh;
  o.st.s = seq_major ? o.H * o.Dh : o.Dh;
  return o;
}

/// A packed operand (cpu::AttnPacked): [B, S, heads, Dh] rows of row_stride elements of a [B, S, W] tensor;
/// the caller adds the element offset to the base pointer. False when the packing does not fit the tensor.
bool packed_operand(const Dims &d, const cpu::AttnPacked &p, int64_t Dh, Operand &o) {
  if (d.rank != 3 || p.offset < 0 || p.heads <= 0 || Dh <= 0 || p.row_stride != d.d[2] ||
      p.offset + p.heads * Dh > p.row_stride)
    return false;
  o.B = d.d[0];
  o.H = p.heads;
  o.S = d.d[1];
  o.Dh = Dh;
  o.st.b = o.S * p.row_stride;
  o.st.h = Dh;
  o.st.s = p.row_stride;
  return true;
}

}  // namespace

GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, cudaStream_t s) {
  return attention(q, k, v, mask, out, lse, causal, scale, seq_major, nullptr, s);
}

namespace {

/// The device's compute capability as major * 10 + minor (90: sm_90), cached per device; 0 when unknown.
int device_sm() {
  static int cached[64];  // 0 unknown, else sm + 1
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (!cached[dev]) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached[dev] = major * 10 + minor + 1;
  }
  return cached[dev] - 1;
}

/// How the kernel was chosen: by the plan (`strict`: a tensor-core kernel on an attention it cannot take is an
/// error, not a silent switch to the exact kernel), or for a direct caller of the library (the GPU tests and
/// benchmarks: ZK_CUDA_ATTENTION, or what the compiler would choose for this device; an attention the
/// tensor-core kernels cannot take runs the exact one).
struct Choice {
  const AttentionKernel *kernel = nullptr;  // null: the default for the device and the attention
  bool strict = false;
  bool plain = false;  // the first register kernel without its longest-first order and interior fast path
  int sm = 0;          // the compute capability whose default a null kernel takes (0: any device's)
};

GpuStatus attention_impl(const In &q_in, const In &k_in, const In &v_in, const In &mask, const Out &out, const Out &lse,
                         bool causal, float scale, int seq_major, const cpu::AttnPacked *packed, Choice choice,
                         cudaStream_t s);

}  // namespace

GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, const cpu::AttnPacked *packed, cudaStream_t s) {
  // A direct caller's selection, for timing and bisection (bench/gpu/attention_bench.cpp, the GPU tests): a
  // name of zk/attention_kernels.h. Plans never read it: they name their kernel (zplan --attention-kernel),
  // and zrun says so when the variable is set. ZK_CUDA_ATTENTION_PLAIN=1 turns off the first register
  // kernel's longest-first order and interior-tile fast path.
  Choice c;
  const char *env = std::getenv("ZK_CUDA_ATTENTION");
  if (env && *env) c.kernel = attention_kernel(env);
  const char *plain = std::getenv("ZK_CUDA_ATTENTION_PLAIN");
  c.plain = plain && std::strcmp(plain, "1") == 0;
  c.sm = device_sm();
  return attention_impl(q, k, v, mask, out, lse, causal, scale, seq_major, packed, c, s);
}

GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, const cpu::AttnPacked *packed, int kernel, cudaStream_t s) {
  Choice c;
  if (kernel != 0) {
    c.kernel = attention_kernel(kernel);
    if (!c.kernel) return kernel_failure((std::string("attention: the plan names unknown kernel code ") + std::to_string(kernel)).c_str());
    c.strict = true;
  } else {
    // A plan older than 2.11 names no kernel: the kernels every device runs, chosen by the attention alone
    // (what the compiler chooses for a device other than sm_90), never by the device.
    c.kernel = nullptr;
  }
  return attention_impl(q, k, v, mask, out, lse, causal, scale, seq_major, packed, c, s);
}

namespace {

GpuStatus attention_impl(const In &q_in, const In &k_in, const In &v_in, const In &mask, const Out &out, const Out &lse,
                         bool causal, float scale, int seq_major, const cpu::AttnPacked *packed, Choice choice,
                         cudaStream_t s) {
  if (out.shape.rank != 4) return kernel_failure("attention: out must be rank 4");
  if (seq_major & ~cpu::kAttnSeqMajorAll) return kernel_failure("attention: unknown seq_major bits");
  // Every path below reads q, k and v through their base pointers and strides, so a packed operand is its
  // tensor's pointer moved by the element offset, with the row stride as its position stride.
  In q = q_in, k = k_in, v = v_in;
  In *qkv[3] = {&q, &k, &v};
  Operand ops[3];
  for (int i = 0; i < 3; ++i) {
    const bool is_packed = packed && packed[i].row_stride != 0;
    if (qkv[i]->shape.rank != (is_packed ? 3 : 4))
      return kernel_failure("attention: q, k and v must be rank 4, or rank 3 packed");
    if (!is_packed) {
      ops[i] = operand(qkv[i]->shape, seq_major & (1 << i));
      continue;
    }
    if (!(seq_major & (1 << i))) return kernel_failure("attention: a packed operand must be sequence-major");
    if (!packed_operand(qkv[i]->shape, packed[i], out.shape.d[3], ops[i]))
      return kernel_failure("attention: a packed operand's offset and heads do not fit its tensor's rows");
    qkv[i]->data = static_cast<const char *>(qkv[i]->data) + packed[i].offset * dtype_size(qkv[i]->dtype);
  }
  const Operand &qo = ops[0], &ko = ops[1], &vo = ops[2], oo = operand(out.shape, seq_major & cpu::kAttnSeqMajorOut);
  const int64_t B = qo.B, Hq = qo.H, S = qo.S, Dh = qo.Dh;
  const int64_t Hkv = ko.H, T = ko.S;
  if (ko.B != B || ko.Dh != Dh) return kernel_failure("attention: k must be [B, Hkv, T, Dh]");
  if (!vo.same(ko)) return kernel_failure("attention: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return kernel_failure("attention: Hq must be a multiple of Hkv");
  if (!oo.same(qo)) return kernel_failure("attention: output shape differs from q's");
  if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype || out.dtype != q.dtype)
    return kernel_failure("attention: q, k, v and out must share one float dtype");
  if (causal && S > T) return kernel_failure("attention: causal needs S <= T");
  if (lse.data && (lse.dtype != DType::f32 || lse.shape != Dims{B, Hq, S}))
    return kernel_failure("attention: lse must be f32 [B, Hq, S]");
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
             causal ? 1 : 0, scale, static_cast<float *>(lse.data)};
  d.q = qo.st;
  d.k = ko.st;
  d.v = vo.st;
  d.o = oo.st;
  // The kernel: the plan's, or for a direct caller ZK_CUDA_ATTENTION's, else what the compiler chooses by
  // default for this device (zk/attention_kernels.h); the variant is the family's block shape or warpgroups.
  const bool half = q.dtype == DType::bf16 || q.dtype == DType::f16;
  const AttentionKernel *kernel = choice.kernel;
  if (!kernel) kernel = default_attention_kernel(choice.sm, Dh, attention_tensor_core_shape(half, Dh, T));
  d.plain = choice.plain ? 1 : 0;
  const int variant = kernel->variant;
  // The 16-byte copies need 16-byte aligned rows: the base pointers and every row stride.
  auto aligned = [](const void *p, const Strides &st) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && st.b % 8 == 0 && st.h % 8 == 0 && st.s % 8 == 0;
  };
  const bool tc = attention_tensor_core_shape(half, Dh, T) && aligned(q.data, d.q) && aligned(k.data, d.k) &&
                  aligned(v.data, d.v) && aligned(out.data, d.o);
  if (kernel->family != AttnFamily::rows && !tc) {
    // The compiler chose with the same rule (attention_tensor_core_shape, and the plan's offsets and strides
    // for the alignment): a plan that gets here was not made by it, or the two disagree.
    if (choice.strict)
      return kernel_failure((std::string("attention: the plan's kernel '") + kernel->name +
                             "' needs bf16 or f16, head dim 64 or 128 and 16-byte aligned rows; this attention has " +
                             dtype_name(q.dtype) + ", head dim " + std::to_string(Dh) +
                             (attention_tensor_core_shape(half, Dh, T) ? " and unaligned rows" : "") +
                             " (recompile the plan with this release's zplan, or --attention-kernel rows)")
                                .c_str());
    kernel = attention_kernel("rows");
  }
  if (kernel->family != AttnFamily::rows) {
    auto run = [&](auto tag) -> cudaError_t {
      using E = decltype(tag);
      auto *qp = static_cast<const E *>(q.data), *kp = static_cast<const E *>(k.data), *vp = static_cast<const E *>(v.data);
      auto *op = static_cast<E *>(out.data);
      switch (kernel->family) {
        case AttnFamily::wmma:
          return Dh == 64 ? launch::flash<E, 64>(qp, kp, vp, op, d, mv, s) : launch::flash<E, 128>(qp, kp, vp, op, d, mv, s);
        case AttnFamily::mma:
          return Dh == 64 ? launch::flash_mma_any<E, 64>(qp, kp, vp, op, d, mv, variant, s)
                          : launch::flash_mma_any<E, 128>(qp, kp, vp, op, d, mv, variant, s);
        case AttnFamily::wg:
          return attn::wgmma_forward(qp, kp, vp, op, d, mv, static_cast<int>(Dh), std::is_same_v<E, __nv_bfloat16>,
                                     variant, s);
        case AttnFamily::fa: break;
        case AttnFamily::rows: return cudaErrorInvalidValue;  // handled below
      }
      const auto fs = static_cast<launch::FaShape>(variant);
      return Dh == 64 ? launch::fa_any<E, 64>(qp, kp, vp, op, d, mv, fs, s)
                      : launch::fa_any<E, 128>(qp, kp, vp, op, d, mv, fs, s);
    };
    ZK_CUDA_TRY(q.dtype == DType::bf16 ? run(__nv_bfloat16{}) : run(__half{}));
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

}  // namespace

}  // namespace cuda
}  // namespace zk
