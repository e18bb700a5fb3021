// zk/attention_kernels.h - the CUDA attention kernels a plan can name, in one table.
//
// Plain C++ (no CUDA headers), read by three parties: the compiler chooses a kernel per attention
// (compiler/plan/AttentionKernels.cpp, zplan --cuda-arch / --attention-kernel) and writes its code into the
// plan (docs/plan-format.md, 2.11); the plan verifier (runtime/src/plan.cpp) refuses codes it does not know;
// the CUDA backend checks at load that the device can run each code, and kernels/cuda/attention.cu and
// attention_grad.cu launch the code's family and variant. Before, attention.cu picked the kernel at run time
// by the device's compute capability, so one plan could run, and round, differently on two GPUs.
//
// Adding a forward kernel: one ZK_ATTENTION_KERNEL line below (a new code: codes are stored in plans and
// never reused or changed), and, for a new family or variant, its launch in attention.cu (the wgmma family's
// variants go to attn::wgmma_forward's `groups`).
#ifndef ZK_ATTENTION_KERNELS_H
#define ZK_ATTENTION_KERNELS_H

#include <cstdint>
#include <cstring>

namespace zk::cuda {

/// How a forward kernel is launched (attention.cu): the exact fp32 row kernel, the WMMA one, the first
/// register kernel (flash_mma_any's block shape as variant), the second register kernel (launch::FaShape as
/// variant) or a wgmma kernel (attention_sm90a.cu; attn::wgmma_forward's `groups` as variant).
enum class AttnFamily : uint8_t { rows, wmma, mma, fa, wg };

/// What a kernel needs of the device: any GPU the library is built for, or compute capability 9.0 exactly
/// (code built for sm_90a, which no other device runs).
enum class AttnArch : uint8_t { any, sm90a };

struct AttentionKernel {
  int code;          ///< stored in the plan; 0 is "none chosen"
  const char *name;  ///< zplan --attention-kernel NAME, reports, messages
  AttnFamily family;
  int variant;
  AttnArch arch;
};

// ZK_ATTENTION_KERNEL(code, name, family, variant, arch). Measured on the H200 (docs/gpu-plan-runs.md,
// "Attention forward: wg3"): wg3 is the fastest on sm_90; fa4x1r (head dim 64) and fa4x1 (128) are the
// fastest of the kernels every device runs.
#define ZK_ATTENTION_KERNELS(X)                                                                                  \
  X(1, "rows", rows, 0, any)     /* exact: one block per query row, fp32 math; every dtype and head dim */       \
  X(2, "wmma", wmma, 0, any)     /* the first tensor-core kernel (WMMA) */                                       \
  X(3, "old", mma, 0, any)       /* the first register kernel, the head dim's block shape */                  \
  X(4, "mma64", mma, 1, any)     /* ... 64-row blocks */                                                      \
  X(5, "mma128r", mma, 2, any)   /* ... 128-row blocks held to 128 registers (head dim 64) */                 \
  X(6, "mma128", mma, 3, any)    /* ... 128-row blocks */                                                     \
  X(7, "fa4x1", fa, 0, any)      /* the second register kernel: 4 warps of one 16-row tile */                 \
  X(8, "fa4x2", fa, 1, any)      /* 4 warps of two tiles */                                                   \
  X(9, "fa8x1", fa, 2, any)      /* 8 warps of one tile */                                                    \
  X(10, "fa4x2s", fa, 3, any)    /* fa4x2 with Q read from shared memory */                                      \
  X(11, "fa4x1r", fa, 4, any)    /* fa4x1 held to the registers of four (two at head dim 128) blocks */          \
  X(12, "fa8x1r", fa, 5, any)    /* fa8x1 held likewise */                                                       \
  X(13, "wgp", wg, 0, sm90a)     /* wgmma, one warpgroup whose products overlap its softmax */                   \
  X(14, "wg1", wg, 1, sm90a)     /* wgmma, one warpgroup per block */                                            \
  X(15, "wg2", wg, 2, sm90a)     /* wgmma, two warpgroups per block */                                           \
  X(16, "wg2r", wg, 3, sm90a)    /* wg2 held to 128 registers */                                                 \
  X(17, "wg2pp", wg, 4, sm90a)   /* wg2 with named barriers between its warpgroups */                            \
  X(18, "wg3", wg, 5, sm90a)     /* a TMA producer warpgroup, two consumers in ping-pong */

// The backward kernels (attention_grad.cu), same form; variant unused. Every one runs on any device.
#define ZK_ATTENTION_GRAD_KERNELS(X)                                                                             \
  X(1, "exact", rows, 0, any)  /* 32 x 32 tiles in fp32 shared memory, CUDA cores; head dims up to 256 */        \
  X(2, "wmma", wmma, 0, any)   /* 64 x 64 tiles, the five products on WMMA */                                    \
  X(3, "mma", mma, 0, any)     /* register-level mma.sync kernels (head dim 64) */

#define ZK_ATTENTION_KERNEL_ROW(code, name, family, variant, arch) \
  AttentionKernel{code, name, AttnFamily::family, variant, AttnArch::arch},
inline constexpr AttentionKernel kAttentionKernels[] = {ZK_ATTENTION_KERNELS(ZK_ATTENTION_KERNEL_ROW)};
inline constexpr AttentionKernel kAttentionGradKernels[] = {ZK_ATTENTION_GRAD_KERNELS(ZK_ATTENTION_KERNEL_ROW)};
#undef ZK_ATTENTION_KERNEL_ROW

/// The forward kernel of a code or a name; null when there is none.
inline const AttentionKernel *attention_kernel(int code) {
  for (const AttentionKernel &k : kAttentionKernels)
    if (k.code == code) return &k;
  return nullptr;
}
inline const AttentionKernel *attention_kernel(const char *name) {
  for (const AttentionKernel &k : kAttentionKernels)
    if (name && std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}
/// The backward kernel of a code or a name; null when there is none.
inline const AttentionKernel *attention_grad_kernel(int code) {
  for (const AttentionKernel &k : kAttentionGradKernels)
    if (k.code == code) return &k;
  return nullptr;
}
inline const AttentionKernel *attention_grad_kernel(const char *name) {
  for (const AttentionKernel &k : kAttentionGradKernels)
    if (name && std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

/// Whether every kernel but the exact one can take this attention: 16-bit floats, head dim 64 or 128, at least
/// one key, and 16-byte aligned rows (every base pointer, and every batch, head and position stride a multiple
/// of 8 elements). The compiler decides with the same rule from the plan's shapes and offsets; the kernels
/// check it again on the pointers they get.
inline bool attention_tensor_core_shape(bool half_dtype, int64_t head_dim, int64_t keys) {
  return half_dtype && (head_dim == 64 || head_dim == 128) && keys > 0;
}

/// The forward kernel the compiler chooses by default for a device of compute capability sm / 10 . sm % 10 (90:
/// the H200) and an attention that can (tensor_core) or cannot take the tensor-core kernels.
inline const AttentionKernel *default_attention_kernel(int sm, int64_t head_dim, bool tensor_core) {
  if (!tensor_core) return attention_kernel("rows");
  if (sm == 90) return attention_kernel("wg3");
  return attention_kernel(head_dim == 64 ? "fa4x1r" : "fa4x1");
}

/// The backward kernel by default: the register kernels at head dim 64, WMMA at 128, exact otherwise.
inline const AttentionKernel *default_attention_grad_kernel(int64_t head_dim, bool tensor_core) {
  if (!tensor_core) return attention_grad_kernel("exact");
  return attention_grad_kernel(head_dim == 64 ? "mma" : "wmma");
}

/// Whether a device of compute capability major.minor runs the kernel.
inline bool attention_kernel_runs_on(const AttentionKernel &k, int major, int minor) {
  return k.arch == AttnArch::any || (major == 9 && minor == 0);
}

/// What the kernel needs of the device, for messages.
inline const char *attention_kernel_needs(const AttentionKernel &k) {
  return k.arch == AttnArch::sm90a ? "wgmma code built for sm_90a: compute capability 9.0 only"
                                   : "any device the library is built for";
}

}  // namespace zk::cuda

#endif  // ZK_ATTENTION_KERNELS_H
