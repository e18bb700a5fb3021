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

}  // namespace zk::cuda::workspace

#endif  // ZK_CUDA_WORKSPACE_H
