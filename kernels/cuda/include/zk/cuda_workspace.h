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

/// decode_layer (kernels/cuda/decode_layer.cu, plan 2.17): the rows x d etc. of one decoder layer at decode, in
/// the storage dtype of `elem_bytes`. The kernel's constants that its workspace depends on: a product's strip is
/// 8 threads x 16 bytes of weight columns (half of them a gated strip's outputs), its K split at most
/// kDecodeLayerMaxSplits slabs; a (row, K/V head)'s cache at most kDecodeLayerMaxChunks chunks.
inline constexpr int64_t kDecodeLayerMaxSplits = 16;
inline constexpr int64_t kDecodeLayerMaxChunks = 64;
struct DecodeLayerDims {
  int64_t rows = 1, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, elem_bytes = 2;
};
/// Counters of the grid barrier and of the strips / heads: 32-bit words that must be zero before the first
/// launch; every launch leaves them zero (the plan keeps them as a zero-initialised state).
inline uint64_t decode_layer_sync_words(const DecodeLayerDims &s) {
  const int64_t tn = 8 * (16 / s.elem_bytes);
  const int64_t strips[4] = {(s.heads * s.head_dim + tn - 1) / tn + 2 * ((s.kv_heads * s.head_dim + tn - 1) / tn),
                             (s.dim + tn - 1) / tn, (s.ffn + tn / 2 - 1) / (tn / 2), (s.dim + tn - 1) / tn};
  int64_t most = s.rows * s.kv_heads;
  for (int64_t n : strips) most = n > most ? n : most;
  return static_cast<uint64_t>(2 + most);
}
/// The byte offsets of its intermediate results in the scratch workspace (each part 256-byte aligned): sum1
/// [M, d], q [M, heads x Dh], k and v [M, kv_heads x Dh], attn [M, heads x Dh], h [M, ffn] in the storage
/// dtype, then the fp32 partial sums of the products' K slabs and of the attention's chunks; `bytes` the whole.
struct DecodeLayerParts {
  uint64_t sum1 = 0, q = 0, k = 0, v = 0, attn = 0, h = 0, part = 0, bytes = 0;
};
inline DecodeLayerParts decode_layer_parts(const DecodeLayerDims &s) {
  const int64_t tn = 8 * (16 / s.elem_bytes), M = s.rows;
  const int64_t strips[4] = {(s.heads * s.head_dim + tn - 1) / tn + 2 * ((s.kv_heads * s.head_dim + tn - 1) / tn),
                             (s.dim + tn - 1) / tn, (s.ffn + tn / 2 - 1) / (tn / 2), (s.dim + tn - 1) / tn};
  int64_t most = M * s.heads * kDecodeLayerMaxChunks * (s.head_dim + 2);
  for (int64_t n : strips) {
    const int64_t p = n * kDecodeLayerMaxSplits * M * tn;
    most = p > most ? p : most;
  }
  DecodeLayerParts l;
  uint64_t at = 0;
  auto take = [&](int64_t bytes) {
    const uint64_t o = at;
    at += (static_cast<uint64_t>(bytes) + 255) / 256 * 256;
    return o;
  };
  const int64_t e = s.elem_bytes;
  l.sum1 = take(M * s.dim * e);
  l.q = take(M * s.heads * s.head_dim * e);
  l.k = take(M * s.kv_heads * s.head_dim * e);
  l.v = take(M * s.kv_heads * s.head_dim * e);
  l.attn = take(M * s.heads * s.head_dim * e);
  l.h = take(M * s.ffn * e);
  l.part = take(most * 4);
  l.bytes = at;
  return l;
}
/// The scratch workspace's bytes (decode_layer_parts(s).bytes).
inline uint64_t decode_layer(const DecodeLayerDims &s) { return decode_layer_parts(s).bytes; }

}  // namespace zk::cuda::workspace

#endif  // ZK_CUDA_WORKSPACE_H
