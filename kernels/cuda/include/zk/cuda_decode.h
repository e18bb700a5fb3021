// zk/cuda_decode.h - the decode attention kernel (kernels/cuda/decode_attention.cu).
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

}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_DECODE_H
