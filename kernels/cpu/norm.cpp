// Row-wise kernels: softmax, layer_norm, rms_norm and the reductions (sum, mean, max, min, prod). Row sums accumulate in double so
// that the reference stays accurate for long rows; results are rounded to fp32 and then to storage.
#include <cmath>
#include <limits>

#include "common.h"

namespace zk {
namespace cpu {

Result softmax(const In &x, const Out &out, int axis) {
  if (x.shape != out.shape) return Result::fail("softmax: input and output shapes differ");
  if (!is_float(x.dtype) || !is_float(out.dtype)) return Result::fail("softmax: operands must be float");
  if (!detail::normalise_axis(x.shape.rank, &axis)) return Result::fail("softmax: axis out of range");
  const auto [outer, n, inner] = detail::split_at(x.shape, axis);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::fmax(mx, load_f32(x.data, x.dtype, base + j * inner));
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(load_f32(x.data, x.dtype, base + j * inner) - mx);
      // A row of -inf has no defined softmax; zeros keep NaN out of what follows.
      const float inv = (sum > 0.0 && std::isfinite(mx)) ? static_cast<float>(1.0 / sum) : 0.0f;
      for (int64_t j = 0; j < n; ++j)
        store_f32(out.data, out.dtype, base + j * inner,
                  std::isfinite(mx) ? std::exp(load_f32(x.data, x.dtype, base + j * inner) - mx) * inv : 0.0f);
    }
  }
  return {};
}

Result layer_norm(const In &x, const In &scale, const In &bias, const Out &out, int axis, float eps) {
  if (x.shape != out.shape) return Result::fail("layer_norm: input and output shapes differ");
  if (!is_float(x.dtype) || !is_float(out.dtype)) return Result::fail("layer_norm: operands must be float");
  int64_t rows, n;
  if (!detail::split_rows(x.shape, &axis, &rows, &n)) return Result::fail("layer_norm: axis out of range");
  if (scale.data && scale.shape.numel() != n) return Result::fail("layer_norm: scale size differs from the normalised size");
  if (bias.data && bias.shape.numel() != n) return Result::fail("layer_norm: bias size differs from the normalised size");
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = row * n;
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += load_f32(x.data, x.dtype, base + j);
    const double mean = n ? s / static_cast<double>(n) : 0.0;
    double v = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double d = load_f32(x.data, x.dtype, base + j) - mean;
      v += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt((n ? v / static_cast<double>(n) : 0.0) + eps));
    const float m = static_cast<float>(mean);
    for (int64_t j = 0; j < n; ++j) {
      float y = (load_f32(x.data, x.dtype, base + j) - m) * inv;
      if (scale.data) y *= load_f32(scale.data, scale.dtype, j);
      if (bias.data) y += load_f32(bias.data, bias.dtype, j);
      store_f32(out.data, out.dtype, base + j, y);
    }
  }
  return {};
}

Result rms_norm(const In &x, const In &scale, const Out &out, float eps) {
  if (x.shape != out.shape) return Result::fail("rms_norm: input and output shapes differ");
  if (!is_float(x.dtype) || !is_float(out.dtype)) return Result::fail("rms_norm: operands must be float");
  if (x.shape.rank < 1) return Result::fail("rms_norm: input must have rank >= 1");
  const int64_t n = x.shape.d[x.shape.rank - 1];
  const int64_t rows = n ? x.shape.numel() / n : 0;
  if (scale.data && scale.shape.numel() != n) return Result::fail("rms_norm: scale size differs from the last dim");
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = row * n;
    double ss = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double v = load_f32(x.data, x.dtype, base + j);
      ss += v * v;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t j = 0; j < n; ++j) {
      float y = load_f32(x.data, x.dtype, base + j) * inv;
      if (scale.data) y *= load_f32(scale.data, scale.dtype, j);
      store_f32(out.data, out.dtype, base + j, y);
    }
  }
  return {};
}

Result reduce(Reduce op, const In &x, const Out &out, const int64_t *axes, int naxes, bool keepdims) {
  const int r = x.shape.rank;
  bool red[kMaxRank] = {};
  for (int i = 0; i < naxes; ++i) {
    if (axes[i] < 0 || axes[i] >= r) return Result::fail("reduce: axis out of range");
    if (red[axes[i]]) return Result::fail("reduce: repeated axis");
    red[axes[i]] = true;
  }
  Dims expect, kept, reduced;
  int64_t xs[kMaxRank], kst[kMaxRank], rst[kMaxRank];
  detail::dense_strides(x.shape, xs);
  for (int i = 0; i < r; ++i) {
    if (red[i]) {
      if (keepdims) expect.d[expect.rank++] = 1;
      rst[reduced.rank] = xs[i];
      reduced.d[reduced.rank++] = x.shape.d[i];
    } else {
      expect.d[expect.rank++] = x.shape.d[i];
      kst[kept.rank] = xs[i];
      kept.d[kept.rank++] = x.shape.d[i];
    }
  }
  if (expect != out.shape) return Result::fail("reduce: output shape is not the reduced shape");
  const int64_t count = reduced.numel();
  int64_t st1[1][kMaxRank], st2[1][kMaxRank];
  for (int i = 0; i < kept.rank; ++i) st1[0][i] = kst[i];
  for (int i = 0; i < reduced.rank; ++i) st2[0][i] = rst[i];
  const bool fl = is_float(x.dtype);
  // The identities of the reductions, which an empty set reduces to (ONNX opset 18): 0, 1, and for max and
  // min the lowest and the highest value of the type (-inf and +inf for floats).
  const double finit = op == Reduce::max ? -std::numeric_limits<double>::infinity()
                       : op == Reduce::min ? std::numeric_limits<double>::infinity()
                       : op == Reduce::prod ? 1.0 : 0.0;
  const int64_t iinit = op == Reduce::max ? std::numeric_limits<int64_t>::min()
                        : op == Reduce::min ? std::numeric_limits<int64_t>::max()
                        : op == Reduce::prod ? 1 : 0;
  detail::strided_loop<1>(kept, st1, [&](int64_t oi, const int64_t *base) {
    double acc = finit;
    int64_t iacc = iinit;
    detail::strided_loop<1>(reduced, st2, [&](int64_t, const int64_t *off) {
      const int64_t at = base[0] + off[0];
      if (fl) {
        const double v = load_f32(x.data, x.dtype, at);
        switch (op) {
          // Once acc is NaN no comparison is true, so NaN stays.
          case Reduce::max: acc = std::isnan(v) || v > acc ? v : acc; break;
          case Reduce::min: acc = std::isnan(v) || v < acc ? v : acc; break;
          case Reduce::prod: acc *= v; break;
          default: acc += v; break;
        }
      } else {
        const int64_t v = load_i64(x.data, x.dtype, at);
        switch (op) {
          case Reduce::max: iacc = v > iacc ? v : iacc; break;
          case Reduce::min: iacc = v < iacc ? v : iacc; break;
          // Wrapping multiplication, as numpy's int64 product wraps (signed overflow is undefined in C++).
          case Reduce::prod: iacc = static_cast<int64_t>(static_cast<uint64_t>(iacc) * static_cast<uint64_t>(v)); break;
          default: iacc += v; break;
        }
      }
    });
    if (fl) {
      if (op == Reduce::mean) acc = count ? acc / static_cast<double>(count) : std::nan("");
      store_f32(out.data, out.dtype, oi, static_cast<float>(acc));
    } else {
      if (op == Reduce::mean) iacc = count ? iacc / count : 0;
      store_i64(out.data, out.dtype, oi, iacc);
    }
  });
  return {};
}

}  // namespace cpu
}  // namespace zk
