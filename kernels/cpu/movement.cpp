// Data-movement kernels: transpose, concat, slice, gather, embedding. They move bytes and never convert:
// operand and result dtypes must agree.
#include <cstring>

#include "common.h"

namespace zk {
namespace cpu {

Result transpose(const In &x, const Out &out, const int64_t *perm) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return Result::fail("transpose: output rank differs");
  if (x.dtype != out.dtype) return Result::fail("transpose: dtypes differ");
  bool seen[kMaxRank] = {};
  int64_t xs[kMaxRank], st[1][kMaxRank];
  detail::dense_strides(x.shape, xs);
  for (int i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return Result::fail("transpose: perm is not a permutation");
    seen[perm[i]] = true;
    if (out.shape.d[i] != x.shape.d[perm[i]]) return Result::fail("transpose: output shape is not the permuted shape");
    st[0][i] = xs[perm[i]];
  }
  const size_t es = dtype_size(x.dtype);
  const auto *src = static_cast<const uint8_t *>(x.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  detail::strided_loop<1>(out.shape, st, [&](int64_t i, const int64_t *off) {
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off[0]) * es, es);
  });
  return {};
}

Result concat(const In *xs, int n, const Out &out, int axis) {
  const int r = out.shape.rank;
  if (!detail::normalise_axis(r, &axis)) return Result::fail("concat: axis out of range");
  int64_t total = 0;
  for (int k = 0; k < n; ++k) {
    if (xs[k].shape.rank != r) return Result::fail("concat: operand rank differs from the output's");
    if (xs[k].dtype != out.dtype) return Result::fail("concat: operand dtype differs from the output's");
    for (int i = 0; i < r; ++i)
      if (i != axis && xs[k].shape.d[i] != out.shape.d[i]) return Result::fail("concat: operand dims differ off the axis");
    total += xs[k].shape.d[axis];
  }
  if (total != out.shape.d[axis]) return Result::fail("concat: operand sizes do not sum to the output's");
  const auto [outer, out_n, inner] = detail::split_at(out.shape, axis);
  const size_t es = dtype_size(out.dtype);
  auto *dst = static_cast<uint8_t *>(out.data);
  const size_t out_row = static_cast<size_t>(out_n * inner) * es;
  size_t at = 0;
  for (int k = 0; k < n; ++k) {
    const size_t row = static_cast<size_t>(xs[k].shape.d[axis] * inner) * es;
    const auto *src = static_cast<const uint8_t *>(xs[k].data);
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * out_row + at, src + o * row, row);
    at += row;
  }
  return {};
}

Result slice(const In &x, const Out &out, const int64_t *starts, const int64_t *steps) {
  const int r = x.shape.rank;
  if (out.shape.rank != r) return Result::fail("slice: output rank differs");
  if (x.dtype != out.dtype) return Result::fail("slice: dtypes differ");
  int64_t xs[kMaxRank], st[1][kMaxRank];
  detail::dense_strides(x.shape, xs);
  int64_t base = 0;
  for (int i = 0; i < r; ++i) {
    const int64_t n = out.shape.d[i];
    if (n < 0) return Result::fail("slice: negative size");
    if (n > 0) {
      if (steps[i] == 0) return Result::fail("slice: zero step");
      const int64_t last = starts[i] + (n - 1) * steps[i];
      if (starts[i] < 0 || starts[i] >= x.shape.d[i] || last < 0 || last >= x.shape.d[i])
        return Result::fail("slice: range outside the input");
    }
    base += starts[i] * xs[i];
    st[0][i] = steps[i] * xs[i];
  }
  if (out.shape.numel() == 0) return {};
  const size_t es = dtype_size(x.dtype);
  const auto *src = static_cast<const uint8_t *>(x.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  detail::strided_loop<1>(out.shape, st, [&](int64_t i, const int64_t *off) {
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(base + off[0]) * es, es);
  });
  return {};
}

Result gather(const In &data, const In &indices, const Out &out, int axis) {
  const int r = data.shape.rank;
  if (!detail::normalise_axis(r, &axis)) return Result::fail("gather: axis out of range");
  if (indices.dtype != DType::i64 && indices.dtype != DType::i32) return Result::fail("gather: indices must be i64 or i32");
  if (data.dtype != out.dtype) return Result::fail("gather: dtypes differ");
  Dims expect;
  for (int i = 0; i < axis; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect.rank + indices.shape.rank + (r - axis - 1) > kMaxRank) return Result::fail("gather: rank too large");
  for (int i = 0; i < indices.shape.rank; ++i) expect.d[expect.rank++] = indices.shape.d[i];
  for (int i = axis + 1; i < r; ++i) expect.d[expect.rank++] = data.shape.d[i];
  if (expect != out.shape) return Result::fail("gather: output shape is not the gathered shape");
  const auto [outer, dim, inner] = detail::split_at(data.shape, axis);
  const int64_t n = indices.shape.numel();
  // Indices are checked before anything is written so that a bad id leaves the output untouched.
  for (int64_t j = 0; j < n; ++j) {
    int64_t id = load_i64(indices.data, indices.dtype, j);
    if (id < -dim || id >= dim) return Result::fail("gather: index out of range");
  }
  const size_t row = static_cast<size_t>(inner) * dtype_size(data.dtype);
  const auto *src = static_cast<const uint8_t *>(data.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      int64_t id = load_i64(indices.data, indices.dtype, j);
      if (id < 0) id += dim;
      std::memcpy(dst + (o * n + j) * row, src + (o * dim + id) * row, row);
    }
  return {};
}

Result embedding(const In &table, const In &ids, const Out &out, int64_t row_start) {
  if (table.shape.rank != 2) return Result::fail("embedding: table must be [V, D]");
  if (ids.dtype != DType::i64 && ids.dtype != DType::i32) return Result::fail("embedding: ids must be i64 or i32");
  if (table.dtype != out.dtype) return Result::fail("embedding: dtypes differ");
  const int64_t V = table.shape.d[0], D = table.shape.d[1];
  if (out.shape.rank != ids.shape.rank + 1 || out.shape.d[out.shape.rank - 1] != D)
    return Result::fail("embedding: output must be [ids..., D]");
  for (int i = 0; i < ids.shape.rank; ++i)
    if (out.shape.d[i] != ids.shape.d[i]) return Result::fail("embedding: output must be [ids..., D]");
  const size_t row = static_cast<size_t>(D) * dtype_size(table.dtype);
  const auto *src = static_cast<const uint8_t *>(table.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  const int64_t n = ids.shape.numel();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t local = load_i64(ids.data, ids.dtype, j) - row_start;
    // Rows another tensor-parallel rank owns are zero here; the all_reduce that follows adds them in.
    if (local >= 0 && local < V) std::memcpy(dst + j * row, src + local * row, row);
    else std::memset(dst + j * row, 0, row);
  }
  return {};
}

}  // namespace cpu
}  // namespace zk
