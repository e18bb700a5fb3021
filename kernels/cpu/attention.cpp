// Scaled dot-product attention with grouped KV heads, a causal flag and an additive mask. One query row
// at a time: scores into the scratch row, a numerically stable softmax, then the weighted sum of values.
#include <cmath>
#include <limits>

#include "common.h"

namespace zk {
namespace cpu {

size_t attention_scratch(const In &q, const In &k) {
  (void)q;
  return k.shape.rank == 4 ? static_cast<size_t>(k.shape.d[2]) : 0;
}

Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                 float *scratch) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape.rank != 4) return Result::fail("attention: q, k, v must be rank 4");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], T = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh) return Result::fail("attention: k must be [B, Hkv, T, Dh]");
  if (v.shape != k.shape) return Result::fail("attention: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return Result::fail("attention: Hq must be a multiple of Hkv");
  if (out.shape != q.shape) return Result::fail("attention: output shape differs from q's");
  if (!is_float(q.dtype) || !is_float(k.dtype) || !is_float(v.dtype) || !is_float(out.dtype))
    return Result::fail("attention: operands must be float");
  const Dims full{B, Hq, S, T};
  int64_t mst[kMaxRank] = {};
  if (mask.data) {
    if (!broadcastable(mask.shape, full)) return Result::fail("attention: mask does not broadcast to [B, Hq, S, T]");
    detail::broadcast_strides(mask.shape, full, mst);
  }
  const int64_t group = Hq / Hkv;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / group;
      const int64_t qbase = ((b * Hq + h) * S) * Dh;
      const int64_t kbase = ((b * Hkv + kh) * T) * Dh;
      for (int64_t i = 0; i < S; ++i) {
        float mx = ninf;
        for (int64_t j = 0; j < T; ++j) {
          float s;
          if (causal && j > i + (T - S)) {
            s = ninf;
          } else {
            double dot = 0.0;
            for (int64_t d = 0; d < Dh; ++d)
              dot += static_cast<double>(load_f32(q.data, q.dtype, qbase + i * Dh + d)) *
                     load_f32(k.data, k.dtype, kbase + j * Dh + d);
            s = static_cast<float>(dot) * scale;
            if (mask.data) s += load_f32(mask.data, mask.dtype, b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]);
          }
          scratch[j] = s;
          mx = std::fmax(mx, s);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          float p = std::isfinite(mx) ? std::exp(scratch[j] - mx) : 0.0f;
          scratch[j] = p;
          sum += p;
        }
        // A fully masked row attends to nothing: its output is zero rather than NaN.
        const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
        for (int64_t d = 0; d < Dh; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < T; ++j) acc += static_cast<double>(scratch[j]) * load_f32(v.data, v.dtype, kbase + j * Dh + d);
          store_f32(out.data, out.dtype, qbase + i * Dh + d, static_cast<float>(acc) * inv);
        }
      }
    }
  return {};
}

}  // namespace cpu
}  // namespace zk
