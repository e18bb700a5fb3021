// Generation kernels (docs/generation.md): writes into a KV cache, attention of new queries over the cache,
// greedy selection and the per-sequence row pick. The attention mirrors attention.cpp's arithmetic (fp64
// dot products and sums, an fp32 softmax) so that a decode step and a prefill over the same tokens agree.
#include <cmath>
#include <cstring>
#include <limits>

#include "common.h"

namespace zk {
namespace cpu {

Result kv_write(const Out &cache, const In &value, const In &pos) {
  if (cache.shape.rank != 4 || value.shape.rank != 4) return Result::fail("kv_write: cache and value must be rank 4");
  const int64_t B = cache.shape.d[0], H = cache.shape.d[1], L = cache.shape.d[2], D = cache.shape.d[3];
  const int64_t S = value.shape.d[2];
  if (value.shape.d[0] != B || value.shape.d[1] != H || value.shape.d[3] != D || S > L)
    return Result::fail("kv_write: value does not fit the cache");
  if (cache.dtype != value.dtype) return Result::fail("kv_write: cache and value dtypes differ");
  if (pos.dtype != DType::i64 || pos.shape != Dims{B}) return Result::fail("kv_write: pos must be i64 [B]");
  const size_t es = dtype_size(cache.dtype);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = load_i64(pos.data, pos.dtype, b);
    if (p < 0 || p >= L) return Result::fail("kv_write: a position lies outside the cache");
    const int64_t rows = std::min(S, L - p);  // rows past the cache are dropped
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(static_cast<uint8_t *>(cache.data) + static_cast<size_t>(((b * H + h) * L + p) * D) * es,
                  static_cast<const uint8_t *>(value.data) + static_cast<size_t>(((b * H + h) * S) * D) * es,
                  static_cast<size_t>(rows * D) * es);
  }
  return {};
}

size_t rope_kv_write_scratch(const In &k) {
  return (static_cast<size_t>(k.shape.numel()) * dtype_size(k.dtype) + sizeof(float) - 1) / sizeof(float);
}

Result rope_kv_write(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                     const Out &q_out, const Out &k_cache, const Out &v_cache, float *scratch) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape != k.shape)
    return Result::fail("rope_kv_write: q and k must be rank 4, v shaped like k");
  if (Result r = rotary(q, cos, sin, q_out, false); !r.ok()) return r;
  // k's rotated copy, in k's dtype, then the two cache writes.
  const Out k_rot{scratch, k.dtype, k.shape};
  if (Result r = rotary(k, cos, sin, k_rot, false); !r.ok()) return r;
  if (Result r = kv_write(k_cache, In{scratch, k.dtype, k.shape}, pos); !r.ok()) return r;
  return kv_write(v_cache, v, pos);
}

size_t cached_attention_scratch(const In &k) { return k.shape.rank == 4 ? static_cast<size_t>(k.shape.d[2]) : 0; }

Result cached_attention(const In &q, const In &k, const In &v, const In &pos, const Out &out, float scale,
                        float *scratch) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape != k.shape)
    return Result::fail("cached_attention: q and the caches must be rank 4, v shaped like k");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], L = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh || Hkv <= 0 || Hq % Hkv != 0 || S > L)
    return Result::fail("cached_attention: the caches do not fit q");
  if (out.shape != q.shape) return Result::fail("cached_attention: output shape differs from q's");
  if (pos.dtype != DType::i64 || pos.shape != Dims{B}) return Result::fail("cached_attention: pos must be i64 [B]");
  if (!is_float(q.dtype) || !is_float(k.dtype) || !is_float(v.dtype) || !is_float(out.dtype))
    return Result::fail("cached_attention: operands must be float");
  const int64_t group = Hq / Hkv;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = load_i64(pos.data, pos.dtype, b);
    if (p < 0 || p >= L) return Result::fail("cached_attention: a position lies outside the cache");
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / group;
      const int64_t qbase = ((b * Hq + h) * S) * Dh;
      const int64_t kbase = ((b * Hkv + kh) * L) * Dh;
      for (int64_t i = 0; i < S; ++i) {
        // Query row i sits at position p + i and sees the cached keys 0 .. p + i.
        const int64_t T = std::min(p + i + 1, L);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < Dh; ++d)
            dot += static_cast<double>(load_f32(q.data, q.dtype, qbase + i * Dh + d)) *
                   load_f32(k.data, k.dtype, kbase + j * Dh + d);
          scratch[j] = static_cast<float>(dot) * scale;
          mx = std::fmax(mx, scratch[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          const float e = std::isfinite(mx) ? std::exp(scratch[j] - mx) : 0.0f;
          scratch[j] = e;
          sum += e;
        }
        const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
        for (int64_t d = 0; d < Dh; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < T; ++j)
            acc += static_cast<double>(scratch[j]) * load_f32(v.data, v.dtype, kbase + j * Dh + d);
          store_f32(out.data, out.dtype, qbase + i * Dh + d, static_cast<float>(acc) * inv);
        }
      }
    }
  }
  return {};
}

namespace {
size_t floats_of(const In &t) {
  return (static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype) + sizeof(float) - 1) / sizeof(float);
}
}  // namespace

size_t rope_attention_scratch(const In &q, const In &k, const In &k_cache) {
  return floats_of(q) + rope_kv_write_scratch(k) + cached_attention_scratch(k_cache);
}

Result rope_attention(const In &q, const In &k, const In &v, const In &cos, const In &sin, const In &pos,
                      const Out &out, const Out &k_cache, const Out &v_cache, float scale, float *scratch) {
  // The rotated q (q's dtype, as rope_kv_write writes it), k's rotated copy, then the attention's row.
  float *q_rot = scratch, *rest = scratch + floats_of(q);
  if (Result r = rope_kv_write(q, k, v, cos, sin, pos, Out{q_rot, q.dtype, q.shape}, k_cache, v_cache, rest); !r.ok())
    return r;
  return cached_attention(In{q_rot, q.dtype, q.shape}, In{k_cache.data, k_cache.dtype, k_cache.shape},
                          In{v_cache.data, v_cache.dtype, v_cache.shape}, pos, out, scale, rest);
}

Result argmax(const In &x, const Out &out) {
  if (x.shape.rank < 1 || !is_float(x.dtype)) return Result::fail("argmax: input must be float of rank >= 1");
  if (out.dtype != DType::i64 || out.shape.rank != x.shape.rank - 1) return Result::fail("argmax: output must be i64");
  for (int i = 0; i < out.shape.rank; ++i)
    if (out.shape.d[i] != x.shape.d[i]) return Result::fail("argmax: output shape is not the input's leading dims");
  const int64_t V = x.shape.d[x.shape.rank - 1], rows = out.shape.numel();
  if (V < 1) return Result::fail("argmax: empty rows");
  for (int64_t r = 0; r < rows; ++r) {
    // The first maximum wins (torch.argmax); NaN counts as the largest value, as torch's does.
    int64_t best = 0;
    float bv = load_f32(x.data, x.dtype, r * V);
    for (int64_t j = 1; j < V && !std::isnan(bv); ++j) {
      const float e = load_f32(x.data, x.dtype, r * V + j);
      if (e > bv || std::isnan(e)) {
        bv = e;
        best = j;
      }
    }
    store_i64(out.data, DType::i64, r, best);
  }
  return {};
}

Result take_rows(const In &x, const In &index, const Out &out) {
  if (x.shape.rank < 2) return Result::fail("take_rows: input must be [B, S, ...]");
  const int64_t B = x.shape.d[0], S = x.shape.d[1];
  if (index.dtype != DType::i64 || index.shape != Dims{B}) return Result::fail("take_rows: index must be i64 [B]");
  if (out.dtype != x.dtype || out.shape.rank != x.shape.rank - 1 || out.shape.d[0] != B)
    return Result::fail("take_rows: output must be [B, ...] of the input's dtype");
  const int64_t row = x.shape.numel() / (B * S);
  if (out.shape.numel() != B * row) return Result::fail("take_rows: output size is not B rows");
  const size_t es = dtype_size(x.dtype);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = load_i64(index.data, index.dtype, b);
    if (i < 0 || i >= S) return Result::fail("take_rows: an index lies outside [0, S)");
    std::memcpy(static_cast<uint8_t *>(out.data) + static_cast<size_t>(b * row) * es,
                static_cast<const uint8_t *>(x.data) + static_cast<size_t>((b * S + i) * row) * es,
                static_cast<size_t>(row) * es);
  }
  return {};
}

}  // namespace cpu
}  // namespace zk
