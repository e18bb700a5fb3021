// Internal to the forward attention kernels: the launch descriptors that attention.cu (the sm_90 kernels and
// the dispatch) and attention_sm90a.cu (the wgmma kernel, built for sm_90a alone) share.
#ifndef ZK_CUDA_ATTENTION_CUH
#define ZK_CUDA_ATTENTION_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// The additive mask as a broadcast view: element (b, h, i, j) at b*st[0] + h*st[1] + i*st[2] + j*st[3].
struct MaskView {
  const void *data = nullptr;
  DType dtype = DType::f32;
  int64_t st[4] = {};
};

/// Element strides of an operand's batch, head and position dims (its head dim is contiguous).
struct Strides {
  int64_t b = 0, h = 0, s = 0;
};

struct AttnDims {
  int B, Hq, Hkv, S, T;
  int causal;
  float scale;
  float *lse = nullptr;  // optional [B, Hq, S]: the natural log-sum-exp of each row's scaled, masked scores
  Strides q, k, v, o;
  // Scheduling of the first register path: 1 = each block's query rows in launch order and every tile masked
  // element by element (the kernel before longest-first scheduling and unmasked interior tiles; kept so
  // that the two can be timed against each other, ZK_CUDA_ATTENTION_PLAIN=1).
  int plain = 0;
};

/// The wgmma kernels (attention_sm90a.cu): one or two warpgroups of 64 query rows per block (`groups` 1 or 2; 3:
/// two, held to 128 registers; 4: two in ping-pong), or (`groups` 0) one warpgroup whose products overlap its softmax; head dim 64 or 128, bf16 or f16 (`bf16`). Its operands and rules are the register kernels' (16-byte aligned rows).
/// Fails with cudaErrorNoKernelImageForDevice off sm_90 (it is built for sm_90a alone).
cudaError_t wgmma_forward(const void *q, const void *k, const void *v, void *out, const AttnDims &d,
                          const MaskView &mask, int head_dim, bool bf16, int groups, cudaStream_t s);

}  // namespace attn
}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_ATTENTION_CUH
