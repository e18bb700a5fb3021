// The training kernels: activation, softmax and norm backwards, the embedding and label-pick backwards,
// gradient accumulation and the squared norm used for clipping. Each is the derivative of the forward
// kernel of the same name computed with the same fp32 conventions; row and column sums accumulate in
// double so that the reference stays accurate for long rows and many rows.
#include <cmath>
#include <cstring>

#include "common.h"

namespace zk {
namespace cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <class F>
void map2(const In &x, const In &dy, const Out &dx, F f) {
  const int64_t n = dx.shape.numel();
  if (x.dtype == DType::f32 && dy.dtype == DType::f32 && dx.dtype == DType::f32) {
    const float *a = static_cast<const float *>(x.data), *g = static_cast<const float *>(dy.data);
    float *o = static_cast<float *>(dx.data);
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] * f(a[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    store_f32(dx.data, dx.dtype, i, load_f32(dy.data, dy.dtype, i) * f(load_f32(x.data, x.dtype, i)));
}

/// Column sums over rows in double, a block of kCols columns at a time so that every row is read in
/// contiguous runs. term(row, col) is the summand.
constexpr int64_t kCols = 64;
template <class F>
void column_sums(int64_t rows, int64_t n, const Out &out, F term) {
  double acc[kCols];
  for (int64_t c0 = 0; c0 < n; c0 += kCols) {
    const int64_t w = n - c0 < kCols ? n - c0 : kCols;
    for (int64_t c = 0; c < w; ++c) acc[c] = 0.0;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t c = 0; c < w; ++c) acc[c] += term(row, c0 + c);
    for (int64_t c = 0; c < w; ++c) store_f32(out.data, out.dtype, c0 + c, static_cast<float>(acc[c]));
  }
}

}  // namespace

Result act_grad(Unary act, const In &x, const In &dy, const Out &dx) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return Result::fail("act_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype)) return Result::fail("act_grad: operands must be float");
  switch (act) {
    case Unary::gelu_tanh:
      map2(x, dy, dx, [](float v) {
        const float t = std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v));
        return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * v * v);
      });
      return {};
    case Unary::gelu_erf:
      map2(x, dy, dx, [](float v) {
        return 0.5f * (1.0f + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
      });
      return {};
    case Unary::silu:
      map2(x, dy, dx, [](float v) {
        const float s = 1.0f / (1.0f + std::exp(-v));
        return s * (1.0f + v * (1.0f - s));
      });
      return {};
    default: return Result::fail("act_grad: the activation must be gelu_tanh, gelu_erf or silu");
  }
}

Result softmax_grad(const In &y, const In &dy, const Out &dx, int axis) {
  if (y.shape != dx.shape || dy.shape != dx.shape) return Result::fail("softmax_grad: y, dy and dx shapes differ");
  if (!is_float(y.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype))
    return Result::fail("softmax_grad: operands must be float");
  if (!detail::normalise_axis(y.shape.rank, &axis)) return Result::fail("softmax_grad: axis out of range");
  const auto [outer, n, inner] = detail::split_at(y.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      double dot = 0.0;
      for (int64_t j = 0; j < n; ++j)
        dot += static_cast<double>(load_f32(y.data, y.dtype, base + j * inner)) * load_f32(dy.data, dy.dtype, base + j * inner);
      const float d = static_cast<float>(dot);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = base + j * inner;
        store_f32(dx.data, dx.dtype, at, load_f32(y.data, y.dtype, at) * (load_f32(dy.data, dy.dtype, at) - d));
      }
    }
  return {};
}

size_t layer_norm_grad_scratch(const In &x, int axis) {
  int64_t rows, n;
  if (!detail::split_rows(x.shape, &axis, &rows, &n)) return 0;
  return static_cast<size_t>(2 * rows);
}

Result layer_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, const Out &dbias,
                       int axis, float eps, float *scratch) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return Result::fail("layer_norm_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype))
    return Result::fail("layer_norm_grad: operands must be float");
  int64_t rows, n;
  if (!detail::split_rows(x.shape, &axis, &rows, &n)) return Result::fail("layer_norm_grad: axis out of range");
  if (scale.data && scale.shape.numel() != n) return Result::fail("layer_norm_grad: scale size differs from the normalised size");
  if (dscale.data && dscale.shape.numel() != n) return Result::fail("layer_norm_grad: dscale size differs from the normalised size");
  if (dbias.data && dbias.shape.numel() != n) return Result::fail("layer_norm_grad: dbias size differs from the normalised size");
  if ((dscale.data && !is_float(dscale.dtype)) || (dbias.data && !is_float(dbias.dtype)))
    return Result::fail("layer_norm_grad: dscale and dbias must be float");
  float *mean_of = scratch, *inv_of = scratch + rows;
  auto xv = [&](int64_t at) { return load_f32(x.data, x.dtype, at); };
  auto sc = [&](int64_t j) { return scale.data ? load_f32(scale.data, scale.dtype, j) : 1.0f; };
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = row * n;
    // The statistics exactly as the forward kernel computes them.
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += xv(base + j);
    const double mean = n ? s / static_cast<double>(n) : 0.0;
    double var = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double d = xv(base + j) - mean;
      var += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt((n ? var / static_cast<double>(n) : 0.0) + eps));
    const float m = static_cast<float>(mean);
    mean_of[row] = m;
    inv_of[row] = inv;
    // dx = inv * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * scale.
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float g = load_f32(dy.data, dy.dtype, base + j) * sc(j);
      const float xh = (xv(base + j) - m) * inv;
      sg += g;
      sgx += static_cast<double>(g) * xh;
    }
    const float mg = static_cast<float>(sg / static_cast<double>(n)), mgx = static_cast<float>(sgx / static_cast<double>(n));
    for (int64_t j = 0; j < n; ++j) {
      const float g = load_f32(dy.data, dy.dtype, base + j) * sc(j);
      const float xh = (xv(base + j) - m) * inv;
      store_f32(dx.data, dx.dtype, base + j, inv * (g - mg - xh * mgx));
    }
  }
  if (dscale.data)
    column_sums(rows, n, dscale, [&](int64_t row, int64_t j) {
      const int64_t at = row * n + j;
      return static_cast<double>(load_f32(dy.data, dy.dtype, at)) * ((xv(at) - mean_of[row]) * inv_of[row]);
    });
  if (dbias.data)
    column_sums(rows, n, dbias, [&](int64_t row, int64_t j) {
      return static_cast<double>(load_f32(dy.data, dy.dtype, row * n + j));
    });
  return {};
}

size_t rms_norm_grad_scratch(const In &x) {
  if (x.shape.rank < 1) return 0;
  const int64_t n = x.shape.d[x.shape.rank - 1];
  return static_cast<size_t>(n ? x.shape.numel() / n : 0);
}

Result rms_norm_grad(const In &x, const In &scale, const In &dy, const Out &dx, const Out &dscale, float eps,
                     float *scratch) {
  if (x.shape != dx.shape || dy.shape != dx.shape) return Result::fail("rms_norm_grad: x, dy and dx shapes differ");
  if (!is_float(x.dtype) || !is_float(dy.dtype) || !is_float(dx.dtype))
    return Result::fail("rms_norm_grad: operands must be float");
  if (x.shape.rank < 1) return Result::fail("rms_norm_grad: input must have rank >= 1");
  const int64_t n = x.shape.d[x.shape.rank - 1];
  const int64_t rows = n ? x.shape.numel() / n : 0;
  if (scale.data && scale.shape.numel() != n) return Result::fail("rms_norm_grad: scale size differs from the last dim");
  if (dscale.data && (dscale.shape.numel() != n || !is_float(dscale.dtype)))
    return Result::fail("rms_norm_grad: dscale must be float of the last dim's size");
  auto xv = [&](int64_t at) { return load_f32(x.data, x.dtype, at); };
  auto sc = [&](int64_t j) { return scale.data ? load_f32(scale.data, scale.dtype, j) : 1.0f; };
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = row * n;
    double ss = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double v = xv(base + j);
      ss += v * v;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    scratch[row] = inv;
    // y = x * inv * scale, so dx = inv * (g - x * inv^2 * mean(g * x)) with g = dy * scale.
    double sgx = 0.0;
    for (int64_t j = 0; j < n; ++j) sgx += static_cast<double>(load_f32(dy.data, dy.dtype, base + j) * sc(j)) * xv(base + j);
    const float c = inv * inv * static_cast<float>(sgx / static_cast<double>(n));
    for (int64_t j = 0; j < n; ++j) {
      const float g = load_f32(dy.data, dy.dtype, base + j) * sc(j);
      store_f32(dx.data, dx.dtype, base + j, inv * (g - xv(base + j) * c));
    }
  }
  if (dscale.data)
    column_sums(rows, n, dscale, [&](int64_t row, int64_t j) {
      const int64_t at = row * n + j;
      return static_cast<double>(load_f32(dy.data, dy.dtype, at)) * (xv(at) * scratch[row]);
    });
  return {};
}

size_t embedding_grad_scratch(const Out &dtable) {
  return dtable.shape.rank == 2 ? static_cast<size_t>(dtable.shape.d[1]) : 0;
}

Result embedding_grad(const In &ids, const In &dy, const Out &dtable, int64_t row_start, float *scratch) {
  if (dtable.shape.rank != 2) return Result::fail("embedding_grad: dtable must be [V, D]");
  if (ids.dtype != DType::i64 && ids.dtype != DType::i32) return Result::fail("embedding_grad: ids must be i64 or i32");
  if (!is_float(dy.dtype) || !is_float(dtable.dtype)) return Result::fail("embedding_grad: dy and dtable must be float");
  const int64_t V = dtable.shape.d[0], D = dtable.shape.d[1];
  if (dy.shape.rank != ids.shape.rank + 1 || dy.shape.d[dy.shape.rank - 1] != D)
    return Result::fail("embedding_grad: dy must be [ids..., D]");
  for (int i = 0; i < ids.shape.rank; ++i)
    if (dy.shape.d[i] != ids.shape.d[i]) return Result::fail("embedding_grad: dy must be [ids..., D]");
  std::memset(dtable.data, 0, static_cast<size_t>(V * D) * dtype_size(dtable.dtype));
  const int64_t n = ids.shape.numel();
  // Each row is summed once, in fp32 in the order of the ids, and rounded to storage once: a 16-bit
  // gradient table then holds the correctly rounded fp32 sum rather than a chain of 16-bit roundings.
  for (int64_t a = 0; a < n; ++a) {
    const int64_t id = load_i64(ids.data, ids.dtype, a);
    if (id < row_start || id >= row_start + V) continue;
    bool seen = false;
    for (int64_t e = 0; e < a && !seen; ++e) seen = load_i64(ids.data, ids.dtype, e) == id;
    if (seen) continue;
    for (int64_t d = 0; d < D; ++d) scratch[d] = 0.0f;
    for (int64_t e = a; e < n; ++e) {
      if (load_i64(ids.data, ids.dtype, e) != id) continue;
      for (int64_t d = 0; d < D; ++d) scratch[d] += load_f32(dy.data, dy.dtype, e * D + d);
    }
    const int64_t row = id - row_start;
    for (int64_t d = 0; d < D; ++d) store_f32(dtable.data, dtable.dtype, row * D + d, scratch[d]);
  }
  return {};
}

Result label_pick(const In &logits, const In &labels, const Out &out, int64_t row_start, int64_t ignore_index) {
  if (logits.shape.rank != 2) return Result::fail("label_pick: logits must be [N, V]");
  if (labels.dtype != DType::i64 && labels.dtype != DType::i32) return Result::fail("label_pick: labels must be i64 or i32");
  if (!is_float(logits.dtype) || !is_float(out.dtype)) return Result::fail("label_pick: logits and out must be float");
  const int64_t N = logits.shape.d[0], V = logits.shape.d[1];
  if (labels.shape.numel() != N || out.shape.numel() != N) return Result::fail("label_pick: labels and out must have N elements");
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = load_i64(labels.data, labels.dtype, n);
    const bool here = l != ignore_index && l >= row_start && l < row_start + V;
    store_f32(out.data, out.dtype, n, here ? load_f32(logits.data, logits.dtype, n * V + (l - row_start)) : 0.0f);
  }
  return {};
}

Result label_pick_grad(const In &labels, const In &dy, const Out &dlogits, int64_t row_start, int64_t ignore_index) {
  if (dlogits.shape.rank != 2) return Result::fail("label_pick_grad: dlogits must be [N, V]");
  if (labels.dtype != DType::i64 && labels.dtype != DType::i32)
    return Result::fail("label_pick_grad: labels must be i64 or i32");
  if (!is_float(dy.dtype) || !is_float(dlogits.dtype)) return Result::fail("label_pick_grad: dy and dlogits must be float");
  const int64_t N = dlogits.shape.d[0], V = dlogits.shape.d[1];
  if (labels.shape.numel() != N || dy.shape.numel() != N) return Result::fail("label_pick_grad: labels and dy must have N elements");
  std::memset(dlogits.data, 0, static_cast<size_t>(N * V) * dtype_size(dlogits.dtype));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = load_i64(labels.data, labels.dtype, n);
    if (l != ignore_index && l >= row_start && l < row_start + V)
      store_f32(dlogits.data, dlogits.dtype, n * V + (l - row_start), load_f32(dy.data, dy.dtype, n));
  }
  return {};
}

Result accumulate(const Out &target, const In &value) {
  if (!broadcastable(value.shape, target.shape)) return Result::fail("accumulate: value does not broadcast to the target");
  if (!is_float(target.dtype) || !is_float(value.dtype)) return Result::fail("accumulate: operands must be float");
  if (target.dtype == DType::f32 && value.dtype == DType::f32 && value.shape == target.shape) {
    float *t = static_cast<float *>(target.data);
    const float *v = static_cast<const float *>(value.data);
    const int64_t n = target.shape.numel();
    for (int64_t i = 0; i < n; ++i) t[i] += v[i];
    return {};
  }
  int64_t st[1][kMaxRank];
  detail::broadcast_strides(value.shape, target.shape, st[0]);
  detail::strided_loop<1>(target.shape, st, [&](int64_t i, const int64_t *off) {
    store_f32(target.data, target.dtype, i, load_f32(target.data, target.dtype, i) + load_f32(value.data, value.dtype, off[0]));
  });
  return {};
}

Result sum_squares(const In &x, const Out &out) {
  if (!is_float(x.dtype)) return Result::fail("sum_squares: x must be float");
  if (out.shape.numel() != 1 || out.dtype != DType::f32) return Result::fail("sum_squares: out must be one f32 element");
  const int64_t n = x.shape.numel();
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_f32(x.data, x.dtype, i);
    acc += v * v;
  }
  static_cast<float *>(out.data)[0] = static_cast<float>(acc);
  return {};
}

}  // namespace cpu
}  // namespace zk
