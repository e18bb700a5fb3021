// zk/cpu_kernels.h - the reference kernels: fp32 math over f32/bf16/f16 storage.
//
// These kernels are the numerical oracle of zplan: the CPU backend runs them directly and every CUDA
// kernel is tested against them. The API is deliberately plain (raw pointers, shapes, a dtype tag and an
// optional fp32 scratch buffer) and knows nothing of plans or runtime types, so any test can call it.
//
// Conventions shared by every kernel:
//  - Tensors are dense and row-major; `Dims` holds a shape of at most kMaxRank dimensions.
//  - Floating-point storage (f32, bf16, f16) is loaded to fp32, computed in fp32 (sums accumulate in
//    double where a row is reduced) and stored with round-to-nearest-even.
//  - A kernel validates its shapes and returns a Result; it never reads or writes outside the sizes the
//    shapes imply. Output buffers may alias inputs only for elementwise kernels of equal shape.
//  - Kernels that need temporary fp32 storage say so through a *_scratch() function; the caller passes a
//    buffer of at least that many floats, allocated once ahead of time (the runtime's hot path allocates
//    nothing).
#ifndef ZK_CPU_KERNELS_H
#define ZK_CPU_KERNELS_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace zk {

/// Element types; the values equal zrt.fb.DType in the plan schema.
enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i64 = 3, i32 = 4, bool8 = 5 };

size_t dtype_size(DType t);
const char *dtype_name(DType t);
inline bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

constexpr int kMaxRank = 8;

/// A shape of at most kMaxRank dimensions, stored inline so that no kernel call allocates.
struct Dims {
  int rank = 0;
  int64_t d[kMaxRank] = {};
  Dims() = default;
  Dims(std::initializer_list<int64_t> l);
  /// Builds Dims from `n` values; returns false when n > kMaxRank.
  static bool from(const int64_t *v, int n, Dims *out);
  int64_t operator[](int i) const { return d[i]; }
  int64_t &operator[](int i) { return d[i]; }
  int64_t numel() const;
  bool operator==(const Dims &o) const;
  bool operator!=(const Dims &o) const { return !(*this == o); }
};

/// A read-only tensor argument.
struct In {
  const void *data = nullptr;
  DType dtype = DType::f32;
  Dims shape;
};
/// A written tensor argument.
struct Out {
  void *data = nullptr;
  DType dtype = DType::f32;
  Dims shape;
};

/// The outcome of a kernel call: ok, or a static message saying which check failed.
struct Result {
  const char *error = nullptr;
  bool ok() const { return error == nullptr; }
  static Result fail(const char *m) { return Result{m}; }
};

// --- scalar conversions (round to nearest even; NaN stays NaN) ---
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t x);
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t x);
/// Loads element i of `p` (of type t) as float / stores a float as element i.
float load_f32(const void *p, DType t, int64_t i);
void store_f32(void *p, DType t, int64_t i, float v);
int64_t load_i64(const void *p, DType t, int64_t i);
void store_i64(void *p, DType t, int64_t i, int64_t v);

/// Whether `in` broadcasts (numpy rules, right-aligned) to `out`.
bool broadcastable(const Dims &in, const Dims &out);
/// numpy broadcast of a and b; false when they are incompatible.
bool broadcast_shapes(const Dims &a, const Dims &b, Dims *out);

namespace cpu {

enum class Unary : uint8_t {
  copy, neg, exp, log, sqrt, reciprocal, tanh, erf, sigmoid, relu, cos, sin, abs, gelu_tanh, gelu_erf, silu,
  not_
};
enum class Binary : uint8_t {
  add, sub, mul, div, pow, max, min, equal, less, greater, and_, or_, less_equal, greater_equal
};

/// out = f(x), shapes equal. Float dtypes compute in fp32; abs/neg/copy also work on integers;
/// not_ works on bool8. out's dtype may differ from x's only for copy (which then converts).
Result unary(Unary op, const In &x, const Out &out);
/// Numeric cast: floats truncate toward zero into integers, anything nonzero is true for bool8.
Result cast(const In &x, const Out &out);
/// out = a (op) b with numpy broadcasting of both to out's shape. Arithmetic runs in fp32 for float
/// inputs and in int64 for integer inputs; comparisons write bool8 (or any dtype as 0/1).
Result binary(Binary op, const In &a, const In &b, const Out &out);
/// out = cond ? a : b, all broadcast to out's shape.
Result where(const In &cond, const In &a, const In &b, const Out &out);
/// Broadcasts x to out's shape.
Result expand(const In &x, const Out &out);
/// out = value everywhere.
Result fill(double value, const Out &out);

/// ONNX MatMul with batch broadcast; trans_a / trans_b transpose the last two dims of a / b first.
/// Rank-1 operands follow numpy (prepended / appended 1 that is dropped).
size_t matmul_scratch(const In &a, const In &b, const Out &out, bool trans_a, bool trans_b);
Result matmul(const In &a, const In &b, const Out &out, bool trans_a, bool trans_b, float *scratch);
/// out[..., N] = alpha * (x[..., K] W) + bias; W is [K, N], or [N, K] with trans_w; bias [N] optional
/// (data == nullptr).
size_t linear_scratch(const In &x, const In &w, const Out &out, bool trans_w);
Result linear(const In &x, const In &w, const In &bias, const Out &out, bool trans_w, float alpha, float *scratch);
/// out = alpha * (x W) + bias + residual (plan op linear_residual): linear's product with the residual add of
/// the step after it, the sum rounded once from fp32 (as the GPU's product epilogue rounds it); residual has
/// out's shape. Scratch: linear_scratch.
Result linear_residual(const In &x, const In &w, const In &bias, const In &residual, const Out &out, bool trans_w,
                       float alpha, float *scratch);
/// Few-row products of one input (plan 2.9, a decode program's fused steps): linear_multi is `linear` of x
/// by each of `n` weights (no bias) into its output; linear_gated is act(alpha x Wg) * (alpha x Wu), rounded
/// as the unfused steps round (each product to out's dtype, then the activation, then the product), act one
/// of silu, gelu_tanh, gelu_erf. Scratch: linear_scratch of one product (linear_multi: the largest);
/// linear_gated_scratch adds room for the up product.
Result linear_multi(const In &x, const In *w, const Out *out, int n, bool trans_w, float alpha, float *scratch);
size_t linear_gated_scratch(const In &x, const In &w, const Out &out, bool trans_w);
Result linear_gated(Unary act, const In &x, const In &w_gate, const In &w_up, const Out &out, bool trans_w,
                    float alpha, float *scratch);
/// The residual add and RMS norm folded into the few-row products that read the normed rows (plan op
/// norm_products): sum = x + residual (rounded to sum's dtype, as the add), normed = rms_norm(sum, scale, eps)
/// (rounded, as rms_norm), then out[i] = linear_multi of normed by w[i] (act none, n = 1..4) or out[0] =
/// linear_gated(act, normed, w[0], w[1]) (n = 2). The composition of the unfused kernels, so that it rounds as
/// they do. Scratch: norm_products_scratch floats.
size_t norm_products_scratch(const In &x, const In *w, const Out *out, int n, bool trans_w, Unary act, bool gated);
Result norm_products(const In &x, const In &residual, const In &scale, const In *w, const Out &sum, const Out *out,
                     int n, bool trans_w, Unary act, bool gated, float alpha, float eps, float *scratch);

Result softmax(const In &x, const Out &out, int axis);
/// Normalises over the trailing dims from `axis`; scale and bias (optional) have those trailing dims.
Result layer_norm(const In &x, const In &scale, const In &bias, const Out &out, int axis, float eps);
/// y = x / sqrt(mean(x^2) + eps) * scale over the last axis; scale optional.
Result rms_norm(const In &x, const In &scale, const Out &out, float eps);

/// Rotary position embedding over x's last dim D (even, h = D / 2); cos and sin have one shape that
/// broadcasts to x's with last dim D, in any float dtype. out[i] = x[i] cos[i] - x[i + h] sin[i] and
/// out[i + h] = x[i + h] cos[i + h] + x[i] sin[i + h] for i < h (x * cos + rotate_half(x) * sin). With
/// `inverse`, the transposed map (the gradient w.r.t. x): out[i] = x[i] cos[i] + x[i + h] sin[i + h],
/// out[i + h] = x[i + h] cos[i + h] - x[i] sin[i]. out has x's shape and dtype and may alias x. With
/// `seq_major`, x and out are a rank-4 [B, S, H, D] and the tables broadcast to its head-major view
/// [B, H, S, D] (they index by position s): the rotation of the transposed x, stored sequence-major.
Result rotary(const In &x, const In &cos, const In &sin, const Out &out, bool inverse, bool seq_major = false);

enum class Reduce : uint8_t { sum, mean, max, min, prod };
/// Reduces `naxes` axes (each in [0, rank)); out has the reduced dims as 1 (keepdims) or dropped. Sums
/// and products accumulate in double (int64 for integers); max and min propagate NaN, as numpy does. An
/// empty set gives the reduction's identity, as ONNX defines it: 0, 1, -inf / +inf (the int64 extremes).
Result reduce(Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims);

Result transpose(const In &x, const Out &out, const int64_t *perm);
Result concat(const In *xs, int n, const Out &out, int axis);
/// out[i] = x[start + i * step] per dim; out's shape gives the sizes; steps may be negative.
Result slice(const In &x, const Out &out, const int64_t *starts, const int64_t *steps);
/// ONNX Gather (negative indices count from the end; out-of-range indices are an error).
Result gather(const In &data, const In &indices, const Out &out, int axis);
/// Vocabulary-parallel embedding: table holds rows [row_start, row_start + V_local) of the full table;
/// ids outside that range give zero rows.
Result embedding(const In &table, const In &ids, const Out &out, int64_t row_start);

// --- run-time ops of decoder exports (ONNX semantics) -------------------------------------------------------

/// ONNX Range: out[i] = start + i * delta, out rank 1; start and delta are one-element tensors of out's dtype
/// (the limit only fixes out's length, which the plan already holds). Floats compute start + i * delta in
/// double and round once, so element i does not carry i rounding errors.
Result range(const In &start, const In &delta, const Out &out);
/// ONNX CumSum along `axis` (negative counts from the end): exclusive leaves out the element itself,
/// reverse sums from the end. Floats accumulate in double; integers in int64.
Result cumsum(const In &x, const Out &out, int axis, bool exclusive, bool reverse);
/// ONNX GatherND with batch_dims: indices [..., k] (i64/i32) pick slices of data; negative indices count
/// from the end; an index outside its dim is an error (checked before anything is written).
Result gather_nd(const In &data, const In &indices, const Out &out, int batch_dims);
/// ONNX GatherElements: out has indices' shape, out[i] = data[i with i[axis] replaced by indices[i]].
Result gather_elements(const In &data, const In &indices, const Out &out, int axis);
/// ONNX Mod with numpy broadcasting. fmod = true: C fmod (the result has the dividend's sign); fmod =
/// false (integers only): the result has the divisor's sign, as Python's %. Integer x mod 0 gives 0.
Result mod(const In &a, const In &b, const Out &out, bool fmod);
/// out = floor(x); float dtypes.
Result floor(const In &x, const Out &out);
/// out (bool8) = isnan(x); x a float dtype (a NaN stays NaN through bf16/f16 widening).
Result is_nan(const In &x, const Out &out);
/// ONNX Tile: out's shape is x's times the repeats; out[i] = x[i mod x.shape] per dim.
Result tile(const In &x, const Out &out);

/// Attention: q [B, Hq, S, Dh], k and v [B, Hkv, T, Dh], optional additive mask broadcastable to
/// [B, Hq, S, T], out [B, Hq, S, Dh]. Query head h uses kv head h / (Hq / Hkv). With `causal`, query i
/// sees keys j <= i + (T - S) (the queries are the last S positions of the T keys).
size_t attention_scratch(const In &q, const In &k);
Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                 float *scratch);
/// The same, with an optional second output lse [B, Hq, S] (f32): the log-sum-exp of each query row's
/// scaled, masked scores (-inf for a fully masked row), which attention_grad recomputes probabilities from.
Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, float *scratch);
/// Bits of attention's `seq_major` argument: the operand is stored sequence-major, [B, S, H, Dh] (q, out) or
/// [B, T, Hkv, Dh] (k, v), instead of head-major [B, H, S, Dh]. The compiler folds the head split / merge
/// transposes around the attention into it (compiler/plan/FoldTranspose.cpp), so that the kernels read the
/// projections' outputs and write the output projection's input directly. The lse stays [B, Hq, S].
constexpr int kAttnSeqMajorQ = 1, kAttnSeqMajorK = 2, kAttnSeqMajorV = 4, kAttnSeqMajorOut = 8, kAttnSeqMajorAll = 15;
/// The same, with any operand sequence-major (`seq_major`, the bits above). attention_scratch covers it.
Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, int seq_major, float *scratch);
/// A q, k or v operand read out of a wider sequence-major tensor (plan 2.8): the tensor is [B, S, W] and the
/// operand's [B, S, heads, Dh] rows start `offset` elements into each position's row of `row_stride` (= W)
/// elements; Dh is the output's. The compiler folds the last-dim split of a fused q/k/v projection into it
/// (compiler/plan/FoldTranspose.cpp), so that the attention reads the projection's output in place of three
/// copies. row_stride 0: the operand is a plain tensor.
struct AttnPacked {
  int64_t offset = 0, row_stride = 0, heads = 0;
};
/// The same, with q, k and v (packed[0..2]; null: none) possibly packed. A packed operand is sequence-major.
Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, int seq_major, const AttnPacked *packed, float *scratch);

// --- generation (docs/generation.md) -------------------------------------------------------------------------

/// cache [B, H, L, D] (written in place), value [B, H, S, D], pos [B] (i64): cache[b, h, pos[b] + j] =
/// value[b, h, j] for j < S while pos[b] + j < L. A position outside [0, L) fails.
Result kv_write(const Out &cache, const In &value, const In &pos);
/// A decode step's rotary embedding and cache writes as one step (plan op rope_kv_write): q_out =
/// rotary(q, cos, sin) (forward); k_cache[b, h, pos[b] + j] = rotary(k, cos, sin)[b, h, j] and v_cache[b, h,
/// pos[b] + j] = v[b, h, j]. The composition of rotary and kv_write, so that it rounds as they do. Scratch:
/// rope_kv_write_scratch floats (k's rotated copy).
size_t rope_kv_write_scratch(const In &k);
Result rope_kv_write(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                     const Out &q_out, const Out &k_cache, const Out &v_cache, float *scratch);
/// q [B, Hq, S, D], k and v caches [B, Hkv, L, D], pos [B] (i64): query row i of sequence b attends to the
/// cached keys 0 .. pos[b] + i. Scratch: L floats.
size_t cached_attention_scratch(const In &k);
Result cached_attention(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                        float *scratch);
/// rope_kv_write, then cached_attention of its rotated q (plan op rope_attention): the composition, so that
/// it rounds as they do (the rotated q in q's dtype). Scratch: rope_attention_scratch floats.
size_t rope_attention_scratch(const In &q, const In &k, const In &k_cache);
Result rope_attention(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                      const Out &out, const Out &k_cache, const Out &v_cache, float scale, float *scratch);
/// A llama-style decoder layer of a decode step (plan op decode_layer, plan 2.17): sum1 = x + residual (no
/// residual: sum1 = x), q/k/v of its RMS norm, rope_kv_write into the caches, cached_attention, o, then
/// residual_out = sum1 + o and out = the gated MLP of its RMS norm. The composition of the kernels of the steps
/// it replaces, in their order, so that it rounds as they do. x [B, d] or [B, 1, d]; the caches [B, Hkv, L, Dh];
/// weights W [K, N]. Scratch: decode_layer_scratch floats.
struct DecodeLayerIn {
  In x, residual, pos, cos, sin, norm1, wq, wk, wv, wo, norm2, w_gate, w_up, w_down;
};
size_t decode_layer_scratch(const DecodeLayerIn &a, const In &k_cache);
Result decode_layer(const DecodeLayerIn &a, const Out &k_cache, const Out &v_cache, const Out &out,
                    const Out &residual_out, Unary act, float eps, float scale, float *scratch);
/// out [...] (i64) = the first index of the maximum of each last-axis row of x [..., V]; NaN wins.
Result argmax(const In &x, const Out &out);
/// out [B, ...] = x[b, index[b]] for x [B, S, ...], index [B] (i64) in [0, S).
Result take_rows(const In &x, const In &index, const Out &out);

// --- training: backward kernels, the optimizer, gradient bookkeeping ----------------------------------------

/// dx = dy * f'(x) for act in {gelu_tanh, gelu_erf, silu}; x, dy and dx share one shape.
Result act_grad(Unary act, const In &x, const In &dy, const Out &dx);
/// dx = y * (dy - sum(dy * y, axis)), the softmax backward from its output y.
Result softmax_grad(const In &y, const In &dy, const Out &dx, int axis);
/// The layer_norm backward over the dims >= axis. scale may be absent (then 1); dscale and dbias (each
/// optional: data == nullptr) have scale's size and are summed over the leading dims.
size_t layer_norm_grad_scratch(const In &x, int axis);
Result layer_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, const Out &dbias,
                       int axis, float eps, float *scratch);
/// The rms_norm backward over the last axis; scale optional (then 1), dscale optional.
size_t rms_norm_grad_scratch(const In &x);
Result rms_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, float eps,
                     float *scratch);
/// Flash-style attention backward: probabilities are recomputed from q, k and the forward's lse (no saved
/// probability matrix). Shapes and the causal / mask conventions are the forward's; dq has q's shape, dk and
/// dv k's shape, each kv head's gradient summed over the query heads that share it (GQA).
size_t attention_grad_scratch(const In &q, const In &k);
Result attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                      const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                      float *scratch);
/// The embedding backward: dtable [V_local, D] is zeroed, then row ids[n] - row_start gets dy[n] added for
/// every id in this rank's range [row_start, row_start + V_local); other ids are skipped. Rows sum in fp32 in
/// the order of the ids; scratch holds one row.
size_t embedding_grad_scratch(const Out &dtable);
Result embedding_grad(const In &ids, const In &dy, const Out &dtable, int64_t row_start, float *scratch);
/// out[n] = logits[n, labels[n] - row_start] for labels in [row_start, row_start + V_local), else 0 (also 0
/// for labels equal to ignore_index).
Result label_pick(const In &logits, const In &labels, const Out &out, int64_t row_start, int64_t ignore_index);
/// The label_pick backward: dlogits is zero except dlogits[n, labels[n] - row_start] = dy[n] for labels in range.
Result label_pick_grad(const In &labels, const In &dy, const Out &dlogits, int64_t row_start, int64_t ignore_index);

/// The AdamW hyper-parameters that are attributes of the plan's adamw op.
struct AdamWParams {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
/// The per-step scalars of one AdamW update, in the form the element loop uses. PyTorch computes these in
/// double (Python floats) and applies them to fp32 tensors as fp32; so does from().
struct AdamWStep {
  float decay;       // 1 - lr * weight_decay
  float one_m_b1;    // 1 - beta1 (the lerp weight)
  float beta2;
  float one_m_b2;    // 1 - beta2
  float step_size;   // lr / (1 - beta1^t)
  float bc2_sqrt;    // sqrt(1 - beta2^t)
  float eps;
  float grad_scale;
  static AdamWStep from(const AdamWParams &p, double lr, int64_t step, double grad_scale);
};
/// torch.optim.AdamW (section 3 of docs/training-contract.md), in place on param, m and v (same shape, any
/// float storage). lr (f32), step (i64, 1-based) and grad_scale (f32) are scalar tensors (one element).
Result adamw(const Out &param, const In &grad, const Out &m, const Out &v, const In &lr, const In &step,
             const In &grad_scale, const AdamWParams &p);
/// The element loop of the reference AdamW on fp32 arrays: the single definition of the operation order,
/// which the optimised AdamWPool runs over its slices, so the two agree bit for bit.
void adamw_f32(float *param, const float *grad, float *m, float *v, int64_t n, const AdamWStep &s);
/// target += value (value broadcast to target's shape), fp32 math; in place.
Result accumulate(const Out &target, const In &value);
/// out (one f32 element) = sum of x[i]^2, accumulated in double.
Result sum_squares(const In &x, const Out &out);

// --- sampling (zk/sample.h, docs/sampling.md) ---
/// The parameters of one sample call, read from the op's scalar operands.
struct SampleParams {
  float temperature = 0.0f;  // <= 0 (or NaN): greedy
  int64_t top_k = 0;         // <= 0 or >= V: off
  float top_p = 1.0f;        // >= 1 (or NaN): off
  int64_t seed = 0;
  int64_t step = 0;
  int64_t row_offset = 0;  // the Philox row of row b is row_offset + b (a batch split over dp: dp_index * B)
};
/// Reads the five scalar tensors (f32, i64, f32, i64, i64; one element each).
Result sample_params(const In &temperature, const In &top_k, const In &top_p, const In &seed, const In &step,
                     SampleParams *out);
/// Floats of scratch that sample needs: three 64-bit words per logit of a row.
size_t sample_scratch(const In &logits);
/// ids[b] (i64) = one token drawn from row b of logits [B, V] (float storage): greedy (the arg max, lowest
/// index on ties) when the temperature is not positive, else from softmax(logits / T) restricted to the
/// top_k largest and then to the top_p nucleus, with Philox4x32-10 keyed by seed at counter (step, b).
Result sample(const In &logits, const SampleParams &p, const Out &ids, float *scratch);

}  // namespace cpu

/// The optimiser-offload AdamW: fp32 param, grad, m and v in host memory, updated by a fixed pool of
/// threads created once (no allocation or thread creation per call). Each thread runs adamw_f32 over one
/// contiguous slice, so the result is bitwise identical to cpu::adamw on fp32 tensors.
class AdamWPool {
 public:
  /// threads <= 0 picks std::thread::hardware_concurrency().
  explicit AdamWPool(int threads = 0);
  ~AdamWPool();
  AdamWPool(const AdamWPool &) = delete;
  AdamWPool &operator=(const AdamWPool &) = delete;
  int threads() const { return nthreads_; }
  /// Updates n elements in place; returns when every slice is done.
  void step(float *param, const float *grad, float *m, float *v, int64_t n, const cpu::AdamWStep &s);

 private:
  struct Impl;
  Impl *impl_ = nullptr;
  int nthreads_ = 1;
};

namespace cpu {

}  // namespace cpu
}  // namespace zk

#endif  // ZK_CPU_KERNELS_H
