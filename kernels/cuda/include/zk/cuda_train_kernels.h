// zk/cuda_train_kernels.h - the CUDA kernels of training (backwards, the optimizer, gradient bookkeeping)
// and of the run-time ops of decoder exports. Same conventions as zk/cuda_kernels.h: the CPU reference
// kernels' descriptors and meanings (zk/cpu_kernels.h), device pointers, one stream, a GpuStatus naming the
// failed check, no allocation and no synchronisation. Kernels that need temporary device memory say how
// much through a *_workspace() function (bytes); the caller passes a buffer of at least that size.
//
// Scalars that the plan computes on the device (AdamW's lr, step and grad_scale; Range's start and delta)
// are read by the kernels from device memory, so that nothing waits for the host.
#ifndef ZK_CUDA_TRAIN_KERNELS_H
#define ZK_CUDA_TRAIN_KERNELS_H

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "zk/cpu_kernels.h"
#include "zk/cuda_status.h"

namespace zk {
namespace cuda {

// --- backwards -----------------------------------------------------------------------------------------
/// dx = dy * f'(x), act in {gelu_tanh, gelu_erf, silu}; shapes equal, float dtypes.
GpuStatus act_grad(cpu::Unary act, const In &x, const In &dy, const Out &dx, cudaStream_t stream);
/// dx = y * (dy - sum(dy * y, axis)).
GpuStatus softmax_grad(const In &y, const In &dy, const Out &dx, int axis, cudaStream_t stream);
/// layer_norm's backward over dims >= axis; scale optional; dscale and dbias optional (summed over the
/// leading dims deterministically: per-chunk partial sums, then one sum per column).
size_t layer_norm_grad_workspace(const In &x, int axis);
GpuStatus layer_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, const Out &dbias,
                          int axis, float eps, void *workspace, cudaStream_t stream);
size_t rms_norm_grad_workspace(const In &x);
GpuStatus rms_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, float eps,
                        void *workspace, cudaStream_t stream);
/// The attention forward of zk/cuda_kernels.h with the optional lse output [B, Hq, S] (f32).
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, cudaStream_t stream);
/// The same with any of q, k, v, out stored sequence-major ([B, S, H, Dh]; the seq_major bits of
/// zk/cpu_kernels.h), as the plan's folded head transposes leave them.
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, cudaStream_t stream);
/// The same with q, k and v possibly packed (packed[0..2], zk::cpu::AttnPacked; null: none): read at an element
/// offset out of a wider [B, S, W] tensor, as the plan's folded q/k/v splits leave them. The overloads without
/// a kernel run the one ZK_CUDA_ATTENTION names (a name of zk/attention_kernels.h; for the GPU tests and
/// benchmarks), else the compiler's default for the current device; an attention the tensor-core kernels
/// cannot take runs the exact one.
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, const cpu::AttnPacked *packed, cudaStream_t stream);
/// The same with the plan's kernel (a code of zk/attention_kernels.h, the attention's int 11, plan 2.11): that
/// kernel and no other runs; one the attention cannot take (a tensor-core kernel on fp32, say) is an error.
/// Code 0 (plans before 2.11) runs the kernels every device runs, chosen by the attention's dtype and head dim.
/// The backend checks the device against the kernel before the first run (attention_kernel_runs_on).
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                    float scale, int seq_major, const cpu::AttnPacked *packed, int kernel, cudaStream_t stream);
/// Flash-style attention backward: probabilities recomputed tile by tile from q, k and lse; dk and dv of a
/// kv head summed over its query heads (GQA) inside one block, so no atomics and a deterministic result.
/// Head dims up to 256; q, k, v, out, dout, dq, dk, dv share one float dtype. bf16/f16 with head dims 64
/// and 128 run on tensor cores (ZK_CUDA_ATTENTION_GRAD=exact forces the fp32 CUDA-core path, =wmma the WMMA
/// one, for direct callers: the GPU tests).
size_t attention_grad_workspace(const In &q);
GpuStatus attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                         const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                         void *workspace, cudaStream_t stream);
/// The same with the plan's backward kernel (a code of zk/attention_kernels.h's backward table, the
/// attention_grad's int 1, plan 2.11; 0: the default by dtype and head dim), strictly as for the forward.
GpuStatus attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                         const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                         void *workspace, int kernel, cudaStream_t stream);
/// The embedding backward: each row of dtable is the fp32 sum, in id order, of the dy rows whose id names
/// it (ids outside [row_start, row_start + V_local) are skipped), rounded once: deterministic and equal to
/// the CPU reference. No workspace (the function stays for the backends' uniform sizing and returns 0).
size_t embedding_grad_workspace(const Out &dtable);
GpuStatus embedding_grad(const In &ids, const In &dy, const Out &dtable, int64_t row_start, void *workspace,
                         cudaStream_t stream);
GpuStatus label_pick(const In &logits, const In &labels, const Out &out, int64_t row_start, int64_t ignore_index,
                     cudaStream_t stream);
GpuStatus label_pick_grad(const In &labels, const In &dy, const Out &dlogits, int64_t row_start, int64_t ignore_index,
                          cudaStream_t stream);

// --- generation (docs/generation.md; the CPU reference: kernels/cpu/generate.cpp) --------------------------
/// cache[b, h, pos[b] + j] = value[b, h, j] in place; rows past the cache are dropped.
GpuStatus kv_write(const Out &cache, const In &value, const In &pos, cudaStream_t stream);
/// zk::cpu::rope_kv_write's twin: q_out = rotary(q, cos, sin); the rotated k and v written into the caches at
/// pos[b] + j, in one kernel (a decode step's two rotaries and two cache writes).
GpuStatus rope_kv_write(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                        const Out &q_out, const Out &k_cache, const Out &v_cache, cudaStream_t stream);
/// Query row i of sequence b attends to the cached keys 0 .. pos[b] + i (L <= 12288).
GpuStatus cached_attention(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                           cudaStream_t stream);
/// The first index of each last-axis row's maximum (NaN wins), i64.
GpuStatus argmax(const In &x, const Out &out, cudaStream_t stream);
/// out[b] = x[b, index[b]].
GpuStatus take_rows(const In &x, const In &index, const Out &out, cudaStream_t stream);

// --- optimizer and gradient bookkeeping ------------------------------------------------------------------
/// torch.optim.AdamW in place; lr (f32), step (i64) and grad_scale (f32) are one-element device tensors.
/// The element update uses round-to-nearest intrinsics without contraction, in the reference's order, so
/// fp32 results equal cpu::adamw's bit for bit.
GpuStatus adamw(const Out &param, const In &grad, const Out &m, const Out &v, const In &lr, const In &step,
                const In &grad_scale, const cpu::AdamWParams &p, cudaStream_t stream);
/// target += value (value broadcast to target).
GpuStatus accumulate(const Out &target, const In &value, cudaStream_t stream);
/// out (one f32) = sum of x^2 in double: fixed per-block partials, then one block sums them (deterministic).
size_t sum_squares_workspace();
GpuStatus sum_squares(const In &x, const Out &out, void *workspace, cudaStream_t stream);

// --- sampling ---------------------------------------------------------------------------------------------
/// cpu::sample on the device, bit for bit: ids [B] (i64) drawn from logits [B, V]; temperature and top_p are
/// one-element f32 device tensors, top_k, seed and step one-element i64 device tensors; row b draws Philox
/// row row_offset + b. One block per row, no workspace.
GpuStatus sample(const In &logits, const In &temperature, const In &top_k, const In &top_p, const In &seed,
                 const In &step, const Out &ids, int64_t row_offset, cudaStream_t stream);

// --- run-time ops of decoder exports ---------------------------------------------------------------------
GpuStatus range(const In &start, const In &delta, const Out &out, cudaStream_t stream);
GpuStatus cumsum(const In &x, const Out &out, int axis, bool exclusive, bool reverse, cudaStream_t stream);
/// Index tuples are device data and are not checked on the host: one outside its dim yields a zero slice
/// (the CPU kernel reports it as an error instead), as cuda::gather does.
GpuStatus gather_nd(const In &data, const In &indices, const Out &out, int batch_dims, cudaStream_t stream);
/// An index outside its dim yields 0 (see gather_nd).
GpuStatus gather_elements(const In &data, const In &indices, const Out &out, int axis, cudaStream_t stream);
GpuStatus mod(const In &a, const In &b, const Out &out, bool fmod, cudaStream_t stream);
GpuStatus floor(const In &x, const Out &out, cudaStream_t stream);
/// out (bool8) = isnan(x); x a float dtype.
GpuStatus is_nan(const In &x, const Out &out, cudaStream_t stream);
GpuStatus tile(const In &x, const Out &out, cudaStream_t stream);
/// reduce for Reduce::min and Reduce::prod (cuda::reduce forwards them here).
GpuStatus reduce_min_prod(cpu::Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims,
                          cudaStream_t stream);

}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_TRAIN_KERNELS_H
