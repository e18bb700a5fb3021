// zk/cuda_rotary.h - the rotary position embedding on the GPU (plan opcode `rotary`).
#ifndef ZK_CUDA_ROTARY_H
#define ZK_CUDA_ROTARY_H

#include <cuda_runtime.h>

#include "zk/cpu_kernels.h"
#include "zk/cuda_status.h"

namespace zk {
namespace cuda {

/// The GPU twin of zk::cpu::rotary (same shapes, dtypes and formula; out may alias x): x [..., D] in f32, bf16
/// or f16, cos and sin of one shape broadcast to x's with last dim D, in any float dtype (both the same),
/// out of x's dtype. One pass over x; 16-byte loads and stores where the halves and pointers allow. The
/// products and the sum are rounded exactly as the CPU kernel rounds them, so the results are identical.
/// With `seq_major`, x and out are a rank-4 [B, S, H, D] and the tables broadcast to its head-major view
/// [B, H, S, D], as in the CPU kernel: rows stay dense, only the tables' row offsets change.
GpuStatus rotary(const In &x, const In &cos, const In &sin, const Out &out, bool inverse, cudaStream_t stream,
                 bool seq_major = false);

}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_ROTARY_H
