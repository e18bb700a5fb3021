// zk/cuda_kernels.h - the CUDA kernels of zplan: fp32 math over f32/bf16/f16 storage, on a stream.
//
// The API mirrors the CPU reference kernels (zk/cpu_kernels.h) on purpose: the same zk::In / zk::Out
// descriptors (their `data` now device pointers), the same shapes and attribute meanings, one extra
// cudaStream_t. Every function here is the top tier of a kernel (see STYLE.md): it validates dtypes and
// shapes on the host, returns a GpuStatus naming the failed check, and only then calls the launcher tier
// (zk::cuda::launch, raw pointers + sizes + stream, returning cudaError_t), which starts the __global__
// kernels. Nothing here synchronises the stream or allocates device memory: scratch comes from the caller
// (the plan's workspace buffers), so every call can be captured into a CUDA graph.
//
// Numerics: loads widen to fp32, math runs in fp32 (row reductions too; reductions over many elements
// use fp32 tree sums, accurate to well under 1e-5 relative), stores round to nearest even.
#ifndef ZK_CUDA_KERNELS_H
#define ZK_CUDA_KERNELS_H

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zk/cuda_status.h"
#include "zk/few_rows_kernels.h"
#include "zk/gemm_algos.h"

namespace zk {
namespace cuda {

using cpu::Binary;
using cpu::Reduce;
using cpu::Unary;

/// Whether a CUDA device of compute capability >= 9.0 and at least `min_bytes` of free memory is present.
/// On failure `why` says what is missing ("no CUDA device: cudaGetDeviceCount returned ...",
/// "device 0 is sm_80; zplan's kernels are built for sm_90", "only N MiB free, M MiB needed").
bool device_usable(size_t min_bytes, std::string *why);

// --- elementwise -------------------------------------------------------------------------------------
/// out = f(x); shapes equal; float dtypes (copy/neg/abs/relu also integers; not_ on bool8). copy may convert.
GpuStatus unary(Unary op, const In &x, const Out &out, cudaStream_t stream);
/// Numeric conversion between any two dtypes (floats truncate toward zero into integers).
GpuStatus cast(const In &x, const Out &out, cudaStream_t stream);
/// out = a (op) b, numpy broadcasting of both to out's shape (rank <= kMaxRank).
GpuStatus binary(Binary op, const In &a, const In &b, const Out &out, cudaStream_t stream);
/// out = cond ? a : b, all broadcast.
GpuStatus where(const In &cond, const In &a, const In &b, const Out &out, cudaStream_t stream);
/// Broadcasts x to out's shape (same dtype).
GpuStatus expand(const In &x, const Out &out, cudaStream_t stream);
GpuStatus fill(double value, const Out &out, cudaStream_t stream);
/// Fused: out = act(x + bias), bias [N] over x's last dim; act is gelu_tanh, gelu_erf, silu, relu or copy.
GpuStatus bias_act(Unary act, const In &x, const In &bias, const Out &out, cudaStream_t stream);
/// Gated MLP product: out = act(gate) * up, shapes equal; act is silu, gelu_tanh or gelu_erf.
GpuStatus gated(Unary act, const In &gate, const In &up, const Out &out, cudaStream_t stream);

// --- rows --------------------------------------------------------------------------------------------
GpuStatus softmax(const In &x, const Out &out, int axis, cudaStream_t stream);
/// Softmax over the last axis of x * scale + mask (mask optional, broadcast to x), with an optional causal
/// mask: for x [..., S, T], row i sees columns j <= i + (T - S).
GpuStatus masked_softmax(const In &x, const In &mask, const Out &out, bool causal, float scale, cudaStream_t stream);
GpuStatus layer_norm(const In &x, const In &scale, const In &bias, const Out &out, int axis, float eps,
                     cudaStream_t stream);
GpuStatus rms_norm(const In &x, const In &scale, const Out &out, float eps, cudaStream_t stream);
/// Fused residual + norm over the last axis: sum = x + residual (written when sum.data != nullptr),
/// out = layer_norm(sum) (bias optional) or, with rms, rms_norm(sum).
GpuStatus residual_norm(const In &x, const In &residual, const In &scale, const In &bias, const Out &sum,
                        const Out &out, bool rms, float eps, cudaStream_t stream);
GpuStatus reduce(Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims,
                 cudaStream_t stream);

// --- data movement -----------------------------------------------------------------------------------
GpuStatus transpose(const In &x, const Out &out, const int64_t *perm, cudaStream_t stream);
GpuStatus concat(const In *xs, int n, const Out &out, int axis, cudaStream_t stream);
GpuStatus slice(const In &x, const Out &out, const int64_t *starts, const int64_t *steps, cudaStream_t stream);
/// ONNX Gather. Indices are data on the device and are not checked on the host: an index outside
/// [-dim, dim) yields a zero row (the CPU kernel reports it as an error instead).
GpuStatus gather(const In &data, const In &indices, const Out &out, int axis, cudaStream_t stream);
/// Vocabulary-parallel embedding; ids outside [row_start, row_start + V_local) give zero rows.
GpuStatus embedding(const In &table, const In &ids, const Out &out, int64_t row_start, cudaStream_t stream);

// --- attention ---------------------------------------------------------------------------------------
/// Fused attention (flash-attention style, online softmax, fp32 accumulation): q [B, Hq, S, Dh],
/// k, v [B, Hkv, T, Dh], optional additive mask broadcastable to [B, Hq, S, T], out [B, Hq, S, Dh].
/// bf16/f16 with Dh in {64, 128} run on tensor cores; every other case on a plain fp32 path.
GpuStatus attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                    cudaStream_t stream);

// --- matrix products (cuBLASLt) ----------------------------------------------------------------------
/// What a cuBLASLt epilogue fuses into a linear: nothing, + bias, gelu (tanh form), gelu(x + bias).
enum class Epilogue : uint8_t { none, bias, gelu, gelu_bias };

/// A cuBLASLt handle plus a cache of the algorithms chosen per problem. One per device per thread.
class Blas {
 public:
  static GpuStatus create(std::unique_ptr<Blas> *out);
  ~Blas();
  Blas(const Blas &) = delete;
  Blas &operator=(const Blas &) = delete;
  struct Impl;
  Impl *impl() { return impl_; }

 private:
  Blas() = default;
  Impl *impl_ = nullptr;
};

/// The workspace a matrix product may use; the plan reserves a buffer of at least this (kind workspace).
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

/// ONNX MatMul (batch broadcast, trans_a / trans_b on the last two dims) with fp32 accumulation; a, b and
/// out share one float dtype. workspace may be null (then workspace_bytes must be 0).
/// kernel: the plan's choice (plan 2.9 / 2.14, --zplan-decode-products) for a product of at most
/// kSkinnyMaxRows rows against one 2-D operand: FewRows::cluster runs the few-row kernels where they hold the
/// shape (cuBLASLt otherwise), FewRows::stream the streaming kernel (an error where it does not hold the
/// product); FewRows::library, and every other product, cuBLASLt. early_weights: the caller knows that no
/// kernel writes b (the plan's Instr.early, plan 2.18), so the few-row kernels load it before they wait for the
/// previous kernel (skinny_linear's early_weights); cuBLASLt ignores it.
GpuStatus matmul(Blas &blas, const In &a, const In &b, const Out &out, bool trans_a, bool trans_b, void *workspace,
                 size_t workspace_bytes, cudaStream_t stream, FewRows kernel = FewRows::library,
                 bool early_weights = false);
/// out[..., N] = alpha * x[..., K] W (+ bias) (then gelu for the gelu epilogues); W [K, N] or [N, K] with
/// trans_w; x, W, out share one float dtype; bias [N] of that dtype when the epilogue takes one. kernel as
/// matmul's. algo: the plan's cuBLASLt algorithm for the product (plan 2.15, zk/gemm_algos.h), run as given or
/// refused (cuBLASLt's check fails, or it needs more workspace than there is); null: cuBLASLt's first heuristic
/// answer. early_weights as matmul's, for W.
GpuStatus linear(Blas &blas, const In &x, const In &w, const In &bias, const Out &out, bool trans_w, float alpha,
                 Epilogue epilogue, void *workspace, size_t workspace_bytes, cudaStream_t stream,
                 FewRows kernel = FewRows::library, const GemmAlgo *algo = nullptr, bool early_weights = false);
/// out[..., N] = alpha * x[..., K] W (+ bias) + residual (plan 2.13, linear_residual): linear's product with
/// the residual (out's shape and dtype, not out itself) added in cuBLASLt's epilogue as its C operand with
/// beta = 1, so that the sum is rounded once from fp32. Always cuBLASLt (the few-row kernel has no such
/// epilogue).
GpuStatus linear_residual(Blas &blas, const In &x, const In &w, const In &bias, const In &residual, const Out &out,
                          bool trans_w, float alpha, void *workspace, size_t workspace_bytes, cudaStream_t stream,
                          const GemmAlgo *algo = nullptr);
/// The plan's fused few-row products (plan 2.9, kernels/cuda/skinny_gemm.cu): linear_multi writes
/// out[i] = alpha x w[i] for n = 2..4 weights of one x in one launch; linear_gated writes
/// act(alpha x w_gate) * (alpha x w_up). At most kSkinnyMaxRows rows. The weights are read before the wait
/// for the previous kernel with early_weights (the plan's Instr.early: no kernel writes them; as
/// skinny_linear's). kernel: the plan's (2.14), the cluster kernels or the streaming kernel
/// (FewRows::library is refused).
GpuStatus linear_multi(Blas &blas, const In &x, const In *w, const Out *out, int n, bool trans_w, float alpha,
                       cudaStream_t stream, FewRows kernel = FewRows::cluster, bool early_weights = false);
GpuStatus linear_gated(Blas &blas, Unary act, const In &x, const In &w_gate, const In &w_up, const Out &out,
                       bool trans_w, float alpha, cudaStream_t stream, FewRows kernel = FewRows::cluster,
                       bool early_weights = false);

/// Products with few rows (kernels/cuda/skinny_gemm.cu): at most this many rows of x.
constexpr int64_t kSkinnyMaxRows = 16;
/// Whether skinny_linear runs a product of M rows, contraction K and N columns (W [K, N], or [N, K] with
/// trans_w) of this dtype.
bool skinny_linear_fits(DType dtype, int64_t M, int64_t K, int64_t N, bool trans_w);
/// The streaming kernel's launch shape: the weight columns of a block's strip (2, 4, 8 or 16 pieces of 16
/// bytes: 16 to 128 columns in bf16 / f16, 8 to 64 in f32) and the K split (1 to 8 blocks, one cluster, each
/// streaming a K-slab of the strip). cols 0: the kernel's own choice (skinny_stream_shape), which the
/// launchers make unless told otherwise; another shape is for comparing shapes in the kernel tests.
struct StreamShape {
  int cols = 0;
  int splits = 0;
};
/// The streaming kernel's choice for K and the weights' widths n[0..count) (gated: the pair's width once) on
/// this device: the grid that fills the SMs most evenly in one wave (kernels/cuda/skinny_gemm.cu,
/// choose_stream_shape).
StreamShape skinny_stream_shape(DType dtype, int64_t K, const int64_t* n, int count, bool gated);
/// linear's contract (out = epilogue(alpha x W + bias)) for at most kSkinnyMaxRows rows, by a kernel that
/// streams W at the memory's rate instead of cuBLASLt; needs no workspace. It is launched as a programmatic
/// dependent of the stream's previous kernel: it reads x (and bias) only after that kernel has finished, and
/// W too unless early_weights says that no kernel writes W (then its first loads go out before the wait).
/// kernel: FewRows::cluster or FewRows::stream (zk/few_rows_kernels.h; an error where it does not hold the
/// product); shape: the streaming kernel's (default: its choice).
GpuStatus skinny_linear(const In& x, const In& w, const In& bias, const Out& out, bool trans_w, float alpha,
                        Epilogue epilogue, bool early_weights, cudaStream_t stream,
                        FewRows kernel = FewRows::cluster, StreamShape shape = {});
/// The fused kernels behind linear_multi and linear_gated (early_weights, kernel and shape as
/// skinny_linear's).
GpuStatus skinny_linear_multi(const In& x, const In* w, const Out* out, int n, bool trans_w, float alpha,
                              bool early_weights, cudaStream_t stream, FewRows kernel = FewRows::cluster,
                              StreamShape shape = {});
GpuStatus skinny_linear_gated(Unary act, const In& x, const In& w_gate, const In& w_up, const Out& out,
                              bool trans_w, float alpha, bool early_weights, cudaStream_t stream,
                              FewRows kernel = FewRows::cluster, StreamShape shape = {});
/// The plan's norm_products (kernels/cpu's norm_products contract): sum = x + residual, the RMS norm of it
/// with scale and eps folded into the few-row products that read it (n weights [K, N_i], or the gated pair),
/// by the streaming kernel, which every block runs the norm in (at most 4 rows, x's rows as floats within 64
/// KiB, every N a multiple of 8). The weights are read before the wait with early_weights (as linear_multi's).
GpuStatus norm_products(Blas &blas, const In &x, const In &residual, const In &scale, const In *w, const Out &sum,
                        const Out *out, int n, Unary act, bool gated, float alpha, float eps, cudaStream_t stream,
                        bool early_weights = false);
GpuStatus skinny_norm_products(const In& x, const In& residual, const In& scale, const In* w, const Out& sum,
                               const Out* out, int n, Unary act, bool gated, float alpha, float eps,
                               bool early_weights, cudaStream_t stream, StreamShape shape = {});

}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_KERNELS_H
