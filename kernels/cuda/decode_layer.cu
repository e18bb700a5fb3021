// The persistent decode layer (session 11, helper PERSIST): one launch computes one llama-style decoder layer
// at decode for M <= 4 rows (sequences, one new token each). Run on the GPU in session 12: correct against the
// CPU reference at 1-4 rows, and slower than the six kernels it replaces (66 against 52 us a llama-1b layer;
// docs/generation.md, "The persistent decode layer on the GPU"), so plans use it only with
// `zplan --decode-layer on`.
//
// Why: at batch 1 a layer is six kernels (q/k/v norm_products, rope_kv_write, decode attention, o, gate/up
// norm_products, down), and session 10 measured the four streaming products at a fixed ~6.4 us each
// (launch, first bytes, the prologue after the wait, the split-K reduction, cluster barriers) plus bytes at
// ~2.7 TB/s. The fixed part is paid per kernel boundary. Here the boundaries become grid-wide barriers inside
// one kernel, and the weight stream does not stop at them: every thread reads its weight pieces through one
// ring of cp.async copies (as skinny_stream_kernel does) whose issue side runs through the WHOLE layer's
// pieces, so the copies of the next product's first pieces go out before the block waits at a barrier (the
// weights are read-only and their addresses do not depend on anything the barrier orders).
//
// The phases (the numerics are the six steps', each result rounded to the storage type where they round it;
// the oracle is the CPU reference kernels composed in that order, tests/cuda/decode_layer_test.cpp):
//   A  every block: sum1 = x + residual (block 0 writes it), n1 = rms_norm(sum1) * norm1 into shared memory;
//      the q/k/v products (three weights, one stream of column strips x K-slabs)          | grid barrier
//   B  per (row, K/V head, chunk of the cache): q rotated, the new k rotated and v written into the caches by
//      the chunk that holds the position, a softmax over the chunk (tiles of up to 32 keys); the chunks of a head
//      combined by the block that finishes last (in chunk order: deterministic)          | grid barrier
//   C  the o product; its finalisation adds the residual: sum2 = o + sum1 (residual_out)  | grid barrier
//   D  every block: n2 = rms_norm(sum2) * norm2; gate/up gated: h = act(n2 Wg) * (n2 Wu)  | grid barrier
//   E  the down product (out)
// Layer l + 1 takes x = out and residual = residual_out of layer l, as the next norm_products does.
//
// The products: a work item is (column strip, K-slab) of a product, strips of 8 x 16 bytes of weight columns
// (64 in bf16/f16, 32 in f32; gated: 32 outputs, the gate's and the up weight's columns side by side), the K
// split chosen on the host so that the items fill the grid in whole waves; block i takes items i, i + grid,
// ... Each item's sums (one block's K-slab) go to the workspace; the block that adds the last K-slab of a
// strip (an atomic count per strip) sums the slabs in slab order and writes the strip's outputs, so every
// result is the same on every run (no float atomics). Every weight byte is read by exactly one block.
//
// The grid is exactly the blocks that can be resident at once (the occupancy API x the SMs, at most two an
// SM), launched as a programmatic dependent of the previous kernel. A grid barrier cannot deadlock once
// every block is resident; this grid is: the previous kernel's blocks leave when it ends (our blocks wait
// for it first, griddepcontrol.wait), and the kernel after ours is let launch (launch_dependents) only once
// every one of our blocks has executed that instruction, i.e. is resident. A larger grid is refused on the
// host with an error instead of a hang, and the kernel asks for the largest shared-memory carveout so that the
// launch cannot pick a smaller one than the occupancy API assumed. (Other streams' kernels, NCCL's for
// instance, could hold SMs while ours wait: the compiler writes decode_layer only where the layer has no
// collective.) A barrier that still waits after about two seconds traps with a message
// (kBarrierPatienceCycles), so that a deadlock is an error, not a hang.
//
// The grid barrier is a counter and a generation word in the workspace: a block's thread 0 reads the
// generation, fences (its block's writes, ordered by __syncthreads, become visible at the GPU), adds one to
// the counter; the last block resets the counter and bumps the generation, the others poll it with a short
// nanosleep. Its cost, measured in session 12: ~1.3 us from the last arrival to the first departure, plus
// the blocks' spread before it (2-4.5 us), four a layer. Data written before a barrier by another block is
// read after it with ld.global.cg (the L2, never a stale L1 line).
//
// Duplication: the ring, the norm prologue and the gated epilogue follow skinny_stream_kernel (skinny_gemm.cu)
// and are written again here rather than factored out, so that the existing kernels' machine code stays as it
// was (a plan op only after this one proves faster on the GPU; then share them). The rotary element is
// common.cuh's rope_forward, shared.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>

#include "common.cuh"
#include "zk/cuda_decode.h"
#include "zk/cuda_workspace.h"

namespace zk {
namespace cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kColThreads = 8;                     // threads across a strip, 16 bytes each
constexpr int kRowLanes = kThreads / kColThreads;  // weight rows a block reads at once
constexpr int kDepth = 16;                         // ring slots per thread (15 pieces in flight)
constexpr int kRingBytes = kDepth * kThreads * 16;
constexpr int kMaxSplits = static_cast<int>(workspace::kDecodeLayerMaxSplits);
constexpr int kTile = 32;       // keys of an attention tile (one a lane in the softmax)
constexpr int kMaxChunks = static_cast<int>(workspace::kDecodeLayerMaxChunks);  // chunks of a (row, K/V head)'s cache
constexpr int kMaxBlocksPerSm = 2;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;

/// One product phase: up to three weights [K, n[i]] (q/k/v) or the gated pair (w[0] gate, w[1] up, width
/// n[0]), its strips (end[i]: cumulative strips of the weights), K split into `splits` slabs of kc rows.
struct Prod {
  const void *w[3];
  void *dst[3];  // phase A: q, k, v in the workspace
  int n[3];
  int end[3];
  int count, K, kc, splits, strips;
};

struct Params {
  const void *x, *res, *g1, *g2, *cos, *sin;
  const int64_t *pos;
  void *k_cache, *v_cache, *out, *res_out;
  Prod prod[4];  // q/k/v, o, gate/up, down
  unsigned *sync;  // [0] arrivals, [1] generation, [2..] the per-strip / per-head counts
  void *sum1, *q, *k, *v, *attn, *h;
  float *part;
  int M, d, Hq, Hkv, Dh, F, L, tb;
  DType tt;
  int chunk, chunks;
  float eps, scale;
  int act;
  int early;  // the first weight pieces before the wait for the previous kernel
  unsigned long long *stamps;  // null, or [grid][kDecodeLayerStamps][2] timer readings (DecodeLayerLaunch)
};

/// Block thread 0's readings of the global timer (ns) and of its SM's clock (cycles) as stamp i of the block,
/// where the launch asked for them.
__device__ __forceinline__ void stamp(const Params &p, int i) {
  if (p.stamps && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    unsigned long long *at = p.stamps + (static_cast<size_t>(blockIdx.x) * kDecodeLayerStamps + i) * 2;
    at[0] = t;
    at[1] = static_cast<unsigned long long>(clock64());
  }
}

__device__ __forceinline__ void cp_async16(void *smem_dst, const void *gmem_src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Loads through the L2 only: data another block wrote before a grid barrier (an L1 line could be stale).
__device__ __forceinline__ uint4 ldcg4(const void *p) { return __ldcg(static_cast<const uint4 *>(p)); }
__device__ __forceinline__ float ldcg_f(const float *p) { return __ldcg(p); }
template <class T>
__device__ __forceinline__ float ldcg_t(const T *p) {
  if constexpr (sizeof(T) == 4) {
    return __ldcg(reinterpret_cast<const float *>(p));
  } else {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short *>(p));
    T t;
    memcpy(&t, &u, 2);
    return to_f32(t);
  }
}

template <class T>
__device__ __forceinline__ void unpack16(const uint4 &raw, float (&f)[16 / sizeof(T)]) {
  const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
  for (int e = 0; e < static_cast<int>(16 / sizeof(T)); ++e) f[e] = to_f32(v[e]);
}

// The activations and the gated output as skinny_gemm.cu computes them (elementwise.cu's formulas).
__device__ __forceinline__ float activation(int act, float v) {
  if (act == static_cast<int>(Unary::silu)) return v / (1.0f + expf(-v));
  if (act == static_cast<int>(Unary::gelu_tanh))
    return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}
template <class T>
__device__ __forceinline__ T gated_out(float g, float u, int act) {
  const float gr = to_f32(from_f32<T>(g)), ur = to_f32(from_f32<T>(u));
  return from_f32<T>(activation(act, gr) * ur);
}

/// A healthy barrier waits microseconds; one still waiting after this many clock cycles (about two seconds) is
/// taken for a grid that is not resident as a whole, and the kernel stops with a message (a trap: the launch
/// fails with cudaErrorLaunchFailure) instead of hanging.
constexpr long long kBarrierPatienceCycles = 4000000000LL;

/// The grid barrier (see the file's comment). Every thread of every block calls it; `which` names it in the
/// message of a barrier that waited too long.
__device__ __forceinline__ void grid_barrier(unsigned *sync, int which) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *gen = sync + 1;
    const unsigned g = *gen;  // read before arriving: it cannot change until this block has arrived
    __threadfence();
    if (atomicAdd(sync, 1u) == gridDim.x - 1) {
      atomicExch(sync, 0u);
      __threadfence();
      atomicAdd(sync + 1, 1u);
    } else {
      unsigned ns = 32;
      const long long t0 = clock64();
      while (*gen == g) {
        __nanosleep(ns);
        ns = ns < 256 ? 2 * ns : ns;
        if (clock64() - t0 > kBarrierPatienceCycles) {
          printf("decode_layer: block %u waited too long at grid barrier %d: %u of %u blocks arrived\n", blockIdx.x,
                 which, *static_cast<volatile unsigned *>(sync), gridDim.x);
          __trap();
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
}

/// Whether this block adds the last of `expect` contributions to count `*cnt` (then the count is reset, for
/// the next phase and launch). The block's writes before it are visible to the block that returns true.
__device__ __forceinline__ bool arrive_last(unsigned *cnt, unsigned expect, int *flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const bool last = atomicAdd(cnt, 1u) == expect - 1;
    if (last) {
      atomicExch(cnt, 0u);
      __threadfence();
    }
    *flag = last ? 1 : 0;
  }
  __syncthreads();
  return *flag != 0;
}

/// A thread's share of one work item (strip, K-slab) of a product: `rows` pieces of 16 bytes, the first at
/// wp, `step` elements apart; `live` where its columns lie within the weight.
template <class T>
struct Share {
  const T *wp;
  int64_t step;
  int rows, kbeg;
  bool live;
};

template <class T>
__device__ __forceinline__ Share<T> share_of(const Prod &pr, bool gated, int item, int c, int r) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  constexpr int TN = kColThreads * EP;
  const int strip = item / pr.splits, split = item - strip * pr.splits;
  int seg = 0, first = 0;
  if (pr.count > 1 && strip >= pr.end[0]) seg = 1, first = pr.end[0];
  if (pr.count > 2 && strip >= pr.end[1]) seg = 2, first = pr.end[1];
  const void *w = gated ? (c < kColThreads / 2 ? pr.w[0] : pr.w[1]) : (seg == 0 ? pr.w[0] : seg == 1 ? pr.w[1] : pr.w[2]);
  const int N = seg == 0 ? pr.n[0] : seg == 1 ? pr.n[1] : pr.n[2];
  const int cols = gated ? TN / 2 : TN;
  const int n0 = (strip - first) * cols + (gated ? c % (kColThreads / 2) : c) * EP;
  Share<T> s;
  s.live = n0 < N;  // N is a multiple of EP: a piece is wholly in or out
  s.kbeg = split * pr.kc;
  const int span = max(0, min(pr.K, s.kbeg + pr.kc) - s.kbeg);
  s.rows = r < span ? (span - r + kRowLanes - 1) / kRowLanes : 0;
  s.wp = static_cast<const T *>(w) + static_cast<int64_t>(s.kbeg + r) * N + (s.live ? n0 : 0);
  s.step = static_cast<int64_t>(kRowLanes) * N;
  return s;
}

/// The issue side of a thread's ring: its weight pieces of the whole layer in the order they are consumed
/// (product by product, the block's items in turn, each item's rows), one cp.async group per call.
template <class T>
struct Stream {
  Share<T> sh;
  int phase, t, i;
  unsigned issued;
  __device__ __forceinline__ void advance(const Params &p) {
    i = 0;
    for (;;) {
      ++t;
      int item = static_cast<int>(blockIdx.x) + t * static_cast<int>(gridDim.x);
      while (phase < 4 && item >= p.prod[phase].strips * p.prod[phase].splits) {
        ++phase;
        t = 0;
        item = static_cast<int>(blockIdx.x);
      }
      if (phase >= 4) return;
      sh = share_of<T>(p.prod[phase], phase == 2, item, threadIdx.x % kColThreads, threadIdx.x / kColThreads);
      if (sh.rows > 0) return;
    }
  }
  __device__ __forceinline__ void issue(const Params &p, uint4 *ring) {
    if (phase < 4) {
      if (sh.live) cp_async16(ring + (issued & (kDepth - 1)) * kThreads + threadIdx.x, sh.wp + i * sh.step);
      if (++i == sh.rows) advance(p);
    }
    cp_async_commit();
    ++issued;
  }
};

/// rms_norm of M rows of K (a, plus b where given, rounded first: the residual add), scaled by g and
/// rounded, into xs [M][K] as T; `sum_out` (or null) receives the rounded sums. As the streaming kernel's
/// norm prologue computes it: the norm of the rounded sum, the normed value rounded.
template <class T, int MR>
__device__ void norm_rows(const T *a, const T *b, const T *__restrict__ g, T *sum_out, T *xs, int M, int K, float eps,
                          float *nred) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  const int tid = threadIdx.x, pk = K / EP;
  // The first piece of the scale this thread applies goes out with the rows' loads (one round trip, not two).
  const uint4 g0 = tid < M * pk ? __ldg(reinterpret_cast<const uint4 *>(g + (tid % pk) * EP)) : make_uint4(0, 0, 0, 0);
  float ss[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) ss[m] = 0.0f;
  for (int e = tid; e < M * pk; e += kThreads) {
    const int m = e / pk;
    uint4 va = ldcg4(a + static_cast<int64_t>(e) * EP);
    if (b) {
      const uint4 vb = ldcg4(b + static_cast<int64_t>(e) * EP);
      const T *ta = reinterpret_cast<const T *>(&va), *tb = reinterpret_cast<const T *>(&vb);
      uint4 s;
      T *ts = reinterpret_cast<T *>(&s);
#pragma unroll
      for (int j = 0; j < EP; ++j) ts[j] = from_f32<T>(to_f32(ta[j]) + to_f32(tb[j]));
      if (sum_out) *reinterpret_cast<uint4 *>(sum_out + static_cast<int64_t>(e) * EP) = s;
      va = s;
    }
    reinterpret_cast<uint4 *>(xs)[e] = va;
    float f[EP];
    unpack16<T>(va, f);
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < EP; ++j) sq += f[j] * f[j];
#pragma unroll
    for (int mm = 0; mm < MR; ++mm) ss[mm] += mm == m ? sq : 0.0f;
  }
  const int warp = tid / 32, lane = tid % 32;
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    const float v = detail::warp_sum(ss[m]);
    if (lane == 0) nred[warp * MR + m] = v;
  }
  __syncthreads();
  float inv[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += nred[w * MR + m];
    inv[m] = rsqrtf(t / static_cast<float>(K) + eps);
  }
  for (int e = tid; e < M * pk; e += kThreads) {
    const int m = e / pk, k0 = (e - m * pk) * EP;
    const uint4 gv = e == tid ? g0 : __ldg(reinterpret_cast<const uint4 *>(g + k0));
    uint4 xv = reinterpret_cast<const uint4 *>(xs)[e];
    float iv = 0.0f;
#pragma unroll
    for (int mm = 0; mm < MR; ++mm) iv = mm == m ? inv[mm] : iv;
    const T *tg = reinterpret_cast<const T *>(&gv);
    T *tx = reinterpret_cast<T *>(&xv);
#pragma unroll
    for (int j = 0; j < EP; ++j) {
      float o = to_f32(tx[j]) * iv;
      o *= to_f32(tg[j]);
      tx[j] = from_f32<T>(o);
    }
    reinterpret_cast<uint4 *>(xs)[e] = xv;
  }
  __syncthreads();
}

/// M rows of K elements (written by other blocks before the last barrier) into xs [M][K].
template <class T>
__device__ __forceinline__ void load_rows(const T *src, T *xs, int M, int K) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  for (int e = threadIdx.x; e < M * K / EP; e += kThreads)
    reinterpret_cast<uint4 *>(xs)[e] = ldcg4(src + static_cast<int64_t>(e) * EP);
  __syncthreads();
}

/// Product phase PH (0 q/k/v, 1 o, 2 gate/up, 3 down) over x in xs [M][K]: this block's items, each a K-slab of
/// a strip read from the ring, its sums to the workspace, the strip finalised by the block that adds its last
/// slab.
template <class T, int MR, int PH>
__device__ void product_phase(const Params &p, uint4 *ring, const T *xs, float *red, Stream<T> &st,
                              unsigned &consumed, int *flag) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  constexpr int TN = kColThreads * EP;
  constexpr bool kGated = PH == 2;
  constexpr int kCols = kGated ? TN / 2 : TN;
  const Prod &pr = p.prod[PH];
  const int tid = threadIdx.x, c = tid % kColThreads, r = tid / kColThreads, warp = tid / 32, lane = tid % 32;
  const int M = p.M, K = pr.K, items = pr.strips * pr.splits;
  for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
    const Share<T> sh = share_of<T>(pr, kGated, item, c, r);
    float acc[MR][EP];
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < EP; ++e) acc[m][e] = 0.0f;
    const T *xk = xs + sh.kbeg + r;
    for (int i = 0; i < sh.rows; ++i) {
      // Groups committed: kDepth - 1 + consumed; this piece's is done when at most kDepth - 2 are pending.
      cp_async_wait<kDepth - 2>();
      uint4 raw = ring[(consumed & (kDepth - 1)) * kThreads + tid];
      ++consumed;
      // The slot refilled now is the one read in the previous iteration, whose value is in registers.
      st.issue(p, ring);
      if (!sh.live) raw = make_uint4(0, 0, 0, 0);
      float wf[EP];
      unpack16<T>(raw, wf);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        if (m < M) {
          const float xv = to_f32(xk[m * K + kRowLanes * i]);
#pragma unroll
          for (int e = 0; e < EP; ++e) acc[m][e] = fmaf(xv, wf[e], acc[m][e]);
        }
      }
    }
    // The row lanes of a warp (lanes kColThreads apart share columns), then the block's warps, in warp order.
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < EP; ++e) {
        float v = acc[m][e];
#pragma unroll
        for (int o = kColThreads; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[m][e] = v;
      }
    if (lane < kColThreads)
#pragma unroll
      for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int e = 0; e < EP; ++e) red[(warp * MR + m) * TN + lane * EP + e] = acc[m][e];
    __syncthreads();
    float *mine = p.part + static_cast<int64_t>(item) * M * TN;
    for (int o = tid; o < M * TN; o += kThreads) {
      const int m = o / TN, j = o - m * TN;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += red[(w * MR + m) * TN + j];
      mine[o] = s;
    }
    const int strip = item / pr.splits;
    if (!arrive_last(p.sync + 2 + strip, static_cast<unsigned>(pr.splits), flag)) continue;
    // The strip's outputs: the slabs' sums in slab order.
    int seg = 0, first = 0;
    if (pr.count > 1 && strip >= pr.end[0]) seg = 1, first = pr.end[0];
    if (pr.count > 2 && strip >= pr.end[1]) seg = 2, first = pr.end[1];
    const int N = seg == 0 ? pr.n[0] : seg == 1 ? pr.n[1] : pr.n[2];
    const float *sp = p.part + static_cast<int64_t>(strip) * pr.splits * M * TN;
    for (int o = tid; o < M * kCols; o += kThreads) {
      const int m = o / kCols, j = o - m * kCols, n = (strip - first) * kCols + j;
      if (n >= N) continue;
      float s0 = 0.0f, s1 = 0.0f;
      for (int k = 0; k < pr.splits; ++k) {
        s0 += ldcg_f(sp + (k * M + m) * TN + j);
        if (kGated) s1 += ldcg_f(sp + (k * M + m) * TN + kCols + j);
      }
      const int64_t at = static_cast<int64_t>(m) * N + n;
      if (PH == 0) {
        static_cast<T *>(seg == 0 ? pr.dst[0] : seg == 1 ? pr.dst[1] : pr.dst[2])[at] = from_f32<T>(s0);
      } else if (PH == 1) {
        // o rounded as the product stores it, then the residual add of the next norm_products, rounded.
        const float ov = to_f32(from_f32<T>(s0));
        static_cast<T *>(p.res_out)[at] = from_f32<T>(ov + ldcg_t(static_cast<const T *>(p.sum1) + at));
      } else if (PH == 2) {
        static_cast<T *>(p.h)[at] = gated_out<T>(s0, s1, p.act);
      } else {
        static_cast<T *>(p.out)[at] = from_f32<T>(s0);
      }
    }
  }
}

/// Phase B: the attention of the rotated queries over the caches, the new key and value written. Items
/// (row b, K/V head kh, chunk); a chunk past the row's position has no keys and does nothing. `region` is the
/// block's shared memory beside the ring (the x rows are dead here).
template <class T>
__device__ void attention_phase(const Params &p, unsigned char *region, int *flag) {
  constexpr int EP = 16 / static_cast<int>(sizeof(T));
  // 16-byte pieces of a tile's keys (and as many of its values) a thread holds in registers: a tile is 32 keys,
  // or fewer where its rows take more than kPer pieces a thread (16 keys of head dim 128 in f32).
  constexpr int kPer = 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int G = p.Hq / p.Hkv, R = G, Dh = p.Dh, half = Dh / 2, L = p.L, dq = Dh / 32;
  float *qs = reinterpret_cast<float *>(region);  // [R][Dh] the rotated queries
  float *os = qs + R * Dh;                         // [R][Dh] the running output
  float *sc = os + R * Dh;                         // [R][kTile] scores, then weights
  float *ml = sc + R * kTile;                      // [R][4] running max, sum, this tile's rescale
  T *ks = reinterpret_cast<T *>(ml + R * 4);       // [kTile][Dh]
  T *vs = ks + kTile * Dh;                         // [kTile][Dh]
  T *nk = vs + kTile * Dh;                         // [Dh] the new key, rotated
  T *nv = nk + Dh;                                 // [Dh] the new value
  const T *qg = static_cast<const T *>(p.q), *kg = static_cast<const T *>(p.k), *vg = static_cast<const T *>(p.v);
  const T *kc = static_cast<const T *>(p.k_cache), *vc = static_cast<const T *>(p.v_cache);
  const int ppr = Dh / EP;  // 16-byte pieces of a row
  const int tk = min(kTile, kPer * kThreads / ppr);  // keys of a tile
  const int items = p.M * p.Hkv * p.chunks;
  for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
    const int c = item % p.chunks, pair = item / p.chunks, kh = pair % p.Hkv, b = pair / p.Hkv;
    int64_t pp = p.pos[b];
    pp = pp < 0 ? 0 : (pp >= L ? L - 1 : pp);
    const int pos = static_cast<int>(pp), used = pos / p.chunk + 1;
    if (c >= used) continue;
    const int start = c * p.chunk, end = min(start + p.chunk, pos + 1);
    const int64_t trow = static_cast<int64_t>(p.tb == 1 ? 0 : b) * Dh;
    const int64_t cache_row0 = (static_cast<int64_t>(b) * p.Hkv + kh) * L;
    // A tile's cached keys and values into registers (the new position's come from shared memory at staging),
    // so that their loads are in flight while the block does something else.
    uint4 pk[kPer], pv[kPer];
    auto fetch = [&](int k0) {
      const int n = min(tk, end - k0) * ppr;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int e = tid + u * kThreads, j = e / ppr, key = k0 + j;
        if (e < n && key != pos) {
          const int64_t at = (cache_row0 + key) * Dh + (e - j * ppr) * EP;
          pk[u] = ldcg4(kc + at);
          pv[u] = ldcg4(vc + at);
        }
      }
    };
    auto stage = [&](int k0) {
      const int n = min(tk, end - k0) * ppr;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int e = tid + u * kThreads, j = e / ppr, key = k0 + j;
        if (e < n) {
          const int q16 = e - j * ppr;
          reinterpret_cast<uint4 *>(ks)[e] = key == pos ? reinterpret_cast<const uint4 *>(nk)[q16] : pk[u];
          reinterpret_cast<uint4 *>(vs)[e] = key == pos ? reinterpret_cast<const uint4 *>(nv)[q16] : pv[u];
        }
      }
    };
    fetch(start);
    // The queries of the head group, rotated and rounded as rope_kv_write stores them.
    for (int e = tid; e < R * Dh; e += kThreads) {
      const int rr = e / Dh, dd = e - rr * Dh;
      const T *src = qg + (static_cast<int64_t>(b) * p.Hq + kh * G + rr) * Dh;
      const float a = ldcg_t(src + dd), o = ldcg_t(src + (dd < half ? dd + half : dd - half));
      const float cs = detail::load_f(p.cos, p.tt, trow + dd), sn = detail::load_f(p.sin, p.tt, trow + dd);
      qs[e] = to_f32(from_f32<T>(detail::rope_forward(a, o, cs, sn, dd < half)));
      os[e] = 0.0f;
    }
    if (tid < R) {
      ml[tid * 4] = -INFINITY;
      ml[tid * 4 + 1] = 0.0f;
    }
    // The chunk that holds the position writes the new key (rotated) and value into the caches.
    if (c == used - 1) {
      const int64_t src = (static_cast<int64_t>(b) * p.Hkv + kh) * Dh;
      const int64_t dst = (cache_row0 + pos) * Dh;
      for (int dd = tid; dd < Dh; dd += kThreads) {
        const float a = ldcg_t(kg + src + dd), o = ldcg_t(kg + src + (dd < half ? dd + half : dd - half));
        const float cs = detail::load_f(p.cos, p.tt, trow + dd), sn = detail::load_f(p.sin, p.tt, trow + dd);
        const T y = from_f32<T>(detail::rope_forward(a, o, cs, sn, dd < half));
        const T vv = from_f32<T>(ldcg_t(vg + src + dd));
        nk[dd] = y;
        nv[dd] = vv;
        static_cast<T *>(p.k_cache)[dst + dd] = y;
        static_cast<T *>(p.v_cache)[dst + dd] = vv;
      }
    }
    __syncthreads();
    for (int k0 = start; k0 < end; k0 += tk) {
      const int nt = min(tk, end - k0);
      stage(k0);
      __syncthreads();
      if (k0 + tk < end) fetch(k0 + tk);  // the next tile's loads go out before this tile's arithmetic
      // Scores: a warp a key, its lanes over the head dim.
      for (int j = warp; j < nt; j += kWarps) {
        float kf[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) kf[u] = u < dq ? to_f32(ks[j * Dh + lane + 32 * u]) : 0.0f;
        for (int rr = 0; rr < R; ++rr) {
          float a = 0.0f;
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (u < dq) a += qs[rr * Dh + lane + 32 * u] * kf[u];
          a = detail::warp_sum(a);
          if (lane == 0) sc[rr * kTile + j] = a * p.scale;
        }
      }
      __syncthreads();
      // The online softmax: a warp a query row, a lane a key.
      for (int rr = warp; rr < R; rr += kWarps) {
        const float s = lane < nt ? sc[rr * kTile + lane] : -INFINITY;
        const float mo = ml[rr * 4], mn = fmaxf(mo, detail::warp_max(s));
        const float alpha = mo == -INFINITY ? 0.0f : expf(mo - mn);
        const float w = lane < nt ? expf(s - mn) : 0.0f;
        sc[rr * kTile + lane] = w;
        const float sum = detail::warp_sum(w);
        if (lane == 0) {
          ml[rr * 4] = mn;
          ml[rr * 4 + 1] = ml[rr * 4 + 1] * alpha + sum;
          ml[rr * 4 + 2] = alpha;
        }
      }
      __syncthreads();
      for (int e = tid; e < R * Dh; e += kThreads) {
        const int rr = e / Dh, dd = e - rr * Dh;
        float a = os[e] * ml[rr * 4 + 2];
        for (int j = 0; j < nt; ++j) a = fmaf(sc[rr * kTile + j], to_f32(vs[j * Dh + dd]), a);
        os[e] = a;
      }
      __syncthreads();
    }
    // The chunk's unnormalised output, maximum and sum; the block that adds the head's last chunk combines
    // the chunks in chunk order.
    for (int e = tid; e < R * (Dh + 2); e += kThreads) {
      const int rr = e / (Dh + 2), dd = e - rr * (Dh + 2);
      const int64_t row = static_cast<int64_t>(b) * p.Hq + kh * G + rr;
      p.part[(row * p.chunks + c) * (Dh + 2) + dd] = dd < Dh ? os[rr * Dh + dd] : ml[rr * 4 + (dd - Dh)];
    }
    if (!arrive_last(p.sync + 2 + pair, static_cast<unsigned>(used), flag)) continue;
    // The chunks' maxima and sums into shared memory first (qs and os are free now: R x used <= R x Dh), then
    // each output element's sum over the chunks.
    const int64_t row0 = static_cast<int64_t>(b) * p.Hq + kh * G;
    for (int e = tid; e < R * used; e += kThreads) {
      const int rr = e / used, cc = e - rr * used;
      const float *at = p.part + ((row0 + rr) * p.chunks + cc) * (Dh + 2) + Dh;
      qs[e] = ldcg_f(at);
      os[e] = ldcg_f(at + 1);
    }
    __syncthreads();
    for (int e = tid; e < R * Dh; e += kThreads) {
      const int rr = e / Dh, dd = e - rr * Dh;
      const float *base = p.part + (row0 + rr) * p.chunks * (Dh + 2);
      float mx = -INFINITY;
      for (int cc = 0; cc < used; ++cc) mx = fmaxf(mx, qs[rr * used + cc]);
      float num = 0.0f, den = 0.0f;
#pragma unroll 4
      for (int cc = 0; cc < used; ++cc) {
        const float mc = qs[rr * used + cc];
        const float f = mc == -INFINITY ? 0.0f : expf(mc - mx);
        num += f * ldcg_f(base + cc * (Dh + 2) + dd);
        den += f * os[rr * used + cc];
      }
      static_cast<T *>(p.attn)[(row0 + rr) * Dh + dd] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
    }
    __syncthreads();  // qs and os are the next item's
  }
}

// Dynamic shared memory: the ring [kDepth][kThreads] of 16-byte slots, the warps' sums [kWarps][MR][TN]
// floats, then the region of x's rows [M][K] as T (phases A, C, D, E) or the attention's tiles (phase B).
template <class T, int MR>
__global__ void __launch_bounds__(kThreads, kMaxBlocksPerSm) decode_layer_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int TN = kColThreads * (16 / static_cast<int>(sizeof(T)));
  __shared__ float nred[kWarps * MR];
  __shared__ int flag;
  uint4 *ring = reinterpret_cast<uint4 *>(smem);
  float *red = reinterpret_cast<float *>(smem + kRingBytes);
  unsigned char *region = smem + kRingBytes + kWarps * MR * TN * sizeof(float);
  T *xs = reinterpret_cast<T *>(region);

  // The first kDepth - 1 weight pieces go out before the wait for the previous kernel where no kernel writes
  // the weights (p.early), then everything else after it.
  stamp(p, 0);
  if (!p.early) detail::pdl_enter();
  Stream<T> st;
  st.phase = 0;
  st.t = -1;
  st.issued = 0;
  st.advance(p);
#pragma unroll 1
  for (int i = 0; i < kDepth - 1; ++i) st.issue(p, ring);
  if (p.early) detail::pdl_enter();
  stamp(p, 1);
  unsigned consumed = 0;

  // A: sum1 = x + residual (block 0 writes it), n1 = rms_norm(sum1) * norm1; q/k/v.
  norm_rows<T, MR>(static_cast<const T *>(p.x), static_cast<const T *>(p.res), static_cast<const T *>(p.g1),
                   blockIdx.x == 0 ? static_cast<T *>(p.sum1) : nullptr, xs, p.M, p.d, p.eps, nred);
  stamp(p, 2);
  product_phase<T, MR, 0>(p, ring, xs, red, st, consumed, &flag);
  stamp(p, 3);
  grid_barrier(p.sync, 1);
  stamp(p, 4);
  // B: rotary, cache writes, attention.
  attention_phase<T>(p, region, &flag);
  stamp(p, 5);
  grid_barrier(p.sync, 2);
  stamp(p, 6);
  // C: o, and sum2 = o + sum1.
  load_rows<T>(static_cast<const T *>(p.attn), xs, p.M, p.Hq * p.Dh);
  product_phase<T, MR, 1>(p, ring, xs, red, st, consumed, &flag);
  stamp(p, 7);
  grid_barrier(p.sync, 3);
  stamp(p, 8);
  // D: n2 = rms_norm(sum2) * norm2; gate/up gated.
  norm_rows<T, MR>(static_cast<const T *>(p.res_out), nullptr, static_cast<const T *>(p.g2), nullptr, xs, p.M, p.d,
                   p.eps, nred);
  product_phase<T, MR, 2>(p, ring, xs, red, st, consumed, &flag);
  stamp(p, 9);
  grid_barrier(p.sync, 4);
  stamp(p, 10);
  // E: down.
  load_rows<T>(static_cast<const T *>(p.h), xs, p.M, p.F);
  product_phase<T, MR, 3>(p, ring, xs, red, st, consumed, &flag);
  cp_async_wait<0>();
  stamp(p, 11);
}

// --- host side ---------------------------------------------------------------------------------------------

int sm_count() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return v;
}

int64_t up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

/// The K split of a product of `strips` strips over K rows on a grid of `grid` blocks: the fewest rows a
/// block streams, counting a fixed 64 rows for each item it finishes (its reduction and the slab's sums);
/// each slab a whole number of row lanes, at least four a thread when split, none empty.
int choose_splits(int64_t K, int64_t strips, int64_t grid) {
  int best = 1;
  int64_t best_cost = -1;
  for (int s = 1; s <= kMaxSplits; ++s) {
    const int64_t kc = s == 1 ? K : up((K + s - 1) / s, kRowLanes);
    if (s > 1 && (kc < 4 * kRowLanes || (s - 1) * kc >= K)) continue;
    const int64_t waves = (strips * s + grid - 1) / grid;
    const int64_t cost = waves * (kc + 64);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

int64_t strip_cols(size_t es, bool gated) { return static_cast<int64_t>(kColThreads * (16 / es) / (gated ? 2 : 1)); }

/// The workspace's rules (zk/cuda_workspace.h, which the plan emitter shares) for a shape.
workspace::DecodeLayerDims dims_of(const DecodeLayerShape &s) {
  return {s.rows, s.dim, s.heads, s.kv_heads, s.head_dim, s.ffn, static_cast<int64_t>(dtype_size(s.dtype))};
}
/// The sync words' bytes where they open the workspace (no DecodeLayerArgs::sync), 256-byte aligned.
uint64_t sync_bytes_of(const DecodeLayerShape &s) {
  return (workspace::decode_layer_sync_words(dims_of(s)) * 4 + 255) / 256 * 256;
}

/// The attention phase's shared memory (attention_phase's layout) for T of es bytes.
size_t attention_smem(size_t es, int64_t group, int64_t dh) {
  const size_t floats = static_cast<size_t>(2 * group * dh + group * kTile + group * 4);
  return (floats * 4 + 15) / 16 * 16 + (2 * kTile + 2) * static_cast<size_t>(dh) * es;
}

template <class T, int MR>
cudaError_t launch_layer(Params p, size_t region, const DecodeLayerLaunch &how, int sms, cudaStream_t s,
                         std::string *why) {
  auto kernel = decode_layer_kernel<T, MR>;
  constexpr int TN = kColThreads * (16 / static_cast<int>(sizeof(T)));
  const size_t smem = kRingBytes + kWarps * MR * TN * sizeof(float) + region;
  // Once per instantiation: the opt-in for the most a launch asks (the ring, the warps' sums and 64 KiB of x
  // rows, more than the attention's tiles ever take).
  // The carveout asks for the most shared memory: the driver may otherwise choose a smaller one at launch than
  // the occupancy API assumed, and the grid (sized by that API) would then not be resident as a whole.
  static const cudaError_t raised = [&] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kRingBytes + kWarps * MR * TN * 4 + 64 * 1024);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }();
  if (raised != cudaSuccess) {
    *why = std::string("decode_layer: the shared memory opt-in is refused (") + cudaGetErrorString(raised) + ")";
    return raised;
  }
  // The blocks an SM holds at this shared memory, asked once per thread and size (a host call of microseconds
  // would otherwise precede every launch).
  thread_local size_t known_smem = 0;
  thread_local int known_fit = 0;
  if (known_smem != smem) {
    int f = 0;
    const cudaError_t oe = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f, kernel, kThreads, smem);
    if (oe != cudaSuccess) return oe;
    known_smem = smem;
    known_fit = f;
  }
  const int fit = known_fit;
  const int64_t resident = static_cast<int64_t>(fit) * sms;
  int64_t grid = how.grid > 0 ? how.grid : static_cast<int64_t>(std::min(fit, kMaxBlocksPerSm)) * sms;
  if (fit < 1 || grid > resident) {
    *why = "decode_layer: a grid of " + std::to_string(grid) + " blocks is more than the " + std::to_string(resident) +
           " that can be resident at once (" + std::to_string(fit) + " a SM with " + std::to_string(smem) +
           " bytes of shared memory, " + std::to_string(sms) +
           " SMs): its grid barriers would wait forever for blocks that cannot start";
    return cudaErrorInvalidConfiguration;
  }
  // The K split of each product on this grid; the attention's chunks (about one block an item).
  for (int ph = 0; ph < 4; ++ph) {
    Prod &pr = p.prod[ph];
    pr.splits = choose_splits(pr.K, pr.strips, grid);
    pr.kc = pr.splits == 1 ? pr.K : static_cast<int>(up((pr.K + pr.splits - 1) / pr.splits, kRowLanes));
  }
  const int64_t pairs = static_cast<int64_t>(p.M) * p.Hkv;
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, grid / pairs));
  p.chunk = static_cast<int>(up((p.L + want - 1) / want, 16));
  p.chunks = static_cast<int>((p.L + p.chunk - 1) / p.chunk);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (how.cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n].val.cooperative = 1;
    ++n;
  }
  cfg.attrs = attr;
  if (detail::pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = n + 1;
    if (cudaLaunchKernelEx(&cfg, kernel, p) == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();
  }
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

}  // namespace

uint64_t decode_layer_workspace(const DecodeLayerShape &shape) {
  return sync_bytes_of(shape) + workspace::decode_layer(dims_of(shape));
}

DecodeLayerOffsets decode_layer_offsets(const DecodeLayerShape &shape) {
  const workspace::DecodeLayerParts l = workspace::decode_layer_parts(dims_of(shape));
  DecodeLayerOffsets o;
  o.sync_bytes = sync_bytes_of(shape);
  o.sum1 = o.sync_bytes + l.sum1, o.q = o.sync_bytes + l.q, o.k = o.sync_bytes + l.k;
  o.v = o.sync_bytes + l.v, o.attn = o.sync_bytes + l.attn, o.h = o.sync_bytes + l.h;
  return o;
}

namespace {

/// decode_layer's checks of its operands, then (launch) its launch.
GpuStatus check_or_launch(const DecodeLayerArgs &a, void *workspace, uint64_t workspace_bytes, cudaStream_t stream,
                          const DecodeLayerLaunch &how, bool launch) {
  const DType t = a.x.dtype;
  if (t != DType::f32 && t != DType::bf16 && t != DType::f16) return kernel_failure("decode_layer: x must be f32, bf16 or f16");
  const Dims &xs = a.x.shape;
  if (xs.rank != 2) return kernel_failure("decode_layer: x must be [M, d]");
  const int64_t M = xs.d[0], d = xs.d[1];
  const Dims &cs = a.k_cache.shape;
  if (cs.rank != 4 || a.v_cache.shape != cs || cs.d[0] != M)
    return kernel_failure("decode_layer: the caches must be [M, kv_heads, L, head_dim], one shape");
  const int64_t Hkv = cs.d[1], L = cs.d[2], Dh = cs.d[3], Hq = a.heads;
  if (M < 1 || M > kStreamMaxRows) return kernel_failure("decode_layer: 1 to 4 rows (the streaming kernel's limit)");
  if (Dh != 64 && Dh != 128) return kernel_failure("decode_layer: the head dim must be 64 or 128");
  if (Hkv < 1 || Hq < Hkv || Hq % Hkv != 0 || Hq / Hkv > 16)
    return kernel_failure("decode_layer: heads must be a multiple of kv_heads, at most 16 query heads a K/V head");
  if (a.kv_heads != 0 && a.kv_heads != Hkv) return kernel_failure("decode_layer: kv_heads differs from the caches'");
  const int64_t F = a.w_gate.shape.rank == 2 ? a.w_gate.shape.d[1] : 0;
  auto is_mat = [&](const In &w, int64_t k, int64_t n) {
    return w.dtype == t && w.shape.rank == 2 && w.shape.d[0] == k && w.shape.d[1] == n;
  };
  auto is_vec = [&](const In &v, int64_t n) { return v.dtype == t && v.shape.numel() == n; };
  if (a.residual.data && (a.residual.dtype != t || a.residual.shape != xs))
    return kernel_failure("decode_layer: residual must be x's shape and dtype");
  if (!is_vec(a.norm1, d) || !is_vec(a.norm2, d)) return kernel_failure("decode_layer: norm1 and norm2 must be [d] of x's dtype");
  if (!is_mat(a.wq, d, Hq * Dh) || !is_mat(a.wk, d, Hkv * Dh) || !is_mat(a.wv, d, Hkv * Dh))
    return kernel_failure("decode_layer: wq, wk, wv must be [d, heads x head_dim], [d, kv_heads x head_dim] x 2");
  if (!is_mat(a.wo, Hq * Dh, d)) return kernel_failure("decode_layer: wo must be [heads x head_dim, d]");
  if (F < 1 || !is_mat(a.w_gate, d, F) || !is_mat(a.w_up, d, F) || !is_mat(a.w_down, F, d))
    return kernel_failure("decode_layer: w_gate and w_up must be [d, ffn], w_down [ffn, d]");
  if (a.k_cache.dtype != t || a.v_cache.dtype != t) return kernel_failure("decode_layer: the caches must be x's dtype");
  if (a.out.dtype != t || a.out.shape != xs || a.residual_out.dtype != t || a.residual_out.shape != xs)
    return kernel_failure("decode_layer: out and residual_out must be x's shape and dtype");
  if (a.pos.dtype != DType::i64 || a.pos.shape != Dims{M}) return kernel_failure("decode_layer: pos must be i64 [M]");
  const Dims &ts = a.cos.shape;
  if (a.sin.shape != ts || a.sin.dtype != a.cos.dtype || !is_float(a.cos.dtype) || ts.rank != 4 ||
      (ts.d[0] != 1 && ts.d[0] != M) || ts.d[1] != 1 || ts.d[2] != 1 || ts.d[3] != Dh)
    return kernel_failure("decode_layer: cos and sin must be [1 or M, 1, 1, head_dim] of one float dtype");
  if (d % 8 != 0 || F % 8 != 0) return kernel_failure("decode_layer: d and ffn must be multiples of 8 (16-byte pieces)");
  if (a.act != Unary::silu && a.act != Unary::gelu_tanh && a.act != Unary::gelu_erf)
    return kernel_failure("decode_layer: the activation must be silu, gelu_tanh or gelu_erf");
  const void *const operands[] = {a.x.data,     a.residual.data, a.norm1.data,     a.norm2.data,        a.wq.data,
                                   a.wk.data,    a.wv.data,       a.wo.data,        a.w_gate.data,       a.w_up.data,
                                   a.w_down.data, a.k_cache.data, a.v_cache.data,   a.out.data,          a.residual_out.data,
                                   workspace,    a.sync};
  for (const void *ptr : operands)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return kernel_failure("decode_layer: every operand and the workspace must be 16-byte aligned");
  if (M * std::max({d, F, Hq * Dh}) * static_cast<int64_t>(dtype_size(t)) > 64 * 1024)
    return kernel_failure("decode_layer: x's rows exceed 64 KiB of shared memory (rows x max(d, ffn, heads x head_dim))");
  if (M * Hkv * L * Dh >= (int64_t{1} << 40) || d * std::max(F, Hq * Dh) >= (int64_t{1} << 31) ||
      M * F * kMaxSplits * 2 >= (int64_t{1} << 31))
    return kernel_failure("decode_layer: shapes beyond the kernel's 32-bit element indices");
  if (!launch) return {};
  const DecodeLayerShape shape{t, M, d, Hq, Hkv, Dh, F, L};
  const workspace::DecodeLayerParts l = workspace::decode_layer_parts(dims_of(shape));
  // The sync words: the caller's (the plan's zero-initialised state), or the workspace's first bytes.
  const uint64_t sync_room = a.sync ? 0 : sync_bytes_of(shape);
  if (!workspace || workspace_bytes < sync_room + l.bytes)
    return kernel_failure(a.sync ? "decode_layer: the workspace is smaller than workspace::decode_layer(...)"
                                 : "decode_layer: the workspace is smaller than decode_layer_workspace(...)");
  const int sms = sm_count();
  if (sms < 1) return kernel_failure("decode_layer: no CUDA device to size the grid on");

  auto *ws = static_cast<unsigned char *>(workspace);
  Params p = {};
  p.x = a.x.data, p.res = a.residual.data, p.g1 = a.norm1.data, p.g2 = a.norm2.data;
  p.cos = a.cos.data, p.sin = a.sin.data, p.pos = static_cast<const int64_t *>(a.pos.data);
  p.k_cache = a.k_cache.data, p.v_cache = a.v_cache.data, p.out = a.out.data, p.res_out = a.residual_out.data;
  p.sync = a.sync ? static_cast<unsigned *>(a.sync) : reinterpret_cast<unsigned *>(ws);
  ws += sync_room;
  // Without a residual, sum1 is x itself (a first layer: the norm of the embedding, no add).
  p.sum1 = a.residual.data ? static_cast<void *>(ws + l.sum1) : const_cast<void *>(a.x.data);
  p.q = ws + l.q, p.k = ws + l.k, p.v = ws + l.v, p.attn = ws + l.attn, p.h = ws + l.h;
  p.part = reinterpret_cast<float *>(ws + l.part);
  p.M = static_cast<int>(M), p.d = static_cast<int>(d), p.Hq = static_cast<int>(Hq), p.Hkv = static_cast<int>(Hkv);
  p.Dh = static_cast<int>(Dh), p.F = static_cast<int>(F), p.L = static_cast<int>(L), p.tb = static_cast<int>(ts.d[0]);
  p.tt = a.cos.dtype;
  p.eps = a.eps, p.scale = a.scale, p.act = static_cast<int>(a.act), p.early = a.early ? 1 : 0;
  p.stamps = how.stamps;
  const size_t es = dtype_size(t);
  const int64_t tn = strip_cols(es, false);
  auto set = [&](Prod &pr, int count, const void *w0, const void *w1, const void *w2, int64_t n0, int64_t n1, int64_t n2,
                 int64_t K, bool gated) {
    pr.count = count;
    pr.w[0] = w0, pr.w[1] = w1, pr.w[2] = w2;
    pr.n[0] = static_cast<int>(n0), pr.n[1] = static_cast<int>(n1), pr.n[2] = static_cast<int>(n2);
    const int64_t cols = gated ? tn / 2 : tn;
    int64_t strips = 0;
    const int64_t n[3] = {n0, n1, n2};
    for (int i = 0; i < 3; ++i) {
      if (i < count) strips += (n[i] + cols - 1) / cols;
      pr.end[i] = static_cast<int>(strips);
    }
    pr.strips = static_cast<int>(strips);
    pr.K = static_cast<int>(K);
  };
  set(p.prod[0], 3, a.wq.data, a.wk.data, a.wv.data, Hq * Dh, Hkv * Dh, Hkv * Dh, d, false);
  p.prod[0].dst[0] = p.q, p.prod[0].dst[1] = p.k, p.prod[0].dst[2] = p.v;
  set(p.prod[1], 1, a.wo.data, nullptr, nullptr, d, 0, 0, Hq * Dh, false);
  set(p.prod[2], 1, a.w_gate.data, a.w_up.data, nullptr, F, 0, 0, d, true);
  set(p.prod[3], 1, a.w_down.data, nullptr, nullptr, d, 0, 0, F, false);
  const size_t region = std::max(static_cast<size_t>(M * std::max({d, F, Hq * Dh})) * es, attention_smem(es, Hq / Hkv, Dh));
  std::string why;
  cudaError_t e;
  const bool one = M == 1;
  switch (t) {
    case DType::bf16:
      e = one ? launch_layer<__nv_bfloat16, 1>(p, region, how, sms, stream, &why)
              : launch_layer<__nv_bfloat16, 4>(p, region, how, sms, stream, &why);
      break;
    case DType::f16:
      e = one ? launch_layer<__half, 1>(p, region, how, sms, stream, &why)
              : launch_layer<__half, 4>(p, region, how, sms, stream, &why);
      break;
    default:
      e = one ? launch_layer<float, 1>(p, region, how, sms, stream, &why)
              : launch_layer<float, 4>(p, region, how, sms, stream, &why);
      break;
  }
  if (!why.empty()) return kernel_failure(why.c_str());
  ZK_CUDA_TRY(e);
  return {};
}

}  // namespace

GpuStatus decode_layer_check(const DecodeLayerArgs &args) {
  return check_or_launch(args, nullptr, 0, nullptr, DecodeLayerLaunch{}, false);
}

GpuStatus decode_layer(const DecodeLayerArgs &args, void *workspace, uint64_t workspace_bytes, cudaStream_t stream,
                       const DecodeLayerLaunch &how) {
  return check_or_launch(args, workspace, workspace_bytes, stream, how, true);
}

}  // namespace cuda
}  // namespace zk
