// Decode attention (cached_attention on the decode path, docs/generation.md): the new queries of each
// sequence attend over its KV cache. A decode step reads the whole cache written so far and does little
// arithmetic on it, and at batch 1 that cache is about a megabyte: the kernel's time is a chain of memory
// latencies more than a transfer, so it is built to keep that chain short and the whole GPU reading:
//
// - Grouped-query attention: one block serves one K/V head and every query row that shares it (the query
//   heads of its group, times the rows of the step), so each key and value is read once per step.
// - Flash-decoding: the cache of each (sequence, K/V head) is split into chunks of positions, one block each,
//   so that a batch of one still puts 64 blocks on the GPU (zk/cuda_workspace.h: up to eight chunks, fewer
//   as the batch grows; a function of the shapes alone). Up to eight chunks are the blocks of one
//   thread-block cluster: each block writes its unnormalised output, maximum and sum into the shared memory
//   of the cluster's first block, which combines them and writes the output, all in one launch. More chunks
//   (long caches at small batches) go through the workspace and a second kernel. One chunk writes the output
//   itself.
// - Within a block each warp takes its own keys: a key row is read by the 4, 8 or 16 lanes that hold 16 bytes
//   of it each (a warp reads whole consecutive rows, coalesced), the score is summed over those lanes by
//   shuffles, and the warp keeps its own online softmax (running maximum and sum in the base-2 domain, the
//   scale folded into the queries, fp32 throughout). A round issues every key load of up to 128 positions at
//   once into registers and the same positions' value rows into shared memory (cp.async, each lane its own
//   16 bytes, so no barrier), so a chunk at batch 1 is one round trip to memory. The warps' partial results
//   are merged through shared memory at the end.
// - Launched as a programmatic dependent (common.cuh, launch_pdl): its launch overlaps the previous kernel.
// - rope_attention (plan 2.16) is the same kernel with kRope: each block first rotates the query rows it
//   serves and the step's new keys into shared memory (one element a thread, rounded as the rotary step
//   rounds it), the block whose chunk holds a new position writes its key and value into the caches, and the
//   round takes the new keys and values from shared memory where the others come from the cache. One kernel
//   where rope_kv_write and the attention were two. (A first form rotated each lane's pieces inside the
//   unrolled round: 226 registers and half the warps' stalls on instruction fetch, 27 us a launch under ncu at
//   llama-1b's batch 1 against 11 + 4.3 us for the two kernels; session 10.)
//
// The oracle is the CPU reference kernel (kernels/cpu/generate.cpp), tests/cuda/generate_kernels_test.cpp.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "zk/cuda_decode.h"
#include "zk/cuda_train_kernels.h"
#include "zk/cuda_workspace.h"

namespace zk {
namespace cuda {
namespace {

namespace cg = cooperative_groups;

using detail::from_f32;
using detail::launched;
using detail::Piece;

constexpr int kThreadsPerBlock = 128;
constexpr int kWarps = kThreadsPerBlock / 32;
constexpr int kMaxRows = 8;  // query rows per K/V head a block serves
constexpr int kMaxClusterChunks = static_cast<int>(workspace::kDecodeClusterChunks);
constexpr float kLog2e = 1.4426950408889634f;

/// rope_attention's operands beside the attention's: the step's new keys and values [B, Hkv, S, D] (not yet
/// rotated), the tables [t0 = 1 or B, 1, t2 = 1 or S, D] of dtype tt, and the caches to write (the same
/// tensors the attention reads as k and v).
struct RopeArgs {
  const void *k_new = nullptr, *v_new = nullptr, *cos = nullptr, *sin = nullptr;
  void *k_cache = nullptr, *v_cache = nullptr;
  DType tt = DType::f32;
  int t0 = 1, t2 = 1;
  // The caller knows that the previous kernel writes neither the caches nor the positions: the first round's
  // loads of the cached keys and values (below the step's positions) go out before the wait for it.
  int early = 0;
};

/// The kernel's geometry for element type T, head dim DH and at most MR query rows.
template <class T, int DH, int MR>
struct Geometry {
  static constexpr int kVec = Piece<T>::n;             // elements of a 16-byte piece
  static constexpr int kLanesPerKey = DH / kVec;       // lanes that read one key row: 4 .. 32
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kKeysPerPass = kWarps * kKeysPerWarp;
  // Passes of a round: every lane has this many key pieces (registers) and value pieces (shared memory) in
  // flight. Fewer at eight rows, where the queries and the accumulators take twice the registers.
  static constexpr int kPasses = MR >= 8 ? 4 : 8;
  static constexpr int kKeysPerRound = kPasses * kKeysPerPass;
  static constexpr int kStageBytes = kPasses * kThreadsPerBlock * 16;
  static_assert(kLanesPerKey >= 1 && kLanesPerKey <= 32 && 32 % kLanesPerKey == 0, "a key row is 1..32 pieces");
};

/// Shared memory of one block: the staged values, the warps' partial outputs, maxima and sums, and (in a
/// cluster's first block) every chunk's merged output, maximum and sum; with kRope (rope_rows > 0: the step's
/// rows S) the rotated query rows as floats [rows][DH] and the new keys and values [S][DH] as T, 16-byte
/// aligned.
template <class T, int DH, int MR>
__host__ __device__ constexpr size_t smem_bytes(int rows, int cluster_chunks, int rope_rows = 0) {
  const size_t base = Geometry<T, DH, MR>::kStageBytes +
                      sizeof(float) * (static_cast<size_t>(kWarps) * rows * (DH + 2) +
                                       static_cast<size_t>(cluster_chunks) * rows * (DH + 2));
  if (rope_rows == 0) return base;
  return (base + 15) / 16 * 16 + sizeof(float) * rows * DH + 2 * sizeof(T) * rope_rows * DH;
}

// Grid (chunk, K/V head, sequence). R = (Hq / Hkv) * S <= MR query rows share the K/V head; row r is query
// head kh * G + r / S, query row r % S. `clustered`: the grid's x is one cluster (splits <= 8 chunks).
template <class T, int DH, int MR, bool kRope>
__global__ void __launch_bounds__(kThreadsPerBlock)
    decode_attention_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                            const int64_t *__restrict__ pos, T *__restrict__ out, float *__restrict__ part_o,
                            float *__restrict__ part_ml, int Hq, int Hkv, int S, int L, int chunk, int splits,
                            float scale, int clustered, RopeArgs ra) {
  using Geo = Geometry<T, DH, MR>;
  constexpr int kVec = Geo::kVec, kLpk = Geo::kLanesPerKey, kKpw = Geo::kKeysPerWarp, kPasses = Geo::kPasses;
  if (clustered) detail::cluster_arrive_relaxed();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = lane / kLpk, piece = lane % kLpk;  // the lane's key of a pass and its 16 bytes of the row
  const int G = Hq / Hkv, R = G * S;
  uint4 *stage = reinterpret_cast<uint4 *>(smem);                   // [kPasses][threads]
  float *wo = reinterpret_cast<float *>(smem + Geo::kStageBytes);  // [warps][R][DH]
  float *wml = wo + kWarps * R * DH;                                 // [warps][R][2]
  float *co = wml + kWarps * R * 2;                                  // [splits][R][DH], cluster rank 0
  float *cml = co + (clustered ? splits : 0) * R * DH;               // [splits][R][2]
  // kRope: the rotated query rows [R][DH] (floats), then the new keys and values [S][DH] (T).
  const size_t rope_at = (smem_bytes<T, DH, MR>(R, clustered ? splits : 0) + 15) / 16 * 16;
  float *rq = reinterpret_cast<float *>(smem + rope_at);
  T *nk = reinterpret_cast<T *>(rq + R * DH), *nv = nk + S * DH;

  // The lane's piece of each query row, pre-multiplied by scale * log2(e): scores come out in base 2.
  const float qscale = scale * kLog2e;
  float qr[MR][kVec];
  const int start = split * chunk;
  const int64_t base = (static_cast<int64_t>(b) * Hkv + kh) * L * DH + piece * kVec;
  const T *kb = k + base, *vb = v + base;
  const unsigned stage_addr = static_cast<unsigned>(__cvta_generic_to_shared(stage + tid));
  int64_t p = 0;
  int t_max = 0, end = start;
  // The sequence's position (clamped: the launcher cannot read device positions) and the chunk's range.
  auto locate = [&]() {
    p = pos[b];
    p = p < 0 ? 0 : (p >= L ? L - 1 : p);
    t_max = static_cast<int>(min(p + S, static_cast<int64_t>(L)));
    end = max(start, min(start + chunk, t_max));
  };
  // A round's loads: every cached key piece into registers, every value piece into this lane's slots of
  // shared memory (zero-filled past the chunk's end, so that a weight of 0 never meets a stale value). The keys
  // of this step (kRope: p <= key < p + S) are left out; the round takes them from shared memory.
  uint4 kr[kPasses];
  auto issue = [&](int round) {
#pragma unroll
    for (int pp = 0; pp < kPasses; ++pp) {
      const int key = round + pp * Geo::kKeysPerPass + warp * kKpw + slot;
      const bool in = key < end, fresh = kRope && in && key >= p;
      kr[pp] = in && !fresh ? *reinterpret_cast<const uint4 *>(kb + static_cast<int64_t>(key) * DH)
                            : make_uint4(0, 0, 0, 0);
      if (fresh) continue;
      const T *src = in ? vb + static_cast<int64_t>(key) * DH : vb;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(stage_addr + pp * kThreadsPerBlock * 16),
                   "l"(src), "r"(in ? 16 : 0)
                   : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  const bool early = kRope && ra.early;
  if (early) {
    locate();
    if (start < end) issue(start);
  }
  ::zk::cuda::detail::pdl_enter();
  if (!early) locate();
  if (kRope) {
    // The rotary of the query rows this block serves and of the step's new keys (forward, pairs (d, d + DH/2),
    // the products rounded before the sum as the rotary step computes them), one element a thread; the new
    // values beside them. The block whose chunk holds a new position writes its key and value into the caches.
    const int nq = R * DH, nkv = S * DH, half = DH / 2;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * chunk;
    for (int e = tid; e < nq + 2 * nkv; e += kThreadsPerBlock) {
      const int w = e < nq ? e : e < nq + nkv ? e - nq : e - nq - nkv;
      const int row = w / DH, d = w % DH, j = e < nq ? row % S : row;
      const int64_t key = p + j;
      const bool mine = e >= nq && key < L && key >= first && key < first + chunk;
      const int64_t at = ((static_cast<int64_t>(b) * Hkv + kh) * L + key) * DH + d;
      if (e >= nq + nkv) {  // a new value
        const T x = static_cast<const T *>(ra.v_new)[((static_cast<int64_t>(b) * Hkv + kh) * S + j) * DH + d];
        nv[w] = x;
        if (mine) static_cast<T *>(ra.v_cache)[at] = x;
        continue;
      }
      const T *src = e < nq ? q + ((static_cast<int64_t>(b) * Hq + kh * G + row / S) * S + j) * DH
                            : static_cast<const T *>(ra.k_new) + ((static_cast<int64_t>(b) * Hkv + kh) * S + j) * DH;
      const float a = detail::to_f32(src[d]), o = detail::to_f32(src[d < half ? d + half : d - half]);
      const int64_t ti = (static_cast<int64_t>(ra.t0 == 1 ? 0 : b) * ra.t2 + (ra.t2 == 1 ? 0 : j)) * DH + d;
      const float c = detail::load_f(ra.cos, ra.tt, ti), sn = detail::load_f(ra.sin, ra.tt, ti);
      const T y = from_f32<T>(detail::rope_forward(a, o, c, sn, d < half));
      if (e < nq) {
        rq[w] = detail::to_f32(y);
      } else {
        nk[w] = y;
        if (mine) static_cast<T *>(ra.k_cache)[at] = y;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r < R) {
      const int h = kh * G + r / S, i = r % S;
      if (kRope) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) qr[r][e] = rq[r * DH + piece * kVec + e];
      } else {
        Piece<T>::unpack(
            *reinterpret_cast<const uint4 *>(q + ((static_cast<int64_t>(b) * Hq + h) * S + i) * DH + piece * kVec),
            qr[r]);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) qr[r][e] *= qscale;
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) qr[r][e] = 0.0f;
    }
  }
  // A chunk past this sequence's cache has nothing to add: the combine kernel leaves it out. In a cluster
  // the block stays (every block takes part in the cluster's barriers) with an empty range.
  if (start >= t_max && !clustered) return;

  float m[MR], l[MR], o[MR][kVec];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o[r][e] = 0.0f;
  }
  for (int round = start; round < end; round += Geo::kKeysPerRound) {
    if (!(early && round == start)) issue(round);
    if (kRope) {
      // The keys of this step (p <= key < p + S, key < L): the rotated key and the value from shared memory.
#pragma unroll
      for (int pp = 0; pp < kPasses; ++pp) {
        const int key = round + pp * Geo::kKeysPerPass + warp * kKpw + slot;
        if (key < end && key >= p) {
          const int j = static_cast<int>(key - p);
          kr[pp] = *reinterpret_cast<const uint4 *>(nk + j * DH + piece * kVec);
          stage[pp * kThreadsPerBlock + tid] = *reinterpret_cast<const uint4 *>(nv + j * DH + piece * kVec);
        }
      }
    }

    // Scores: the lane's partial dot products, summed over the lanes of the key.
    float s[kPasses][MR];
#pragma unroll
    for (int pp = 0; pp < kPasses; ++pp) {
      float x[kVec];
      Piece<T>::unpack(kr[pp], x);
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) a += qr[r][e] * x[e];
        s[pp][r] = a;
      }
    }
#pragma unroll
    for (int off = 1; off < kLpk; off <<= 1)
#pragma unroll
      for (int pp = 0; pp < kPasses; ++pp)
#pragma unroll
        for (int r = 0; r < MR; ++r) s[pp][r] += __shfl_xor_sync(0xffffffffu, s[pp][r], off);

    // The warp's online softmax: row r sees the keys 0 .. p + r % S of the chunk.
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int pp = 0; pp < kPasses; ++pp) {
        const int key = round + pp * Geo::kKeysPerPass + warp * kKpw + slot;
        if (!(key < end && key <= p + r % S)) s[pp][r] = -INFINITY;
        mx = fmaxf(mx, s[pp][r]);
      }
#pragma unroll
      for (int off = kLpk; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[r], mx);
      const float alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int pp = 0; pp < kPasses; ++pp) {
        const float w = m_new == -INFINITY ? 0.0f : exp2f(s[pp][r] - m_new);
        s[pp][r] = w;
        sum += w;
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[r][e] *= alpha;
    }

    // The weighted sum over this lane's keys, from the values it staged itself.
    asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
    for (int pp = 0; pp < kPasses; ++pp) {
      float x[kVec];
      Piece<T>::unpack(stage[pp * kThreadsPerBlock + tid], x);
#pragma unroll
      for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int e = 0; e < kVec; ++e) o[r][e] += s[pp][r] * x[e];
    }
  }

  // The warp's sums over its keys (the lanes of one piece hold different keys), then the warps' results into
  // shared memory: the lanes of key slot 0 hold the warp's output, piece by piece.
#pragma unroll
  for (int off = kLpk; off < 32; off <<= 1)
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[r][e] += __shfl_xor_sync(0xffffffffu, o[r][e], off);
    }
#pragma unroll
  for (int r = 0; r < MR; ++r)
    if (r < R) {
      if (slot == 0)
#pragma unroll
        for (int e = 0; e < kVec; ++e) wo[(warp * R + r) * DH + piece * kVec + e] = o[r][e];
      if (lane == 0) {
        wml[(warp * R + r) * 2] = m[r];
        wml[(warp * R + r) * 2 + 1] = l[r];
      }
    }
  __syncthreads();

  // The block's result: the warps' outputs weighted by 2^(m_w - max m), normalised where one chunk covers the
  // cache, else left for the combine.
  float *dst_o = part_o, *dst_ml = part_ml;
  if (clustered) {
    cg::cluster_group cluster = cg::this_cluster();
    detail::cluster_wait();  // every block of the cluster has started: its shared memory may be written
    dst_o = cluster.map_shared_rank(co, 0);
    dst_ml = cluster.map_shared_rank(cml, 0);
  }
  for (int e = tid; e < R * DH; e += kThreadsPerBlock) {
    const int r = e / DH, d = e % DH;
    float mb = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mb = fmaxf(mb, wml[(w * R + r) * 2]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = wml[(w * R + r) * 2];
      const float f = mw == -INFINITY ? 0.0f : exp2f(mw - mb);
      num += f * wo[(w * R + r) * DH + d];
      den += f * wml[(w * R + r) * 2 + 1];
    }
    const int h = kh * G + r / S, i = r % S;
    const int64_t row = (static_cast<int64_t>(b) * Hq + h) * S + i;
    if (splits == 1) {
      out[row * DH + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
    } else if (clustered) {
      dst_o[(split * R + r) * DH + d] = num;
      if (d == 0) {
        dst_ml[(split * R + r) * 2] = mb;
        dst_ml[(split * R + r) * 2 + 1] = den;
      }
    } else {
      dst_o[(row * splits + split) * DH + d] = num;
      if (d == 0) {
        dst_ml[(row * splits + split) * 2] = mb;
        dst_ml[(row * splits + split) * 2 + 1] = den;
      }
    }
  }
  if (!clustered) return;

  // The cluster's first block combines the chunks, weighted by 2^(m_c - max m).
  detail::cluster_sync();
  if (split != 0) return;
  for (int e = tid; e < R * DH; e += kThreadsPerBlock) {
    const int r = e / DH, d = e % DH;
    float mx = -INFINITY;
    for (int c = 0; c < splits; ++c) mx = fmaxf(mx, cml[(c * R + r) * 2]);
    float num = 0.0f, den = 0.0f;
    for (int c = 0; c < splits; ++c) {
      const float mc = cml[(c * R + r) * 2];
      const float f = mc == -INFINITY ? 0.0f : exp2f(mc - mx);
      num += f * co[(c * R + r) * DH + d];
      den += f * cml[(c * R + r) * 2 + 1];
    }
    const int h = kh * G + r / S, i = r % S;
    out[((static_cast<int64_t>(b) * Hq + h) * S + i) * DH + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// One block per query row, a thread per output element: the chunks' outputs weighted by 2^(m_c - max m).
template <class T>
__global__ void decode_combine_kernel(const float *__restrict__ part_o, const float *__restrict__ part_ml,
                                      const int64_t *__restrict__ pos, T *__restrict__ out, int Hq, int S, int L,
                                      int chunk, int splits, int DH) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t row = blockIdx.x;
  const int64_t b = row / (static_cast<int64_t>(S) * Hq);
  int64_t p = pos[b];
  p = p < 0 ? 0 : (p >= L ? L - 1 : p);
  const int t_max = static_cast<int>(min(p + S, static_cast<int64_t>(L)));
  const int used = min(splits, (t_max + chunk - 1) / chunk);
  const float *ml = part_ml + row * splits * 2;
  float m = -INFINITY;
  for (int c = 0; c < used; ++c) m = fmaxf(m, ml[2 * c]);
  for (int d = threadIdx.x; d < DH; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int c = 0; c < used; ++c) {
      const float mc = ml[2 * c];
      const float w = mc == -INFINITY ? 0.0f : exp2f(mc - m);
      num += w * part_o[(row * splits + c) * DH + d];
      den += w * ml[2 * c + 1];
    }
    out[row * DH + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

template <class T, int DH, int MR, bool kRope>
cudaError_t launch_decode(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                          void *workspace, const RopeArgs &ra, cudaStream_t s) {
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Hkv = k.shape.d[1], L = k.shape.d[2];
  const int64_t chunk = workspace::decode_attention_chunk(B, Hkv, L);
  const int64_t splits = workspace::decode_attention_splits(B, Hkv, L);
  const int R = static_cast<int>((Hq / Hkv) * S);
  float *part_o = static_cast<float *>(workspace);
  float *part_ml = splits > 1 ? part_o + B * Hq * S * splits * DH : nullptr;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(Hkv), static_cast<unsigned>(B));
  // Up to 8 chunks (a portable cluster) combine in the kernel itself; more go through the workspace and
  // the combine kernel.
  const int clustered = splits > 1 && splits <= kMaxClusterChunks ? 1 : 0;
  const size_t smem = smem_bytes<T, DH, MR>(R, clustered ? static_cast<int>(splits) : 0, kRope ? static_cast<int>(S) : 0);
  // Above the default 48 KiB (eight rows of head dim 128 in a cluster of eight) the kernel must ask for it,
  // once per instantiation, for the most any launch of it takes.
  constexpr size_t kMost = smem_bytes<T, DH, MR>(MR, kMaxClusterChunks, kRope ? MR : 0);
  if (kMost > 48 * 1024) {
    static const cudaError_t raised =
        cudaFuncSetAttribute(decode_attention_kernel<T, DH, MR, kRope>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kMost));
    if (raised != cudaSuccess) return raised;
  }
  const cudaError_t e = ::zk::cuda::detail::launch_pdl_cluster(
      decode_attention_kernel<T, DH, MR, kRope>, dim3(grid), dim3(kThreadsPerBlock), smem, s,
      clustered ? static_cast<int>(splits) : 1, static_cast<const T *>(q.data), static_cast<const T *>(k.data),
      static_cast<const T *>(v.data), static_cast<const int64_t *>(pos.data), static_cast<T *>(out.data), part_o,
      part_ml, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(S), static_cast<int>(L),
      static_cast<int>(chunk), static_cast<int>(splits), scale, clustered, ra);
  if (e != cudaSuccess) return e;
  if (splits > 1 && !clustered)
    ::zk::cuda::detail::launch_pdl(
        decode_combine_kernel<T>, dim3(static_cast<unsigned>(B * Hq * S)), dim3(DH), 0, s, part_o, part_ml,
        static_cast<const int64_t *>(pos.data), static_cast<T *>(out.data), static_cast<int>(Hq),
        static_cast<int>(S), static_cast<int>(L), static_cast<int>(chunk), static_cast<int>(splits), DH);
  return launched();
}

template <class T, int DH, bool kRope>
cudaError_t launch_rows(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                        void *workspace, const RopeArgs &ra, cudaStream_t s) {
  // The smallest instantiation that holds the rows: registers scale with it.
  const int64_t R = (q.shape.d[1] / k.shape.d[1]) * q.shape.d[2];
  if (R <= 1) return launch_decode<T, DH, 1, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
  if (R <= 2) return launch_decode<T, DH, 2, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
  if (R <= 4) return launch_decode<T, DH, 4, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
  return launch_decode<T, DH, kMaxRows, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
}

template <class T, bool kRope>
cudaError_t launch_typed(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                         void *workspace, const RopeArgs &ra, cudaStream_t s) {
  return q.shape.d[3] == 64 ? launch_rows<T, 64, kRope>(q, k, v, pos, out, scale, workspace, ra, s)
                            : launch_rows<T, 128, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
}

template <bool kRope>
cudaError_t launch_dtype(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                         void *workspace, const RopeArgs &ra, cudaStream_t s) {
  switch (q.dtype) {
    case DType::bf16: return launch_typed<__nv_bfloat16, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
    case DType::f16: return launch_typed<__half, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
    default: return launch_typed<float, kRope>(q, k, v, pos, out, scale, workspace, ra, s);
  }
}

}  // namespace

bool decode_attention_supported(const In &q, const In &k, const In &v, const In &pos, const Out &out) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape != k.shape || out.shape != q.shape) return false;
  if (k.dtype != q.dtype || v.dtype != q.dtype || out.dtype != q.dtype || !is_float(q.dtype)) return false;
  if (pos.dtype != DType::i64) return false;
  const int64_t Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3], Hkv = k.shape.d[1];
  if (Dh != 64 && Dh != 128) return false;
  if (Hkv <= 0 || Hq % Hkv != 0 || (Hq / Hkv) * S > kMaxRows) return false;
  // 16-byte row loads.
  for (const void *p : {q.data, k.data, v.data, const_cast<const void *>(out.data)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return k.shape.d[2] < (int64_t{1} << 30) && q.shape.d[0] <= 65535 && Hkv <= 65535;
}

GpuStatus decode_attention(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                           void *workspace, cudaStream_t s) {
  if (!decode_attention_supported(q, k, v, pos, out))
    return kernel_failure("decode_attention: operands outside the kernel's cases (see decode_attention_supported)");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3], L = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh || S > L) return kernel_failure("decode_attention: the caches do not fit q");
  if (pos.shape != Dims{B}) return kernel_failure("decode_attention: pos must be i64 [B]");
  if (B * Hq * S == 0) return {};
  if (workspace::cached_attention(B, Hq, S, Dh, k.shape.d[1], L) > 0 && !workspace)
    return kernel_failure("decode_attention: no workspace for the chunks' partial results");
  ZK_CUDA_TRY(launch_dtype<false>(q, k, v, pos, out, scale, workspace, RopeArgs{}, s));
  return {};
}

GpuStatus rope_attention(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                         const Out &out, const Out &k_cache, const Out &v_cache, float scale, void *workspace,
                         bool early, cudaStream_t s) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape != k.shape || k_cache.shape.rank != 4 ||
      v_cache.shape != k_cache.shape || out.shape != q.shape)
    return kernel_failure("rope_attention: q, k, v, the caches and out must be rank 4 (v as k, out as q)");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], D = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], L = k_cache.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[2] != S || k.shape.d[3] != D || D % 2 != 0 || k_cache.shape.d[0] != B ||
      k_cache.shape.d[1] != Hkv || k_cache.shape.d[3] != D || S > L || Hkv <= 0 || Hq % Hkv != 0)
    return kernel_failure("rope_attention: the shapes do not fit ([B, H, S, D] with an even D, caches [B, Hkv, L, D])");
  const Dims &t = cos.shape;
  if (sin.shape != t || sin.dtype != cos.dtype || !is_float(cos.dtype) || t.rank != 4 || (t.d[0] != 1 && t.d[0] != B) ||
      t.d[1] != 1 || (t.d[2] != 1 && t.d[2] != S) || t.d[3] != D)
    return kernel_failure("rope_attention: cos and sin must be [1 or B, 1, 1 or S, D] of one float dtype");
  const In kc{k_cache.data, k_cache.dtype, k_cache.shape}, vc{v_cache.data, v_cache.dtype, v_cache.shape};
  // The workspace: room for the rotated q first (zk/cuda_workspace.h), then the attention's partial results.
  void *rest = workspace ? static_cast<char *>(workspace) +
                               workspace::rope_attention_q(q.shape.numel(), static_cast<int64_t>(dtype_size(q.dtype)))
                         : nullptr;
  const bool fused = decode_attention_supported(q, kc, vc, pos, out) && k.dtype == q.dtype && v.dtype == q.dtype &&
                     reinterpret_cast<uintptr_t>(k.data) % 16 == 0 && reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
  if (!fused) {
    // Two kernels: the rotary step writes the rotated q into the workspace's first bytes, the attention reads it.
    if (!workspace) return kernel_failure("rope_attention: no workspace for the rotated q");
    const Out q_rot{workspace, q.dtype, q.shape};
    if (GpuStatus st = rope_kv_write(q, k, v, cos, sin, pos, q_rot, k_cache, v_cache, s); !st.ok()) return st;
    const In qr{q_rot.data, q.dtype, q.shape};
    if (decode_attention_supported(qr, kc, vc, pos, out)) return decode_attention(qr, kc, vc, pos, out, scale, rest, s);
    return cached_attention(qr, kc, vc, pos, out, scale, s);
  }
  if (pos.shape != Dims{B}) return kernel_failure("rope_attention: pos must be i64 [B]");
  if (B * Hq * S == 0) return {};
  // The fused kernel leaves the rotated q's room unused.
  if (workspace::cached_attention(B, Hq, S, D, Hkv, L) > 0 && !rest)
    return kernel_failure("rope_attention: no workspace for the chunks' partial results");
  RopeArgs ra;
  ra.k_new = k.data, ra.v_new = v.data, ra.cos = cos.data, ra.sin = sin.data;
  ra.k_cache = k_cache.data, ra.v_cache = v_cache.data;
  ra.tt = cos.dtype, ra.t0 = static_cast<int>(t.d[0]), ra.t2 = static_cast<int>(t.d[2]);
  ra.early = early ? 1 : 0;
  ZK_CUDA_TRY(launch_dtype<true>(q, kc, vc, pos, out, scale, rest, ra, s));
  return {};
}

}  // namespace cuda
}  // namespace zk
