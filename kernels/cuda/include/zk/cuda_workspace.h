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
/// chunks of whole 16-position units, one block each, so that a small batch still fills the GPU
/// (flash-decoding), and combines the chunks' partial results. The split depends on the shapes alone, so that
/// the plan counts the same workspace the kernel uses:
/// - aim at about kDecodeBlocks blocks (two per SM of the H200's 132), no more chunks than units;
/// - up to kDecodeClusterChunks chunks are one thread-block cluster and combine inside the kernel, with no
///   workspace; more than that are taken only where the cluster's chunks would each exceed kDecodeLongChunk
///   positions (long caches at small batches), and go through the workspace and a second kernel.
/// llama-1b (8 K/V heads, 768 positions): 8 chunks of 96 at batch 1, 5 of 160 at batch 8, 1 from batch 33.
inline constexpr int64_t kDecodeUnit = 16;
inline constexpr int64_t kDecodeBlocks = 264;
inline constexpr int64_t kDecodeClusterChunks = 8;
inline constexpr int64_t kDecodeLongChunk = 512;

/// The cache positions one block of cached_attention covers (a multiple of kDecodeUnit).
inline int64_t decode_attention_chunk(int64_t batch, int64_t kv_heads, int64_t cache_len) {
  const int64_t units = cache_len > 0 ? (cache_len + kDecodeUnit - 1) / kDecodeUnit : 1;
  const int64_t pairs = batch * kv_heads > 0 ? batch * kv_heads : 1;
  int64_t splits = (kDecodeBlocks + pairs - 1) / pairs;
  if (splits > kDecodeClusterChunks) {
    const int64_t longest = (cache_len + kDecodeLongChunk - 1) / kDecodeLongChunk;
    const int64_t enough = longest > kDecodeClusterChunks ? longest : kDecodeClusterChunks;
    if (splits > enough) splits = enough;
  }
  if (splits > units) splits = units;
  if (splits < 1) splits = 1;
  const int64_t per = (units + splits - 1) / splits;
  return per * kDecodeUnit;
}

/// The number of chunks (blocks per sequence and K/V head) of cached_attention.
inline int64_t decode_attention_splits(int64_t batch, int64_t kv_heads, int64_t cache_len) {
  const int64_t chunk = decode_attention_chunk(batch, kv_heads, cache_len);
  const int64_t n = (cache_len + chunk - 1) / chunk;
  return n > 0 ? n : 1;
}

/// cached_attention's workspace: per query row of q [B, Hq, S, Dh] and chunk, the unnormalised output (Dh
/// floats) and its running maximum and sum (2 floats); none when one chunk covers the cache or the chunks
/// combine inside a cluster.
inline uint64_t cached_attention(int64_t batch, int64_t heads, int64_t queries, int64_t head_dim,
                                 int64_t kv_heads, int64_t cache_len) {
  const int64_t splits = decode_attention_splits(batch, kv_heads, cache_len);
  if (splits <= kDecodeClusterChunks) return 0;
  return static_cast<uint64_t>(batch * heads * queries * splits * (head_dim + 2)) * sizeof(float);
}

/// rope_attention's workspace (plan 2.16): room for the rotated q (q's elements at `elem_bytes` each, rounded
/// up to 256 bytes), which the operands that the fused kernel does not take go through (the rotary step, then
/// the attention), then cached_attention's.
inline uint64_t rope_attention_q(int64_t elements, int64_t elem_bytes) {
  return (static_cast<uint64_t>(elements * elem_bytes) + 255) / 256 * 256;
}
inline uint64_t rope_attention(int64_t batch, int64_t heads, int64_t queries, int64_t head_dim, int64_t kv_heads,
                               int64_t cache_len, int64_t elem_bytes) {
  return rope_attention_q(batch * heads * queries * head_dim, elem_bytes) +
         cached_attention(batch, heads, queries, head_dim, kv_heads, cache_len);
}

}  // namespace zk::cuda::workspace

#endif  // ZK_CUDA_WORKSPACE_H
