// Decode attention (cached_attention on the decode path, docs/generation.md): the new queries of each
// sequence attend over its KV cache. A decode step reads the whole cache written so far and does little
// arithmetic on it, so the kernel is built to read the cache once, at the memory's rate:
//
// - Grouped-query attention: one block serves one K/V head and every query head that shares it (and every
//   query row, when a step brings more than one), so each key and value is read once per step, not once per
//   query head.
// - Flash-decoding: one block covers one chunk of the cache (whole 128-key tiles), so that a batch of one
//   still puts a few hundred blocks on the GPU; each block keeps a running maximum and sum (the online
//   softmax) and leaves its unnormalised output, maximum and sum; up to 8 chunks are the blocks of one
//   thread-block cluster and combine through distributed shared memory in the same kernel, more go through
//   the workspace and a second kernel. When one chunk covers the cache (large batches), the block writes the output
//   itself. The split is a function of the shapes alone (zk/cuda_workspace.h), so the plan sizes the
//   workspace; chunks past a sequence's cached length exit at once.
// - Loads are 16-byte vectors: of a key row (a thread per key) for the scores, of 8 dims of a value row (a
//   thread per 8 output dims, the keys of a tile dealt round the threads that share them) for the sum; the
//   tile's value rows are copied into shared memory asynchronously (cp.async) as the tile begins, so that
//   their latency hides behind the scores and the softmax; the softmax runs in the base-2 domain with the
//   scale folded into the queries; all sums are fp32.
// - Launched as a programmatic dependent (common.cuh, launch_pdl): its launch overlaps the previous kernel.
//
// The oracle is the CPU reference kernel (kernels/cpu/generate.cpp), tests/cuda/generate_kernels_test.cpp.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "zk/cuda_decode.h"
#include "zk/cuda_workspace.h"

namespace zk {
namespace cuda {
namespace {

namespace cg = cooperative_groups;

using detail::from_f32;
using detail::launched;
using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kThreadsPerBlock = 128;
constexpr int kTile = static_cast<int>(workspace::kDecodeTile);
static_assert(kTile == kThreadsPerBlock, "one key of a tile per thread");
constexpr int kMaxRows = 8;  // query rows per K/V head a block serves
constexpr int kMaxClusterChunks = 8;  // chunks combined inside a cluster (the portable cluster size)
constexpr float kLog2e = 1.4426950408889634f;

// Eight consecutive elements of a row as floats (16 bytes of bf16/f16, 32 of f32).
__device__ __forceinline__ void load8(const float *p, float (&x)[8]) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float (&x)[8]) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    x[2 * k] = f.x, x[2 * k + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __half *p, float (&x)[8]) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(h[k]);
    x[2 * k] = f.x, x[2 * k + 1] = f.y;
  }
}

// Grid (chunk, K/V head, sequence). R = (Hq / Hkv) * S query rows share the K/V head; row r is query head
// kh * G + r / S, query row r % S.
template <class T, int DH>
__global__ void __launch_bounds__(kThreadsPerBlock)
    decode_attention_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                            const int64_t *__restrict__ pos, T *__restrict__ out, float *__restrict__ part_o,
                            float *__restrict__ part_ml, int Hq, int Hkv, int S, int L, int chunk, int splits,
                            float scale, int clustered) {
  ::zk::cuda::detail::pdl_enter();
  constexpr int kOcts = DH / 8;  // 8-dim groups per row
  // A tile's values are staged in shared memory by asynchronous copies issued when the tile begins, so that
  // their loads overlap the scores and the softmax instead of following them (where they fit: all but f32
  // at head dim 128).
  constexpr bool kStageV = sizeof(T) * DH * kTile <= 32768;
  constexpr int kRowPieces = static_cast<int>(sizeof(T)) * DH / 16;  // 16-byte pieces of a value row
  __shared__ __align__(16) unsigned char vs_bytes[kStageV ? kTile * DH * sizeof(T) : 16];
  const T* vs = reinterpret_cast<const T*>(vs_bytes);
  __shared__ __align__(16) float qs[kMaxRows][DH];
  __shared__ float sc[kMaxRows][kTile];
  __shared__ float row_m[kMaxRows], row_l[kMaxRows], row_alpha[kMaxRows];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  const int G = Hq / Hkv, R = G * S;
  int64_t p = pos[b];
  p = p < 0 ? 0 : (p >= L ? L - 1 : p);  // the launcher cannot read device positions; stay in bounds
  const int t_max = static_cast<int>(min(p + S, static_cast<int64_t>(L)));
  const int start = split * chunk;
  // A chunk past this sequence's cache has nothing to add: the combine leaves it out. In a cluster the block
  // stays (every block takes part in the cluster's barriers) with an empty range.
  if (start >= t_max && !clustered) return;
  const int end = max(start, min(start + chunk, t_max));

  // The queries, pre-multiplied by scale * log2(e): scores come out in the base-2 domain.
  const float qscale = scale * kLog2e;
  for (int e = tid; e < R * DH; e += kThreadsPerBlock) {
    const int r = e / DH, d = e % DH, h = kh * G + r / S, i = r % S;
    qs[r][d] = static_cast<float>(to_f32(q[((static_cast<int64_t>(b) * Hq + h) * S + i) * DH + d])) * qscale;
  }
  if (tid < R) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.0f;
  }
  const int64_t base = ((static_cast<int64_t>(b) * Hkv + kh) * L) * DH;
  const T *kb = k + base, *vb = v + base;

  // The weighted sum: a thread owns 8 consecutive output dims of one row (an "oct", one 16-byte load of a
  // value row per key), and the block's threads split into `groups` sets that each cover every oct once; set
  // g takes the keys g, g + groups, ... of each tile, so a thread has tile / groups independent loads in
  // flight rather than a whole tile in a chain (summed across sets at the end).
  const int octs = R * kOcts;
  const int groups = octs >= kThreadsPerBlock ? 1 : kThreadsPerBlock / octs;
  const int set = tid / octs < groups ? tid / octs : groups;  // == groups: idle in the sum
  constexpr int kOwn = (kMaxRows * kOcts + kThreadsPerBlock - 1) / kThreadsPerBlock;
  float acc[kOwn][8];
#pragma unroll
  for (int u = 0; u < kOwn; ++u)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
  __syncthreads();

  for (int tile = start; tile < end; tile += kTile) {
    const int j = tile + tid, n = min(kTile, end - tile);
    if (kStageV) {
      // Piece c is bytes [16 c, 16 c + 16) of the tile's n value rows (contiguous in the cache).
      const char* src = reinterpret_cast<const char*>(vb + static_cast<int64_t>(tile) * DH);
      unsigned char* dst = vs_bytes;
      for (int c = tid; c < n * kRowPieces; c += kThreadsPerBlock) {
        const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + 16 * c));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d),
                     "l"(src + 16 * static_cast<int64_t>(c))
                     : "memory");
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    float s[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) s[r] = 0.0f;
    if (tid < n) {
      const T *kr = kb + static_cast<int64_t>(j) * DH;
#pragma unroll
      for (int d = 0; d < DH; d += 8) {
        float x[8];
        load8(kr + d, x);
#pragma unroll
        for (int r = 0; r < kMaxRows; ++r) {
          if (r < R) {
            const float4 a = *reinterpret_cast<const float4 *>(&qs[r][d]);
            const float4 c = *reinterpret_cast<const float4 *>(&qs[r][d + 4]);
            s[r] += a.x * x[0] + a.y * x[1] + a.z * x[2] + a.w * x[3] + c.x * x[4] + c.y * x[5] + c.z * x[6] +
                    c.w * x[7];
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < R) {
        // Row r sees the keys 0 .. p + (r % S).
        const bool seen = tid < n && j <= p + r % S;
        sc[r][tid] = seen ? s[r] : -INFINITY;
      }
    __syncthreads();

    // The online softmax, one warp per row: the tile's maximum, the rescale of what came before, the weights.
    for (int r = warp; r < R; r += kThreadsPerBlock / 32) {
      float m = -INFINITY;
#pragma unroll
      for (int c = 0; c < kTile / 32; ++c) m = fmaxf(m, sc[r][lane + 32 * c]);
      m = warp_max(m);
      const float m_old = row_m[r], m_new = fmaxf(m_old, m);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kTile / 32; ++c) {
        const float x = sc[r][lane + 32 * c];
        const float w = m_new == -INFINITY ? 0.0f : exp2f(x - m_new);
        sc[r][lane + 32 * c] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
        row_alpha[r] = alpha;
        row_l[r] = row_l[r] * alpha + sum;
        row_m[r] = m_new;
      }
    }
    if (kStageV) asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();

    if (set < groups) {
#pragma unroll
      for (int u = 0; u < kOwn; ++u) {
        const int oi = tid % octs + u * kThreadsPerBlock;
        if (u * kThreadsPerBlock >= octs || oi >= octs) break;
        const int r = oi / kOcts, d = 8 * (oi % kOcts);
        const float alpha = row_alpha[r];
        float a[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) a[e] = acc[u][e] * alpha;
#pragma unroll 4
        for (int jj = set; jj < n; jj += groups) {
          const float w = sc[r][jj];
          float x[8];
          if (kStageV)
            load8(vs + jj * DH + d, x);
          else
            load8(vb + static_cast<int64_t>(tile + jj) * DH + d, x);
#pragma unroll
          for (int e = 0; e < 8; ++e) a[e] += w * x[e];
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[u][e] = a[e];
      }
    }
    __syncthreads();  // sc and vs are rewritten by the next tile
  }

  // Sum the sets' partial outputs (through sc, now free: groups x octs x 8 <= 8 x 128 floats), then normalise
  // or leave the chunk's partials.
  float *red = &sc[0][0];
  if (groups > 1) {
    if (set < groups)
#pragma unroll
      for (int e = 0; e < 8; ++e) red[8 * tid + e] = acc[0][e];
    __syncthreads();
    if (tid < octs)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float a = 0.0f;
        for (int g = 0; g < groups; ++g) a += red[8 * (g * octs + tid) + e];
        acc[0][e] = a;
      }
  }
  const bool writer = tid < octs || groups == 1;
  if (clustered) {
    // The chunks of one (sequence, K/V head) are the blocks of one cluster: each leaves its unnormalised
    // output in its shared memory (over the queries, no longer needed), and block c of the cluster combines
    // the elements e with e % splits == c from every block's shared memory.
    float *po = &qs[0][0];
    if (writer)
#pragma unroll
      for (int u = 0; u < kOwn; ++u) {
        const int oi = tid + u * kThreadsPerBlock;
        if (oi < octs)
#pragma unroll
          for (int e = 0; e < 8; ++e) po[(oi / kOcts) * DH + 8 * (oi % kOcts) + e] = acc[u][e];
      }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    for (int e = split + splits * tid; e < R * DH; e += splits * kThreadsPerBlock) {
      const int r = e / DH, d = e % DH, h = kh * G + r / S, i = r % S;
      float m = -INFINITY;
      for (int c = 0; c < splits; ++c) m = fmaxf(m, cluster.map_shared_rank(row_m, c)[r]);
      float num = 0.0f, den = 0.0f;
      for (int c = 0; c < splits; ++c) {
        const float mc = cluster.map_shared_rank(row_m, c)[r];
        const float w = mc == -INFINITY ? 0.0f : exp2f(mc - m);
        num += w * cluster.map_shared_rank(qs[0], c)[r * DH + d];
        den += w * cluster.map_shared_rank(row_l, c)[r];
      }
      out[((static_cast<int64_t>(b) * Hq + h) * S + i) * DH + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
    }
    cluster.sync();  // every block's shared memory stays until the others have read it
    return;
  }
  if (!writer) return;
#pragma unroll
  for (int u = 0; u < kOwn; ++u) {
    const int oi = tid + u * kThreadsPerBlock;
    if (oi >= octs) break;
    const int r = oi / kOcts, d = 8 * (oi % kOcts), h = kh * G + r / S, i = r % S;
    const int64_t row = (static_cast<int64_t>(b) * Hq + h) * S + i;
    if (splits == 1) {
      const float l = row_l[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) out[row * DH + d + e] = from_f32<T>(acc[u][e] * inv);
    } else {
      float *o = part_o + (row * splits + split) * DH;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[d + e] = acc[u][e];
      if (d == 0) {
        part_ml[(row * splits + split) * 2] = row_m[r];
        part_ml[(row * splits + split) * 2 + 1] = row_l[r];
      }
    }
  }
}

// One block per query row, a thread per output element: the chunks' outputs weighted by 2^(m_c - max m).
template <class T>
__global__ void decode_combine_kernel(const float *__restrict__ part_o, const float *__restrict__ part_ml,
                                      const int64_t *__restrict__ pos, T *__restrict__ out, int Hq, int S, int L,
                                      int chunk, int splits, int DH) {
  ::zk::cuda::detail::pdl_enter();
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % S);
  const int64_t b = row / (static_cast<int64_t>(S) * Hq);
  int64_t p = pos[b];
  p = p < 0 ? 0 : (p >= L ? L - 1 : p);
  const int t_max = static_cast<int>(min(p + S, static_cast<int64_t>(L)));
  const int used = min(splits, (t_max + chunk - 1) / chunk);
  (void)i;
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

template <class T, int DH>
cudaError_t launch_decode(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                          void *workspace, cudaStream_t s) {
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Hkv = k.shape.d[1], L = k.shape.d[2];
  const int64_t chunk = workspace::decode_attention_chunk(B, Hkv, L);
  const int64_t splits = workspace::decode_attention_splits(B, Hkv, L);
  float *part_o = static_cast<float *>(workspace);
  float *part_ml = splits > 1 ? part_o + B * Hq * S * splits * DH : nullptr;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(Hkv), static_cast<unsigned>(B));
  // Up to 8 chunks (a portable cluster) combine in the kernel itself; more go through the workspace and
  // the combine kernel.
  const int clustered = splits > 1 && splits <= kMaxClusterChunks ? 1 : 0;
  ::zk::cuda::detail::launch_pdl_cluster(
      decode_attention_kernel<T, DH>, dim3(grid), dim3(kThreadsPerBlock), 0, s, clustered ? static_cast<int>(splits) : 1,
      static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
      static_cast<const int64_t*>(pos.data), static_cast<T*>(out.data), part_o, part_ml, static_cast<int>(Hq),
      static_cast<int>(Hkv), static_cast<int>(S), static_cast<int>(L), static_cast<int>(chunk),
      static_cast<int>(splits), scale, clustered);
  if (splits > 1 && !clustered)
    ::zk::cuda::detail::launch_pdl(
        decode_combine_kernel<T>, dim3(static_cast<unsigned>(B * Hq * S)), dim3(DH), 0, s, part_o, part_ml,
        static_cast<const int64_t*>(pos.data), static_cast<T*>(out.data), static_cast<int>(Hq),
        static_cast<int>(S), static_cast<int>(L), static_cast<int>(chunk), static_cast<int>(splits), DH);
  return launched();
}

template <class T>
cudaError_t launch_typed(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                         void *workspace, cudaStream_t s) {
  return q.shape.d[3] == 64 ? launch_decode<T, 64>(q, k, v, pos, out, scale, workspace, s)
                            : launch_decode<T, 128>(q, k, v, pos, out, scale, workspace, s);
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
  switch (q.dtype) {
    case DType::bf16: ZK_CUDA_TRY(launch_typed<__nv_bfloat16>(q, k, v, pos, out, scale, workspace, s)); break;
    case DType::f16: ZK_CUDA_TRY(launch_typed<__half>(q, k, v, pos, out, scale, workspace, s)); break;
    default: ZK_CUDA_TRY(launch_typed<float>(q, k, v, pos, out, scale, workspace, s)); break;
  }
  return {};
}

}  // namespace cuda
}  // namespace zk
