// Run-time ops that decoder exports of several model families compute on run-time values: Range, CumSum,
// GatherND, GatherElements, Mod, Floor and Tile, each with ONNX's semantics. Indices are checked before
// anything is written, so that a bad index leaves the output untouched and names the op.
#include <cmath>
#include <cstring>

#include "common.h"

namespace zk {
namespace cpu {
namespace {

bool is_index(DType t) { return t == DType::i64 || t == DType::i32; }

}  // namespace

Result range(const In &start, const In &delta, const Out &out) {
  if (out.shape.rank != 1) return Result::fail("range: output must be rank 1");
  if (start.shape.numel() != 1 || delta.shape.numel() != 1) return Result::fail("range: start and delta must be scalars");
  if (out.dtype == DType::bool8) return Result::fail("range: bool8 output");
  const int64_t n = out.shape.d[0];
  if (is_float(out.dtype)) {
    const double s = load_f32(start.data, start.dtype, 0), d = load_f32(delta.data, delta.dtype, 0);
    for (int64_t i = 0; i < n; ++i) store_f32(out.data, out.dtype, i, static_cast<float>(s + static_cast<double>(i) * d));
  } else {
    const int64_t s = load_i64(start.data, start.dtype, 0), d = load_i64(delta.data, delta.dtype, 0);
    for (int64_t i = 0; i < n; ++i) store_i64(out.data, out.dtype, i, s + i * d);
  }
  return {};
}

Result cumsum(const In &x, const Out &out, int axis, bool exclusive, bool reverse) {
  if (x.shape != out.shape) return Result::fail("cumsum: input and output shapes differ");
  if (x.dtype != out.dtype || x.dtype == DType::bool8) return Result::fail("cumsum: input and output must share one numeric dtype");
  if (!detail::normalise_axis(x.shape.rank, &axis)) return Result::fail("cumsum: axis out of range");
  const auto [outer, n, inner] = detail::split_at(x.shape, axis);
  const bool fl = is_float(x.dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      double acc = 0.0;
      int64_t iacc = 0;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t j = reverse ? n - 1 - s : s;
        const int64_t at = base + j * inner;
        // Read before writing: out may alias x.
        if (fl) {
          const double v = load_f32(x.data, x.dtype, at);
          if (!exclusive) acc += v;
          store_f32(out.data, out.dtype, at, static_cast<float>(acc));
          if (exclusive) acc += v;
        } else {
          const int64_t v = load_i64(x.data, x.dtype, at);
          if (!exclusive) iacc += v;
          store_i64(out.data, out.dtype, at, iacc);
          if (exclusive) iacc += v;
        }
      }
    }
  return {};
}

Result gather_nd(const In &data, const In &indices, const Out &out, int batch_dims) {
  const int r = data.shape.rank, q = indices.shape.rank;
  if (!is_index(indices.dtype)) return Result::fail("gather_nd: indices must be i64 or i32");
  if (data.dtype != out.dtype) return Result::fail("gather_nd: dtypes differ");
  if (q < 1 || r < 1) return Result::fail("gather_nd: data and indices must have rank >= 1");
  const int b = batch_dims;
  if (b < 0 || b >= q || b >= r) return Result::fail("gather_nd: batch_dims must be below both ranks");
  const int64_t k = indices.shape.d[q - 1];
  if (k < 1 || k > r - b) return Result::fail("gather_nd: the last dim of indices must be in [1, rank(data) - batch_dims]");
  for (int i = 0; i < b; ++i)
    if (data.shape.d[i] != indices.shape.d[i]) return Result::fail("gather_nd: batch dims of data and indices differ");
  Dims expect;
  for (int i = 0; i < q - 1; ++i) expect.d[expect.rank++] = indices.shape.d[i];
  if (expect.rank + (r - b - k) > kMaxRank) return Result::fail("gather_nd: rank too large");
  for (int i = b + static_cast<int>(k); i < r; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect != out.shape) return Result::fail("gather_nd: output shape is not the gathered shape");
  int64_t ds[kMaxRank];
  detail::dense_strides(data.shape, ds);
  int64_t slice = 1;
  for (int i = b + static_cast<int>(k); i < r; ++i) slice *= data.shape.d[i];
  int64_t tuples = 1, per_batch = 1;
  for (int i = 0; i < q - 1; ++i) tuples *= indices.shape.d[i];
  for (int i = b; i < q - 1; ++i) per_batch *= indices.shape.d[i];
  const int64_t batch_stride = b > 0 ? ds[b - 1] : 0;
  for (int64_t t = 0; t < tuples * k; ++t) {
    const int64_t dim = data.shape.d[b + t % k];
    const int64_t id = load_i64(indices.data, indices.dtype, t);
    if (id < -dim || id >= dim) return Result::fail("gather_nd: index out of range");
  }
  const size_t es = dtype_size(data.dtype);
  const auto *src = static_cast<const uint8_t *>(data.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (per_batch ? t / per_batch : 0) * batch_stride;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t dim = data.shape.d[b + c];
      int64_t id = load_i64(indices.data, indices.dtype, t * k + c);
      if (id < 0) id += dim;
      off += id * ds[b + c];
    }
    std::memcpy(dst + static_cast<size_t>(t * slice) * es, src + static_cast<size_t>(off) * es, static_cast<size_t>(slice) * es);
  }
  return {};
}

Result gather_elements(const In &data, const In &indices, const Out &out, int axis) {
  const int r = data.shape.rank;
  if (!is_index(indices.dtype)) return Result::fail("gather_elements: indices must be i64 or i32");
  if (data.dtype != out.dtype) return Result::fail("gather_elements: dtypes differ");
  if (r < 1 || indices.shape.rank != r) return Result::fail("gather_elements: data and indices must have one rank >= 1");
  if (out.shape != indices.shape) return Result::fail("gather_elements: output shape differs from the indices'");
  if (!detail::normalise_axis(r, &axis)) return Result::fail("gather_elements: axis out of range");
  for (int i = 0; i < r; ++i)
    if (i != axis && indices.shape.d[i] > data.shape.d[i])
      return Result::fail("gather_elements: indices exceed data off the axis");
  const int64_t n = indices.shape.numel(), dim = data.shape.d[axis];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = load_i64(indices.data, indices.dtype, i);
    if (id < -dim || id >= dim) return Result::fail("gather_elements: index out of range");
  }
  int64_t ds[kMaxRank], st[1][kMaxRank];
  detail::dense_strides(data.shape, ds);
  for (int i = 0; i < r; ++i) st[0][i] = i == axis ? 0 : ds[i];
  const size_t es = dtype_size(data.dtype);
  const auto *src = static_cast<const uint8_t *>(data.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  detail::strided_loop<1>(out.shape, st, [&](int64_t i, const int64_t *off) {
    int64_t id = load_i64(indices.data, indices.dtype, i);
    if (id < 0) id += dim;
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off[0] + id * ds[axis]) * es, es);
  });
  return {};
}

Result mod(const In &a, const In &b, const Out &out, bool fmod) {
  if (!broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape))
    return Result::fail("mod: operands do not broadcast to the output shape");
  Dims bc;
  if (!broadcast_shapes(a.shape, b.shape, &bc) || bc != out.shape)
    return Result::fail("mod: broadcast of the operands is not the output shape");
  if (a.dtype != b.dtype || a.dtype != out.dtype || a.dtype == DType::bool8)
    return Result::fail("mod: operands and output must share one numeric dtype");
  const bool fl = is_float(a.dtype);
  if (fl && !fmod) return Result::fail("mod: floating-point operands need fmod = 1 (ONNX)");
  int64_t st[2][kMaxRank];
  detail::broadcast_strides(a.shape, out.shape, st[0]);
  detail::broadcast_strides(b.shape, out.shape, st[1]);
  if (fl) {
    detail::strided_loop<2>(out.shape, st, [&](int64_t i, const int64_t *off) {
      store_f32(out.data, out.dtype, i, std::fmod(load_f32(a.data, a.dtype, off[0]), load_f32(b.data, b.dtype, off[1])));
    });
    return {};
  }
  detail::strided_loop<2>(out.shape, st, [&](int64_t i, const int64_t *off) {
    const int64_t x = load_i64(a.data, a.dtype, off[0]), y = load_i64(b.data, b.dtype, off[1]);
    // x % 0 is undefined in C++ (and INT64_MIN % -1 overflows); both give 0 here, as integer div does.
    int64_t m = (y == 0 || y == -1) ? 0 : x % y;
    if (!fmod && m != 0 && ((m < 0) != (y < 0))) m += y;
    store_i64(out.data, out.dtype, i, m);
  });
  return {};
}

Result floor(const In &x, const Out &out) {
  if (x.shape != out.shape) return Result::fail("floor: input and output shapes differ");
  if (!is_float(x.dtype) || x.dtype != out.dtype) return Result::fail("floor: operands must share one float dtype");
  const int64_t n = x.shape.numel();
  for (int64_t i = 0; i < n; ++i) store_f32(out.data, out.dtype, i, std::floor(load_f32(x.data, x.dtype, i)));
  return {};
}

Result is_nan(const In &x, const Out &out) {
  if (x.shape != out.shape) return Result::fail("is_nan: input and output shapes differ");
  if (!is_float(x.dtype) || out.dtype != DType::bool8) return Result::fail("is_nan: a float input and a bool8 output");
  const int64_t n = x.shape.numel();
  for (int64_t i = 0; i < n; ++i) store_i64(out.data, out.dtype, i, std::isnan(load_f32(x.data, x.dtype, i)) ? 1 : 0);
  return {};
}

Result tile(const In &x, const Out &out) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return Result::fail("tile: output rank differs from the input's");
  if (x.dtype != out.dtype) return Result::fail("tile: dtypes differ");
  for (int i = 0; i < r; ++i)
    if (x.shape.d[i] == 0 ? out.shape.d[i] != 0 : out.shape.d[i] % x.shape.d[i] != 0)
      return Result::fail("tile: output dims are not multiples of the input's");
  const int64_t n = out.shape.numel();
  if (n == 0) return {};
  int64_t xs[kMaxRank];
  detail::dense_strides(x.shape, xs);
  const size_t es = dtype_size(x.dtype);
  const auto *src = static_cast<const uint8_t *>(x.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t c = rem % out.shape.d[d];
      rem /= out.shape.d[d];
      off += (c % x.shape.d[d]) * xs[d];
    }
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off) * es, es);
  }
  return {};
}

}  // namespace cpu
}  // namespace zk
