// Matrix products through OpenBLAS sgemm: ONNX MatMul with batch broadcast, and linear (x W + b).
// Non-f32 storage is widened into the caller's scratch, multiplied in fp32 and narrowed on store.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "common.h"

namespace zk {
namespace cpu {
namespace {

/// The matrix view of a matmul operand after numpy's rank-1 promotion.
struct MatShape {
  Dims batch;        // leading dims
  int64_t rows = 0;  // stored rows
  int64_t cols = 0;  // stored cols
  bool vec = false;  // the operand was rank 1
};

MatShape mat_of(const Dims &s, bool is_b) {
  MatShape m;
  if (s.rank == 1) {
    m.vec = true;
    m.rows = is_b ? s.d[0] : 1;
    m.cols = is_b ? 1 : s.d[0];
    return m;
  }
  m.batch.rank = s.rank - 2;
  for (int i = 0; i < s.rank - 2; ++i) m.batch.d[i] = s.d[i];
  m.rows = s.d[s.rank - 2];
  m.cols = s.d[s.rank - 1];
  return m;
}

struct MatmulPlan {
  MatShape a, b;
  Dims batch;
  int64_t M = 0, N = 0, K = 0;
};

const char *plan_matmul(const In &a, const In &b, const Out &out, bool ta, bool tb, MatmulPlan *p) {
  if (a.shape.rank < 1 || b.shape.rank < 1) return "matmul: operands must have rank >= 1";
  p->a = mat_of(a.shape, false);
  p->b = mat_of(b.shape, true);
  bool ta_eff = ta && !p->a.vec, tb_eff = tb && !p->b.vec;
  p->M = ta_eff ? p->a.cols : p->a.rows;
  int64_t ka = ta_eff ? p->a.rows : p->a.cols;
  int64_t kb = tb_eff ? p->b.cols : p->b.rows;
  p->N = tb_eff ? p->b.rows : p->b.cols;
  if (ka != kb) return "matmul: contraction dims differ";
  p->K = ka;
  if (!broadcast_shapes(p->a.batch, p->b.batch, &p->batch)) return "matmul: batch dims do not broadcast";
  Dims expect = p->batch;
  if (expect.rank + 2 > kMaxRank) return "matmul: rank too large";
  if (!p->a.vec) expect.d[expect.rank++] = p->M;
  if (!p->b.vec) expect.d[expect.rank++] = p->N;
  if (expect != out.shape) return "matmul: output shape is not the product's shape";
  if (!is_float(a.dtype) || !is_float(b.dtype) || !is_float(out.dtype)) return "matmul: operands must be float";
  return nullptr;
}

/// Pointer to `n` fp32 values of `x` starting at element `off`: the storage itself for f32, else a widened
/// copy in `scratch`.
const float *as_f32(const In &x, int64_t off, int64_t n, float *scratch) {
  if (x.dtype == DType::f32) return static_cast<const float *>(x.data) + off;
  for (int64_t i = 0; i < n; ++i) scratch[i] = load_f32(x.data, x.dtype, off + i);
  return scratch;
}

}  // namespace

size_t matmul_scratch(const In &a, const In &b, const Out &out, bool ta, bool tb) {
  MatmulPlan p;
  if (plan_matmul(a, b, out, ta, tb, &p)) return 0;
  size_t n = 0;
  if (a.dtype != DType::f32) n += static_cast<size_t>(p.M * p.K);
  if (b.dtype != DType::f32) n += static_cast<size_t>(p.K * p.N);
  if (out.dtype != DType::f32) n += static_cast<size_t>(p.M * p.N);
  return n;
}

Result matmul(const In &a, const In &b, const Out &out, bool ta, bool tb, float *scratch) {
  MatmulPlan p;
  if (const char *e = plan_matmul(a, b, out, ta, tb, &p)) return Result::fail(e);
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t a_mat = p.a.rows * p.a.cols, b_mat = p.b.rows * p.b.cols, c_mat = M * N;
  float *sa = scratch;
  float *sb = sa + (a.dtype != DType::f32 ? M * K : 0);
  float *sc = sb + (b.dtype != DType::f32 ? K * N : 0);
  const bool ta_eff = ta && !p.a.vec, tb_eff = tb && !p.b.vec;
  // Strides (in matrices) of each operand across the broadcast batch.
  int64_t st[2][kMaxRank];
  detail::broadcast_strides(p.a.batch, p.batch, st[0]);
  detail::broadcast_strides(p.b.batch, p.batch, st[1]);
  if (K == 0) {
    // An empty contraction is a zero product; sgemm would be handed a zero leading dimension.
    for (int64_t i = 0; i < out.shape.numel(); ++i) store_f32(out.data, out.dtype, i, 0.0f);
    return {};
  }
  detail::strided_loop<2>(p.batch, st, [&](int64_t bi, const int64_t *off) {
    const float *A = as_f32(a, off[0] * a_mat, a_mat, sa);
    const float *B = as_f32(b, off[1] * b_mat, b_mat, sb);
    float *C = out.dtype == DType::f32 ? static_cast<float *>(out.data) + bi * c_mat : sc;
    cblas_sgemm(CblasRowMajor, ta_eff ? CblasTrans : CblasNoTrans, tb_eff ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(p.a.cols), B,
                static_cast<int>(p.b.cols), 0.0f, C, static_cast<int>(N));
    if (out.dtype != DType::f32)
      for (int64_t i = 0; i < c_mat; ++i) store_f32(out.data, out.dtype, bi * c_mat + i, sc[i]);
  });
  return {};
}

namespace {
const char *plan_linear(const In &x, const In &w, const Out &out, bool tw, int64_t *M, int64_t *K, int64_t *N) {
  if (x.shape.rank < 1 || w.shape.rank != 2) return "linear: x must have rank >= 1 and W rank 2";
  *K = x.shape.d[x.shape.rank - 1];
  *N = tw ? w.shape.d[0] : w.shape.d[1];
  if ((tw ? w.shape.d[1] : w.shape.d[0]) != *K) return "linear: W does not match x's last dim";
  if (out.shape.rank != x.shape.rank) return "linear: output rank differs from x's";
  for (int i = 0; i + 1 < x.shape.rank; ++i)
    if (out.shape.d[i] != x.shape.d[i]) return "linear: output leading dims differ from x's";
  if (out.shape.d[out.shape.rank - 1] != *N) return "linear: output last dim is not W's N";
  if (!is_float(x.dtype) || !is_float(w.dtype) || !is_float(out.dtype)) return "linear: operands must be float";
  *M = *K == 0 ? 0 : x.shape.numel() / *K;
  if (*K == 0) *M = out.shape.numel() / (*N == 0 ? 1 : *N);
  return nullptr;
}
}  // namespace

size_t linear_scratch(const In &x, const In &w, const Out &out, bool tw) {
  int64_t M, K, N;
  if (plan_linear(x, w, out, tw, &M, &K, &N)) return 0;
  size_t n = 0;
  if (x.dtype != DType::f32) n += static_cast<size_t>(M * K);
  if (w.dtype != DType::f32) n += static_cast<size_t>(K * N);
  if (out.dtype != DType::f32) n += static_cast<size_t>(M * N);
  return n;
}

Result linear(const In &x, const In &w, const In &bias, const Out &out, bool tw, float alpha, float *scratch) {
  return linear_residual(x, w, bias, In{}, out, tw, alpha, scratch);
}

Result linear_residual(const In &x, const In &w, const In &bias, const In &residual, const Out &out, bool tw,
                       float alpha, float *scratch) {
  int64_t M, K, N;
  if (const char *e = plan_linear(x, w, out, tw, &M, &K, &N)) return Result::fail(e);
  if (bias.data && (bias.shape.numel() != N || !is_float(bias.dtype))) return Result::fail("linear: bias must be [N]");
  if (residual.data && (residual.shape != out.shape || !is_float(residual.dtype)))
    return Result::fail("linear_residual: the residual must be a float tensor of the output's shape");
  float *sx = scratch;
  float *sw = sx + (x.dtype != DType::f32 ? M * K : 0);
  float *sc = sw + (w.dtype != DType::f32 ? K * N : 0);
  const float *X = as_f32(x, 0, M * K, sx);
  const float *W = as_f32(w, 0, K * N, sw);
  float *C = out.dtype == DType::f32 ? static_cast<float *>(out.data) : sc;
  if (M > 0 && N > 0) {
    if (K > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, tw ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
                  static_cast<int>(K), alpha, X, static_cast<int>(K), W, static_cast<int>(tw ? K : N), 0.0f, C,
                  static_cast<int>(N));
    } else {
      std::memset(C, 0, static_cast<size_t>(M * N) * sizeof(float));
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float v = C[m * N + n];
      if (bias.data) v += load_f32(bias.data, bias.dtype, n);
      if (residual.data) v += load_f32(residual.data, residual.dtype, m * N + n);
      if (out.dtype == DType::f32) C[m * N + n] = v;
      else store_f32(out.data, out.dtype, m * N + n, v);
    }
  }
  return {};
}

Result linear_multi(const In &x, const In *w, const Out *out, int n, bool tw, float alpha, float *scratch) {
  if (n < 1) return Result::fail("linear_multi: no weights");
  for (int i = 0; i < n; ++i) {
    Result r = linear(x, w[i], In{}, out[i], tw, alpha, scratch);
    if (!r.ok()) return r;
  }
  return {};
}

size_t linear_gated_scratch(const In &x, const In &w, const Out &out, bool tw) {
  // The up product in out's storage type (at most a float per element), then linear's own scratch.
  return static_cast<size_t>(out.shape.numel()) + linear_scratch(x, w, out, tw);
}

Result linear_gated(Unary act, const In &x, const In &wg, const In &wu, const Out &out, bool tw, float alpha,
                    float *scratch) {
  if (act != Unary::silu && act != Unary::gelu_tanh && act != Unary::gelu_erf)
    return Result::fail("linear_gated: act must be silu, gelu_tanh or gelu_erf");
  if (wg.shape != wu.shape || wg.dtype != wu.dtype) return Result::fail("linear_gated: the weights differ in shape or dtype");
  const Out up{scratch, out.dtype, out.shape};
  float *rest = scratch + out.shape.numel();
  Result r = linear(x, wg, In{}, out, tw, alpha, rest);
  if (r.ok()) r = linear(x, wu, In{}, up, tw, alpha, rest);
  if (r.ok()) r = unary(act, In{out.data, out.dtype, out.shape}, out);
  if (r.ok()) r = binary(Binary::mul, In{out.data, out.dtype, out.shape}, In{up.data, up.dtype, up.shape}, out);
  return r;
}

size_t norm_products_scratch(const In &x, const In *w, const Out *out, int n, bool tw, Unary act, bool gated) {
  (void)act;
  // The normed rows in x's dtype (at most a float per element), then the products' own scratch.
  size_t rest = 0;
  if (gated) {
    if (n >= 2) rest = linear_gated_scratch(x, w[0], out[0], tw);
  } else {
    for (int i = 0; i < n; ++i) rest = std::max(rest, linear_scratch(x, w[i], out[i], tw));
  }
  return static_cast<size_t>(x.shape.numel()) + rest;
}

Result norm_products(const In &x, const In &residual, const In &scale, const In *w, const Out &sum, const Out *out,
                     int n, bool tw, Unary act, bool gated, float alpha, float eps, float *scratch) {
  if (x.shape != residual.shape || sum.shape != x.shape || x.dtype != residual.dtype || sum.dtype != x.dtype)
    return Result::fail("norm_products: x, residual and sum must share one shape and dtype");
  if (n < 1 || n > 4 || (gated && n != 2)) return Result::fail("norm_products: one to four weights (gated: two)");
  Result r = binary(Binary::add, x, residual, sum);
  const Out normed{scratch, x.dtype, x.shape};
  const In normed_in{scratch, x.dtype, x.shape};
  if (r.ok()) r = rms_norm(In{sum.data, sum.dtype, sum.shape}, scale, normed, eps);
  float *rest = scratch + x.shape.numel();
  if (!r.ok()) return r;
  if (gated) return linear_gated(act, normed_in, w[0], w[1], out[0], tw, alpha, rest);
  return linear_multi(normed_in, w, out, n, tw, alpha, rest);
}

}  // namespace cpu
}  // namespace zk
