// The rotary position embedding (Hugging Face's rotate_half form) and its transpose, the gradient w.r.t. x, on
// a head-major x [..., D] or (seq_major) a sequence-major [B, S, H, D] whose tables broadcast to [B, H, S, D].
#include <utility>

#include "common.h"

namespace zk {
namespace cpu {

Result rotary(const In &x, const In &cos, const In &sin, const Out &out, bool inverse, bool seq_major) {
  const Dims &s = x.shape;
  if (seq_major && s.rank != 4) return Result::fail("rotary: seq_major needs a rank-4 [B, S, H, D] x");
  // The tables broadcast to the head-major view [B, H, S, D] of a sequence-major x: they index by position.
  Dims view = s;
  if (seq_major) std::swap(view.d[1], view.d[2]);
  if (s.rank < 1 || s.d[s.rank - 1] % 2 != 0) return Result::fail("rotary: x must have rank >= 1 and an even last dim");
  if (out.shape != s) return Result::fail("rotary: output shape differs from x's");
  if (!is_float(x.dtype) || !is_float(cos.dtype) || !is_float(sin.dtype) || out.dtype != x.dtype)
    return Result::fail("rotary: x, cos and sin must be float, and out of x's dtype");
  if (cos.shape != sin.shape || cos.dtype != sin.dtype) return Result::fail("rotary: cos and sin differ in shape or dtype");
  if (cos.shape.rank < 1 || cos.shape.d[cos.shape.rank - 1] != s.d[s.rank - 1] || !broadcastable(cos.shape, view))
    return Result::fail(seq_major ? "rotary: cos and sin must broadcast to x's head-major view with its last dim"
                                  : "rotary: cos and sin must broadcast to x with its last dim");
  const int64_t d = s.d[s.rank - 1], h = d / 2;
  // One table row per row of x: strides of the tables broadcast over x's leading dims.
  Dims rows;
  rows.rank = s.rank - 1;
  for (int k = 0; k < rows.rank; ++k) rows.d[k] = s.d[k];
  int64_t st[1][kMaxRank] = {};
  detail::broadcast_strides(cos.shape, view, st[0]);
  // Sequence-major rows run (b, s, h): the view's strides of h and s are swapped back, so that row (b, s, h)
  // reads the table row of position s.
  if (seq_major) std::swap(st[0][1], st[0][2]);
  // The table's last dim is dense, so a row starts at its offset of the leading dims' index.
  const float sign = inverse ? -1.0f : 1.0f;
  detail::strided_loop<1>(rows, st, [&](int64_t r, const int64_t *off) {
    const int64_t xo = r * d, to = off[0];
    for (int64_t i = 0; i < h; ++i) {
      // Both partners are read before either is written, so out may alias x. The products are rounded to
      // fp32 before the sum, exactly as the unfused mul / neg / add steps compute them.
      const float a = load_f32(x.data, x.dtype, xo + i), b = load_f32(x.data, x.dtype, xo + i + h);
      const float ca = load_f32(cos.data, cos.dtype, to + i), cb = load_f32(cos.data, cos.dtype, to + i + h);
      // Forward: the low half mixes in sin at its own index, the high half at its own index. The transpose
      // takes each partner's sin at the partner's index.
      const float sa = load_f32(sin.data, sin.dtype, inverse ? to + i + h : to + i);
      const float sb = load_f32(sin.data, sin.dtype, inverse ? to + i : to + i + h);
      const float pa = a * ca, pb = b * cb, qa = b * sa, qb = a * sb;
      store_f32(out.data, out.dtype, xo + i, pa - sign * qa);
      store_f32(out.data, out.dtype, xo + i + h, pb + sign * qb);
    }
  });
  return {};
}

}  // namespace cpu
}  // namespace zk
