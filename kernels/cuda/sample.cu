// The sampler on the GPU: one block finishes each row (after a first pass over up to eight). It draws the
// ids the CPU reference (kernels/cpu/sample.cpp) draws, bit for bit: both compute the same integer weights and
// Philox bits (zk/sample.h), and every decision is an integer comparison or an integer sum, which a parallel
// reduction leaves unchanged. Where the reference sorts, this kernel finds the same cut-off key by radix
// selection, eight bits at a time, over the 64-bit order keys (logit, then index): the k-th largest key for
// top-k, and for top-p the last key of the nucleus, found from per-digit histograms of counts and integer
// weights.
//
// The first pass, the largest key (the arg max, lowest index on ties), is all a greedy row (temperature <= 0)
// needs, and all a decode step at batch 1 samples: it is spread over up to eight blocks of a thread-block
// cluster per row (one 16-byte load per thread for a 32000-wide bf16 row), whose maxima meet in the shared
// memory of the cluster's first block. That block alone goes on for a sampled row, which reads its logits
// about 1 + 8 (top-k) + 8 (top-p) + 2 more times; the logits stay in L2 between passes.
#include <cooperative_groups.h>

#include <cmath>

#include "common.cuh"
#include "zk/cuda_train_kernels.h"
#include "zk/sample.h"

namespace zk {
namespace cuda {
namespace {

namespace cg = cooperative_groups;
namespace zs = zk::sample;
using ull = unsigned long long;

constexpr int kSampleThreads = 512;
constexpr int kWarps = kSampleThreads / 32;
constexpr int kMaxRowBlocks = 8;  // blocks of a row's first pass: a portable cluster

__device__ __forceinline__ float logit_at(const void *x, DType t, int64_t i) {
  return zs::clean_logit(detail::load_f(x, t, i));
}

/// The blocks of a row's first pass: one 16-byte load per thread where the row allows, at most a cluster.
int row_blocks(int64_t v, DType t) {
  const int64_t bytes = v * (t == DType::f32 ? 4 : 2), per_block = int64_t{kSampleThreads} * 16;
  const int64_t n = (bytes + per_block - 1) / per_block;
  return static_cast<int>(n < 1 ? 1 : (n > kMaxRowBlocks ? kMaxRowBlocks : n));
}

/// This block's share of a row's largest key: the row's 16-byte pieces dealt evenly over the `blocks`
/// blocks of the row, four loads in flight per thread; the elements before the first 16-byte boundary and
/// after the last whole piece are read one by one by block 0.
template <class E>
__device__ ull largest_key(const void *row, DType t, int64_t v, int rank, int blocks) {
  constexpr int kPer = E::n;
  const int64_t es = 16 / kPer;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row);
  int64_t head = static_cast<int64_t>((16 - addr % 16) % 16) / es;
  if (head > v) head = v;
  const int64_t pieces = (v - head) / kPer, tail = head + pieces * kPer;
  ull best = 0;
  if (rank == 0) {
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) best = max(best, (ull)zs::order_key(logit_at(row, t, i), i));
    for (int64_t i = tail + threadIdx.x; i < v; i += blockDim.x) best = max(best, (ull)zs::order_key(logit_at(row, t, i), i));
  }
  const int64_t share = (pieces + blocks - 1) / blocks, p0 = rank * share, p1 = min(pieces, p0 + share);
  const uint4 *pv = reinterpret_cast<const uint4 *>(static_cast<const char *>(row) + head * es);
#pragma unroll 4
  for (int64_t j = p0 + threadIdx.x; j < p1; j += blockDim.x) {
    float x[kPer];
    E::unpack(pv[j], x);
#pragma unroll
    for (int e = 0; e < kPer; ++e) best = max(best, (ull)zs::order_key(zs::clean_logit(x[e]), head + j * kPer + e));
  }
  return best;
}

/// Block-wide reductions; every thread gets the result. `scratch` holds one value per warp.
__device__ ull block_max_u64(ull v, ull *scratch) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous use of scratch is over
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? scratch[lane] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

__device__ ull block_sum_u64(ull v, ull *scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? scratch[lane] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

/// Inclusive prefix sum over the block in thread order; *total receives the block's sum.
__device__ ull block_scan_u64(ull v, ull *scratch, ull *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const ull u = __shfl_up_sync(0xFFFFFFFFu, v, o);
    if (lane >= o) v += u;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    ull s = lane < kWarps ? scratch[lane] : 0ull;
    for (int o = 1; o < 32; o <<= 1) {
      const ull u = __shfl_up_sync(0xFFFFFFFFu, s, o);
      if (lane >= o) s += u;
    }
    if (lane < kWarps) scratch[lane] = s;  // inclusive sums of the warps
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  *total = scratch[kWarps - 1];
  return v;
}

struct Hist {
  unsigned count[256];
  ull mass[256];
};

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const void *x, DType t, int64_t v, const float *temperature, const int64_t *top_k, const float *top_p,
                  const int64_t *seed, const int64_t *step, int64_t row_offset, int64_t *ids, int blocks) {
  // Grid: `blocks` blocks per row, the row's cluster (none when 1); block 0 of each finishes the row.
  if (blocks > 1) detail::cluster_arrive_relaxed();
  ::zk::cuda::detail::pdl_enter();
  __shared__ ull red[kWarps];
  __shared__ ull s_best[kMaxRowBlocks];
  __shared__ Hist hist;
  __shared__ ull s_prefix, s_above;
  __shared__ long long s_want;
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(blocks));
  const int64_t b = blockIdx.x / static_cast<unsigned>(blocks);
  const void *row = nullptr;
  {
    // Offset the row pointer by bytes so that load_f indexes within the row.
    const size_t es = t == DType::f32 ? 4 : 2;
    row = static_cast<const char *>(x) + static_cast<size_t>(b) * static_cast<size_t>(v) * es;
  }

  // Pass 1: the largest key (the arg max, lowest index on ties), each block over its share of the row, then
  // the blocks' maxima in block 0.
  ull best = t == DType::f32    ? largest_key<detail::Piece<float>>(row, t, v, rank, blocks)
             : t == DType::bf16 ? largest_key<detail::Piece<__nv_bfloat16>>(row, t, v, rank, blocks)
                                : largest_key<detail::Piece<__half>>(row, t, v, rank, blocks);
  best = block_max_u64(best, red);
  if (blocks > 1) {
    detail::cluster_wait();  // every block of the cluster has started: block 0's shared memory may be written
    if (threadIdx.x == 0) *cg::this_cluster().map_shared_rank(&s_best[rank], 0) = best;
    detail::cluster_sync();
    if (rank != 0) return;
    for (int c = 0; c < blocks; ++c) best = max(best, s_best[c]);
  }
  const int64_t argmax = zs::key_index(best);
  const float temp = *temperature;
  if (!(temp > 0.0f)) {
    if (threadIdx.x == 0) ids[b] = argmax;
    return;
  }
  const float mx = logit_at(row, t, argmax);

  // Top-k: the k-th largest key by radix selection (keys are unique, so it is one exact key).
  ull cut = 0;
  const int64_t k = *top_k;
  if (k > 0 && k < v) {
    ull prefix = 0, mask = 0;
    long long want = k;  // rank, from the top, of the key sought among those matching prefix
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int j = threadIdx.x; j < 256; j += blockDim.x) hist.count[j] = 0;
      __syncthreads();
      for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
        const ull key = zs::order_key(logit_at(row, t, i), i);
        if ((key & mask) == prefix) atomicAdd(&hist.count[(key >> shift) & 0xFF], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int d = 255; d >= 0; --d) {
          if (static_cast<long long>(hist.count[d]) >= want) {
            prefix |= static_cast<ull>(d) << shift;
            break;
          }
          want -= hist.count[d];
        }
        s_prefix = prefix;
        s_want = want;
      }
      __syncthreads();
      prefix = s_prefix;
      want = s_want;
      mask |= 0xFFull << shift;
    }
    cut = prefix;
  }

  // The survivors' total weight.
  ull total = 0;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float l = logit_at(row, t, i);
    if (zs::order_key(l, i) >= cut) total += zs::weight_of(zs::scaled(l, mx, temp));
  }
  total = block_sum_u64(total, red);

  // Top-p: the last key, largest first, whose weight above stays below top_p * total. A digit bin holds
  // the cut when its first key is kept (true of every bin entered) and the key after the bin is not, or
  // when it is the last non-empty bin.
  const float p = *top_p;
  if (p < 1.0f) {
    const double thresh = zs::dmul(static_cast<double>(p), static_cast<double>(total));
    if (!(thresh > 0.0)) {
      cut = best;
    } else {
      ull prefix = 0, mask = 0, above = 0;
      for (int shift = 56; shift >= 0; shift -= 8) {
        for (int j = threadIdx.x; j < 256; j += blockDim.x) {
          hist.count[j] = 0;
          hist.mass[j] = 0;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
          const float l = logit_at(row, t, i);
          const ull key = zs::order_key(l, i);
          if (key >= cut && (key & mask) == prefix) {
            const int d = static_cast<int>((key >> shift) & 0xFF);
            atomicAdd(&hist.count[d], 1u);
            const ull w = zs::weight_of(zs::scaled(l, mx, temp));
            if (w) atomicAdd(&hist.mass[d], w);
          }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
          int chosen = -1, last = -1;
          ull a = above, last_a = above, chosen_a = above;
          for (int d = 255; d >= 0; --d) {
            if (hist.count[d] == 0) continue;
            last = d;
            last_a = a;
            if (!(static_cast<double>(a + hist.mass[d]) < thresh)) {
              chosen = d;
              chosen_a = a;
              break;
            }
            a += hist.mass[d];
          }
          if (chosen < 0) {
            chosen = last;
            chosen_a = last_a;
          }
          s_prefix = prefix | (static_cast<ull>(chosen) << shift);
          s_above = chosen_a;
        }
        __syncthreads();
        prefix = s_prefix;
        above = s_above;
        mask |= 0xFFull << shift;
      }
      cut = max(cut, prefix);
    }
  }

  // The draw over the kept weights, walked in index order.
  ull kept = 0;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float l = logit_at(row, t, i);
    if (zs::order_key(l, i) >= cut) kept += zs::weight_of(zs::scaled(l, mx, temp));
  }
  kept = block_sum_u64(kept, red);
  if (kept == 0) {  // every weight underflowed: the arg max, as the reference
    if (threadIdx.x == 0) ids[b] = argmax;
    return;
  }
  const ull r = zs::scale_draw(zs::draw_bits(*seed, *step, row_offset + b), kept);
  __shared__ long long s_pick;
  if (threadIdx.x == 0) s_pick = argmax;  // replaced below by exactly one thread
  ull run = 0;                            // the same in every thread
  for (int64_t c0 = 0; c0 < v; c0 += blockDim.x) {
    const int64_t i = c0 + threadIdx.x;
    ull w = 0;
    if (i < v) {
      const float l = logit_at(row, t, i);
      if (zs::order_key(l, i) >= cut) w = zs::weight_of(zs::scaled(l, mx, temp));
    }
    ull chunk = 0;
    const ull incl = block_scan_u64(w, red, &chunk);
    if (w > 0 && run + incl > r && run + incl - w <= r) s_pick = i;
    run += chunk;
    if (run > r) break;
  }
  __syncthreads();
  if (threadIdx.x == 0) ids[b] = s_pick;
}

}  // namespace

GpuStatus sample(const In &logits, const In &temperature, const In &top_k, const In &top_p, const In &seed,
                 const In &step, const Out &ids, int64_t row_offset, cudaStream_t s) {
  if (logits.shape.rank != 2 || logits.shape[1] < 1) return kernel_failure("sample: logits must be [B, V] with V >= 1");
  if (!is_float(logits.dtype)) return kernel_failure("sample: logits must be float");
  if (logits.shape[1] > zs::kMaxVocab) return kernel_failure("sample: the vocabulary is larger than 2^23");
  if (ids.dtype != DType::i64 || ids.shape.rank != 1 || ids.shape[0] != logits.shape[0])
    return kernel_failure("sample: ids must be i64 [B]");
  if (temperature.shape.numel() != 1 || temperature.dtype != DType::f32 || top_p.shape.numel() != 1 ||
      top_p.dtype != DType::f32)
    return kernel_failure("sample: temperature and top_p must be one f32 element each");
  if (top_k.shape.numel() != 1 || top_k.dtype != DType::i64 || seed.shape.numel() != 1 || seed.dtype != DType::i64 ||
      step.shape.numel() != 1 || step.dtype != DType::i64)
    return kernel_failure("sample: top_k, seed and step must be one i64 element each");
  const int64_t rows = logits.shape[0];
  if (rows == 0) return {};
  if (rows > 0x7FFFFFFF) return kernel_failure("sample: too many rows");
  const int blocks = row_blocks(logits.shape[1], logits.dtype);
  if (rows * blocks > 0x7FFFFFFF) return kernel_failure("sample: too many rows");
  ZK_CUDA_TRY(::zk::cuda::detail::launch_pdl_cluster(
      sample_kernel, dim3(static_cast<unsigned>(rows * blocks)), dim3(kSampleThreads), 0, s, blocks, logits.data,
      logits.dtype, logits.shape[1], static_cast<const float*>(temperature.data),
      static_cast<const int64_t*>(top_k.data), static_cast<const float*>(top_p.data),
      static_cast<const int64_t*>(seed.data), static_cast<const int64_t*>(step.data), row_offset,
      static_cast<int64_t*>(ids.data), blocks));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

}  // namespace cuda
}  // namespace zk
