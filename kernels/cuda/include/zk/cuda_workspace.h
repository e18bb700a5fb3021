// zk/cuda_workspace.h - the device workspace of the CUDA training kernels, in bytes, from shapes alone.
//
// Plain C++ (no CUDA headers): the kernels size their scratch with these functions, and the compiler's plan
// emitter (compiler/plan/EmitPlan.cpp) calls the same ones to count that scratch in the plan's workspace, so
// the runtime allocates nothing the plan did not state. A kernel that takes a workspace adds its rule here.
#ifndef ZK_CUDA_WORKSPACE_H
#define ZK_CUDA_WORKSPACE_H

#include <cstdint>

namespace zk::cuda::workspace {

/// Row chunks of the norm backward's deterministic column sums (dscale, dbias).
inline constexpr int64_t kNormGradChunks = 64;
/// Blocks of sum_squares' first pass (one double partial sum each).
inline constexpr int64_t kSumSquaresBlocks = 1024;

/// attention_grad: D_i = dout_i . out_i, one float per query row of q [B, Hq, S, Dh].
inline uint64_t attention_grad(int64_t batch, int64_t heads, int64_t queries) {
  return static_cast<uint64_t>(batch * heads * queries) * sizeof(float);
}

/// layer_norm_grad / rms_norm_grad over `rows` rows of `n` normalised elements: per-row statistics and
/// per-chunk partial column sums.
inline uint64_t norm_grad(int64_t rows, int64_t n) {
  return static_cast<uint64_t>(2 * rows + 2 * kNormGradChunks * n) * sizeof(float);
}

inline uint64_t sum_squares() { return static_cast<uint64_t>(kSumSquaresBlocks) * sizeof(double); }

/// cached_attention (decode, kernels/cuda/decode_attention.cu) splits each (sequence, K/V head)'s cache into
/// chunks of whole 128-key tiles, one block each, so that a small batch still fills the GPU (flash-decoding);
/// a final pass combines the chunks' partial results. The split depends on the shapes alone, so that the plan
/// counts the same workspace the kernel uses. Aiming at about 1056 blocks, eight per SM of the H200's 132:
/// a block's tiles run one after another, so the blocks resident together hide each other's load latency.
inline constexpr int64_t kDecodeTile = 128;
inline constexpr int64_t kDecodeBlocks = 1056;

/// The cache positions one block of cached_attention covers (a multiple of kDecodeTile).
inline int64_t decode_attention_chunk(int64_t batch, int64_t kv_heads, int64_t cache_len) {
  const int64_t tiles = (cache_len + kDecodeTile - 1) / kDecodeTile;
  const int64_t pairs = batch * kv_heads > 0 ? batch * kv_heads : 1;
  int64_t splits = (kDecodeBlocks + pairs - 1) / pairs;
  if (splits > tiles) splits = tiles;
  if (splits < 1) splits = 1;
  const int64_t per = (tiles + splits - 1) / splits;
  return per * kDecodeTile;
}

/// The number of chunks (blocks per sequence and K/V head) of cached_attention.
inline int64_t decode_attention_splits(int64_t batch, int64_t kv_heads, int64_t cache_len) {
  const int64_t chunk = decode_attention_chunk(batch, kv_heads, cache_len);
  const int64_t n = (cache_len + chunk - 1) / chunk;
  return n > 0 ? n : 1;
}

/// cached_attention's workspace: per query row of q [B, Hq, S, Dh] and chunk, the unnormalised output (Dh
/// floats) and its running maximum and sum (2 floats); none when one chunk covers the cache.
inline uint64_t cached_attention(int64_t batch, int64_t heads, int64_t queries, int64_t head_dim,
                                 int64_t kv_heads, int64_t cache_len) {
  const int64_t splits = decode_attention_splits(batch, kv_heads, cache_len);
  if (splits <= 1) return 0;
  return static_cast<uint64_t>(batch * heads * queries * splits * (head_dim + 2)) * sizeof(float);
}

}  // namespace zk::cuda::workspace

#endif  // ZK_CUDA_WORKSPACE_H
