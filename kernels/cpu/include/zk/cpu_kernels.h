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

Result softmax(const In &x, const Out &out, int axis);
/// Normalises over the trailing dims from `axis`; scale and bias (optional) have those trailing dims.
Result layer_norm(const In &x, const In &scale, const In &bias, const Out &out, int axis, float eps);
/// y = x / sqrt(mean(x^2) + eps) * scale over the last axis; scale optional.
Result rms_norm(const In &x, const In &scale, const Out &out, float eps);

enum class Reduce : uint8_t { sum, mean, max };
/// Reduces `naxes` axes (each in [0, rank)); out has the reduced dims as 1 (keepdims) or dropped.
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

/// Attention: q [B, Hq, S, Dh], k and v [B, Hkv, T, Dh], optional additive mask broadcastable to
/// [B, Hq, S, T], out [B, Hq, S, Dh]. Query head h uses kv head h / (Hq / Hkv). With `causal`, query i
/// sees keys j <= i + (T - S) (the queries are the last S positions of the T keys).
size_t attention_scratch(const In &q, const In &k);
Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                 float *scratch);

}  // namespace cpu
}  // namespace zk

#endif  // ZK_CPU_KERNELS_H
