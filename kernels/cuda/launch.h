// Launchers (tier 2) that other translation units of the kernels call directly, on raw pointers.
#ifndef ZK_CUDA_LAUNCH_H
#define ZK_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zk {
namespace cuda {
namespace launch {

/// dst[c][r] = src[r][c] for a row-major [rows, cols] matrix of `es`-byte elements (2, 4 or 8), through
/// 32x32 shared-memory tiles so that both the reads and the writes are coalesced.
cudaError_t transpose2d(const void *src, void *dst, int64_t rows, int64_t cols, size_t es, cudaStream_t s);

}  // namespace launch
}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_LAUNCH_H
