// zk/cuda_decode.h - the decode attention kernel (kernels/cuda/decode_attention.cu) and the persistent decode
// layer (kernels/cuda/decode_layer.cu).
#ifndef ZK_CUDA_DECODE_H
#define ZK_CUDA_DECODE_H

#include <cuda_runtime.h>

#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {

/// Whether decode_attention takes these operands: q, the caches and out of one float dtype, a head dim of 64
/// or 128, at most 8 query rows per K/V head (query heads per K/V head x rows), pos i64. Otherwise the caller
/// uses cached_attention (cuda_train_kernels.h), the simple exact kernel.
bool decode_attention_supported(const In &q, const In &k, const In &v, const In &pos, const Out &out);

/// Query row i of sequence b attends to the cached keys 0 .. pos[b] + i, like cached_attention, split over
/// the cache length (flash-decoding): each block reads one chunk of one K/V head's cache once for all the
/// query heads that share it (grouped-query attention) and keeps a running softmax; up to eight chunks
/// combine inside a thread-block cluster, more in a second kernel through `workspace`, which holds
/// zk::cuda::workspace::cached_attention(...) bytes (zk/cuda_workspace.h) and may be null when that is 0.
GpuStatus decode_attention(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                           void *workspace, cudaStream_t stream);

/// rope_attention (plan 2.16): rope_kv_write (cuda_train_kernels.h) of q, k, v into the caches, then the
/// attention of the rotated q over them, as decode_attention computes it; one kernel where decode_attention
/// takes the operands (q, k, v and the caches of one dtype, 16-byte aligned), else the two kernels with the
/// rotated q in `workspace`, which holds zk::cuda::workspace::rope_attention(...) bytes. `early`: the caller
/// knows that the kernel launched before this one on the stream writes neither the caches nor pos (the CUDA
/// backend derives it from the plan); the fused kernel then loads the cache rows below the positions before it
/// waits for that kernel (programmatic dependent launch).
GpuStatus rope_attention(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                         const Out &out, const Out &k_cache, const Out &v_cache, float scale, void *workspace,
                         bool early, cudaStream_t stream);

/// The persistent decode layer (kernels/cuda/decode_layer.cu; session 11; run on the GPU in session 12: correct,
/// slower than the six kernels, in a plan only with zplan --decode-layer on): one launch computes one
/// llama-style decoder layer for M = 1..4 rows (sequences, one new token each), as the six steps of a batch-1
/// decode layer compute it, each result rounded where they round it:
///   sum1 = x + residual; n1 = rms_norm(sum1) * norm1; q, k, v = n1 wq, n1 wk, n1 wv        (norm_products)
///   q and k rotated (cos, sin at the step); k and v written into the caches at pos        (rope_kv_write)
///   attn = attention of q over the caches, keys 0 .. pos[b]                                (decode attention)
///   o = attn wo                                                                            (linear)
///   residual_out = o + sum1; n2 = rms_norm(residual_out) * norm2; h = act(n2 wg) * (n2 wu)  (norm_products)
///   out = h w_down                                                                         (linear)
/// Layer l + 1 takes x = out and residual = residual_out of layer l. A residual without data: no add (sum1 = x),
/// as a first layer's norm of the embedding.
struct DecodeLayerArgs {
  In x, residual;             // [M, d]
  In norm1, norm2;            // [d]
  In wq, wk, wv;              // [d, heads x Dh], [d, kv_heads x Dh], [d, kv_heads x Dh]
  In cos, sin;                // [1 or M, 1, 1, Dh]: the step's rows of the rotary tables (any float dtype)
  In pos;                     // [M] i64: the position of each row's new token
  Out k_cache, v_cache;       // [M, kv_heads, L, Dh], written at pos
  In wo;                      // [heads x Dh, d]
  In w_gate, w_up, w_down;    // [d, ffn], [d, ffn], [ffn, d]
  Out out, residual_out;      // [M, d]
  // The grid barrier's and the counts' words (workspace::decode_layer_sync_words), zero before the first launch
  // and left zero by each; null: they open the workspace (decode_layer_workspace counts them).
  void *sync = nullptr;
  // Whether the first weight pieces may be read before the previous kernel on the stream has finished: only
  // where no kernel writes the weights (resident inference weights; not ZeRO-gathered or prefetched ones).
  bool early = false;
  int64_t heads = 0;          // query heads (kv_heads, L and Dh are the caches')
  int64_t kv_heads = 0;       // 0: the caches'
  float eps = 1e-5f, scale = 0.125f;
  Unary act = Unary::silu;
};
/// The shapes the workspace depends on.
struct DecodeLayerShape {
  DType dtype = DType::bf16;
  int64_t rows = 1, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, cache_len = 0;
};
/// Bytes of decode_layer's workspace. Its first DecodeLayerOffsets::sync_bytes (the grid barrier and the
/// strips' counts) must be zero before the first launch on it (cudaMemset once); every launch leaves them
/// ready for the next. Layers launched one after another on one stream may share one workspace.
uint64_t decode_layer_workspace(const DecodeLayerShape &shape);
/// Where decode_layer leaves its intermediate results in the workspace (for tests): sum1 [M, d], q
/// [M, heads x Dh] and k, v [M, kv_heads x Dh] before the rotary, attn [M, heads x Dh], h [M, ffn], each in the
/// storage dtype, at these byte offsets.
struct DecodeLayerOffsets {
  uint64_t sync_bytes = 0, sum1 = 0, q = 0, k = 0, v = 0, attn = 0, h = 0;
};
DecodeLayerOffsets decode_layer_offsets(const DecodeLayerShape &shape);
/// The readings decode_layer takes of the global timer (ns) and of the SM's clock (cycles; the global timer's
/// resolution may be coarse), by thread 0 of each block, where asked: 0 the kernel's
/// start, 1 after the wait for the previous kernel, 2 after the first norm, 3 / 5 / 7 / 9 at the arrival at grid
/// barrier 1 / 2 / 3 / 4 (the end of the q/k/v products, the attention, o, gate/up), 4 / 6 / 8 / 10 at the
/// departure from it, 11 the end (after down).
constexpr int kDecodeLayerStamps = 12;
/// The launch: grid 0 is the blocks that can be resident at once (at most two an SM); a larger grid is refused
/// (its grid barriers would wait for blocks that never start). cooperative: launch with the cooperative
/// attribute as well (the runtime then checks residency itself); off by default, for comparison on the GPU.
/// stamps: null, or device memory for [grid][kDecodeLayerStamps][2] readings (the global timer, the SM's clock;
/// room for 2 x the SMs' blocks suffices for grid 0), for the tests' timeline of the phases.
struct DecodeLayerLaunch {
  int64_t grid = 0;
  bool cooperative = false;
  unsigned long long *stamps = nullptr;
};
/// One decoder layer in one kernel, a programmatic dependent of the stream's previous kernel (its first weight
/// loads go out before the wait for it). f32, bf16 or f16, one dtype for every operand but the tables; head dim
/// 64 or 128; at most 16 query heads a K/V head; d and ffn multiples of 8; M x max(d, ffn, heads x Dh)
/// elements within 64 KiB; every operand 16-byte aligned.
GpuStatus decode_layer(const DecodeLayerArgs &args, void *workspace, uint64_t workspace_bytes, cudaStream_t stream,
                       const DecodeLayerLaunch &launch = {});
/// decode_layer's checks of the operands alone (dtypes, shapes, alignment, limits), as a plan's loader makes
/// them before anything runs; the workspace and the grid are checked at the launch.
GpuStatus decode_layer_check(const DecodeLayerArgs &args);

}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_DECODE_H
