// Internal helpers of the CPU reference kernels: broadcast strides and an N-way broadcasting loop.
#ifndef ZK_CPU_COMMON_H
#define ZK_CPU_COMMON_H

#include "zk/cpu_kernels.h"

namespace zk {
namespace detail {

/// Element strides of a dense row-major shape.
inline void dense_strides(const Dims &s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.d[i];
  }
}

/// Counts a negative axis of a rank-r shape from the end; false when the axis falls outside [0, r).
inline bool normalise_axis(int r, int *axis) {
  if (*axis < 0) *axis += r;
  return *axis >= 0 && *axis < r;
}

/// A dense shape seen around one axis: `outer` the product of the dims before it, `n` its own size,
/// `inner` the product of the dims after it, so that element j along the axis of line (o, i) sits at
/// o * n * inner + j * inner + i: the loop of every kernel that works along an axis.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

/// The split of `s` around `axis`, which must be in range (normalise_axis).
inline AxisSplit split_at(const Dims &s, int axis) {
  AxisSplit a;
  for (int i = 0; i < axis; ++i) a.outer *= s.d[i];
  a.n = s.d[axis];
  for (int i = axis + 1; i < s.rank; ++i) a.inner *= s.d[i];
  return a;
}

/// Normalises `axis` and splits `s` into rows (the dims before it) and the normalised size (it and the dims
/// after it), as the layer norms see their operand; false when the axis is out of range.
inline bool split_rows(const Dims &s, int *axis, int64_t *rows, int64_t *n) {
  if (!normalise_axis(s.rank, axis)) return false;
  const AxisSplit a = split_at(s, *axis);
  *rows = a.outer;
  *n = a.n * a.inner;
  return true;
}

/// Strides that read `in` broadcast to `out` (right-aligned; 0 along broadcast dims).
inline void broadcast_strides(const Dims &in, const Dims &out, int64_t *st) {
  int64_t acc = 1;
  for (int i = out.rank - 1, j = in.rank - 1; i >= 0; --i, --j) {
    if (j >= 0) {
      st[i] = in.d[j] == 1 ? 0 : acc;
      acc *= in.d[j];
    } else {
      st[i] = 0;
    }
  }
}

/// Calls f(i, off) for every element i of `out` in row-major order, where off[k] is the element offset
/// of operand k read with strides st[k]. Offsets are updated incrementally: no division per element.
template <int N, class F>
void strided_loop(const Dims &out, const int64_t (&st)[N][kMaxRank], F &&f) {
  int64_t n = out.numel();
  if (n == 0) return;
  int64_t idx[kMaxRank] = {};
  int64_t off[N] = {};
  const int r = out.rank;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < out.d[d]) {
        for (int k = 0; k < N; ++k) off[k] += st[k][d];
        break;
      }
      for (int k = 0; k < N; ++k) off[k] -= st[k][d] * (out.d[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace detail
}  // namespace zk

#endif  // ZK_CPU_COMMON_H
