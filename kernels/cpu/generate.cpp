// Generation kernels (docs/generation.md): writes into a KV cache, attention of new queries over the cache,
// greedy selection and the per-sequence row pick. The attention mirrors attention.cpp's arithmetic (fp64
// dot products and sums, an fp32 softmax) so that a decode step and a prefill over the same tokens agree.
#include <algorithm>
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

namespace {

/// x's dims with the last one n.
Dims with_last(const Dims &x, int64_t n) {
  Dims d = x;
  d.d[d.rank - 1] = n;
  return d;
}

/// The sizes decode_layer works with.
struct LayerDims {
  int64_t rows = 0, d = 0, hq = 0, hkv = 0, dh = 0, f = 0;
  Dims q4, kv4, qrow, kvrow, frow;
};

bool layer_dims(const DecodeLayerIn &a, const Dims &cache, LayerDims *l) {
  if (a.x.shape.rank < 2 || cache.rank != 4 || a.wq.shape.rank != 2 || a.w_gate.shape.rank != 2) return false;
  l->d = a.x.shape.d[a.x.shape.rank - 1];
  l->hkv = cache.d[1];
  l->dh = cache.d[3];
  if (l->d < 1 || l->dh < 1 || a.wq.shape.d[1] % l->dh != 0) return false;
  l->rows = a.x.shape.numel() / l->d;
  l->hq = a.wq.shape.d[1] / l->dh;
  l->f = a.w_gate.shape.d[1];
  l->q4 = Dims{l->rows, l->hq, 1, l->dh};
  l->kv4 = Dims{l->rows, l->hkv, 1, l->dh};
  l->qrow = with_last(a.x.shape, l->hq * l->dh);
  l->kvrow = with_last(a.x.shape, l->hkv * l->dh);
  l->frow = with_last(a.x.shape, l->f);
  return true;
}

}  // namespace

size_t decode_layer_scratch(const DecodeLayerIn &a, const In &k_cache) {
  LayerDims l;
  if (!layer_dims(a, k_cache.shape, &l)) return 0;
  const DType t = a.x.dtype;
  const Out q{nullptr, t, l.qrow}, kv{nullptr, t, l.kvrow}, o{nullptr, t, a.x.shape}, h{nullptr, t, l.frow};
  const In w3[3] = {a.wq, a.wk, a.wv};
  const Out o3[3] = {q, kv, kv};
  const In gu[2] = {a.w_gate, a.w_up};
  size_t rest = norm_products_scratch(a.x, w3, o3, 3, false, Unary::silu, false);
  rest = std::max(rest, static_cast<size_t>(a.x.shape.numel()) +
                            std::max({linear_scratch(a.x, a.wq, q, false), linear_scratch(a.x, a.wk, kv, false)}));
  rest = std::max(rest, rope_kv_write_scratch(In{nullptr, t, l.kv4}));
  rest = std::max(rest, cached_attention_scratch(k_cache));
  rest = std::max(rest, linear_scratch(In{nullptr, t, l.qrow}, a.wo, o, false));
  rest = std::max(rest, norm_products_scratch(a.x, gu, &h, 2, false, Unary::silu, true));
  rest = std::max(rest, linear_scratch(In{nullptr, t, l.frow}, a.w_down, Out{nullptr, t, a.x.shape}, false));
  // sum1, q, k, v, the rotated q, the attention's output, o and h, each at most a float an element.
  const int64_t mine = 2 * l.rows * l.d + 3 * l.rows * l.hq * l.dh + 2 * l.rows * l.hkv * l.dh + l.rows * l.f;
  return static_cast<size_t>(mine) + rest;
}

Result decode_layer(const DecodeLayerIn &a, const Out &k_cache, const Out &v_cache, const Out &out,
                    const Out &residual_out, Unary act, float eps, float scale, float *scratch) {
  LayerDims l;
  if (!layer_dims(a, k_cache.shape, &l) || v_cache.shape != k_cache.shape)
    return Result::fail("decode_layer: x must be [B, (1,) d], the caches one shape [B, Hkv, L, Dh], wq [d, Hq Dh]");
  const DType t = a.x.dtype;
  // The intermediates in x's dtype, as the steps store them.
  float *at = scratch;
  auto take = [&](int64_t n) {
    float *p = at;
    at += n;
    return p;
  };
  float *sum1 = a.residual.data ? take(l.rows * l.d) : nullptr;
  float *q = take(l.rows * l.hq * l.dh), *k = take(l.rows * l.hkv * l.dh), *v = take(l.rows * l.hkv * l.dh);
  float *qrot = take(l.rows * l.hq * l.dh), *attn = take(l.rows * l.hq * l.dh);
  float *o = take(l.rows * l.d), *h = take(l.rows * l.f);
  float *rest = at + (a.residual.data ? 0 : l.rows * l.d);
  const Out qo{q, t, l.qrow}, ko{k, t, l.kvrow}, vo{v, t, l.kvrow};
  const In w3[3] = {a.wq, a.wk, a.wv};
  const Out o3[3] = {qo, ko, vo};
  In s1 = a.x;
  Result r;
  if (a.residual.data) {
    // norm_products: sum1 = x + residual, then q/k/v of its norm.
    r = norm_products(a.x, a.residual, a.norm1, w3, Out{sum1, t, a.x.shape}, o3, 3, false, Unary::silu, false, 1.0f,
                      eps, rest);
    s1 = In{sum1, t, a.x.shape};
  } else {
    // rms_norm, then linear_multi (a layer without a residual add).
    float *n1 = at;
    r = rms_norm(a.x, a.norm1, Out{n1, t, a.x.shape}, eps);
    if (r.ok()) r = linear_multi(In{n1, t, a.x.shape}, w3, o3, 3, false, 1.0f, rest);
  }
  if (r.ok())
    r = rope_kv_write(In{q, t, l.q4}, In{k, t, l.kv4}, In{v, t, l.kv4}, a.cos, a.sin, a.pos, Out{qrot, t, l.q4},
                      k_cache, v_cache, rest);
  if (r.ok())
    r = cached_attention(In{qrot, t, l.q4}, In{k_cache.data, k_cache.dtype, k_cache.shape},
                         In{v_cache.data, v_cache.dtype, v_cache.shape}, a.pos, Out{attn, t, l.q4}, scale, rest);
  if (r.ok()) r = linear(In{attn, t, l.qrow}, a.wo, In{}, Out{o, t, a.x.shape}, false, 1.0f, rest);
  const In gu[2] = {a.w_gate, a.w_up};
  const Out ho{h, t, l.frow};
  // The gated norm_products: residual_out = sum1 + o, h = act(norm x w_gate) * (norm x w_up).
  if (r.ok())
    r = norm_products(s1, In{o, t, a.x.shape}, a.norm2, gu, residual_out, &ho, 2, false, act, true, 1.0f, eps, rest);
  if (r.ok()) r = linear(In{h, t, l.frow}, a.w_down, In{}, out, false, 1.0f, rest);
  return r;
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
