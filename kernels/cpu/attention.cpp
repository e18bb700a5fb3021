// Scaled dot-product attention with grouped KV heads, a causal flag and an additive mask. One query row
// at a time: scores into the scratch row, a numerically stable softmax, then the weighted sum of values.
// The backward recomputes each head's probabilities from q, k and the forward's log-sum-exp, as a
// flash-attention backward does, so that nothing of size S x T is kept between forward and backward.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"

namespace zk {
namespace cpu {

size_t attention_scratch(const In &q, const In &k) {
  (void)q;
  // One score per key: T is dim 2 head-major and dim 1 sequence-major; the larger covers both layouts.
  // A packed k ([B, T, W], AttnPacked) has T at dim 1.
  if (k.shape.rank == 3) return static_cast<size_t>(k.shape.d[1]);
  return k.shape.rank == 4 ? static_cast<size_t>(std::max(k.shape.d[1], k.shape.d[2])) : 0;
}

Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, bool causal, float scale,
                 float *scratch) {
  return attention(q, k, v, mask, out, Out{}, causal, scale, 0, scratch);
}

Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, float *scratch) {
  return attention(q, k, v, mask, out, lse, causal, scale, 0, scratch);
}

namespace {

/// The logical [B, H, S, Dh] dims of an attention operand stored head-major or sequence-major, and the element
/// strides of its batch, head and position dims (the head dim is contiguous in both layouts).
struct AttnOperand {
  int64_t B = 0, H = 0, S = 0, Dh = 0;
  int64_t sb = 0, sh = 0, ss = 0;
};

AttnOperand attn_operand(const Dims &d, bool seq_major) {
  AttnOperand o;
  o.B = d.d[0];
  o.H = seq_major ? d.d[2] : d.d[1];
  o.S = seq_major ? d.d[1] : d.d[2];
  o.Dh = d.d[3];
  o.sb = o.H * o.S * o.Dh;
  o.sh = seq_major ? o.Dh : o.S * o.Dh;
  o.ss = seq_major ? o.H * o.Dh : o.Dh;
  return o;
}

/// A packed operand's dims and strides (AttnPacked): [B, S, heads, Dh] rows of row_stride elements; its
/// element offset is added to the base by the caller. False when the packing does not fit the tensor.
bool packed_operand(const Dims &d, const AttnPacked &p, int64_t Dh, AttnOperand &o) {
  if (d.rank != 3 || p.offset < 0 || p.heads <= 0 || Dh <= 0 || p.row_stride != d.d[2] ||
      p.offset + p.heads * Dh > p.row_stride)
    return false;
  o.B = d.d[0];
  o.H = p.heads;
  o.S = d.d[1];
  o.Dh = Dh;
  o.sb = o.S * p.row_stride;
  o.sh = Dh;
  o.ss = p.row_stride;
  return true;
}

bool same_dims(const AttnOperand &a, const AttnOperand &b) { return a.B == b.B && a.H == b.H && a.S == b.S && a.Dh == b.Dh; }

}  // namespace

Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, int seq_major, float *scratch) {
  return attention(q, k, v, mask, out, lse, causal, scale, seq_major, nullptr, scratch);
}

Result attention(const In &q, const In &k, const In &v, const In &mask, const Out &out, const Out &lse, bool causal,
                 float scale, int seq_major, const AttnPacked *packed, float *scratch) {
  const In *qkv[3] = {&q, &k, &v};
  if (out.shape.rank != 4) return Result::fail("attention: out must be rank 4");
  for (int i = 0; i < 3; ++i) {
    const bool is_packed = packed && packed[i].row_stride != 0;
    if (qkv[i]->shape.rank != (is_packed ? 3 : 4))
      return Result::fail("attention: q, k and v must be rank 4, or rank 3 packed");
    if (is_packed && !(seq_major & (1 << i))) return Result::fail("attention: a packed operand must be sequence-major");
  }
  if (seq_major & ~kAttnSeqMajorAll) return Result::fail("attention: unknown seq_major bits");
  AttnOperand ops[3];
  int64_t base[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (packed && packed[i].row_stride != 0) {
      if (!packed_operand(qkv[i]->shape, packed[i], out.shape.d[3], ops[i]))
        return Result::fail("attention: a packed operand's offset and heads do not fit its tensor's rows");
      base[i] = packed[i].offset;
    } else {
      ops[i] = attn_operand(qkv[i]->shape, seq_major & (1 << i));
    }
  }
  const AttnOperand &qo = ops[0], &ko = ops[1], &vo = ops[2],
                    oo = attn_operand(out.shape, seq_major & kAttnSeqMajorOut);
  const int64_t B = qo.B, Hq = qo.H, S = qo.S, Dh = qo.Dh;
  const int64_t Hkv = ko.H, T = ko.S;
  if (ko.B != B || ko.Dh != Dh) return Result::fail("attention: k must be [B, Hkv, T, Dh]");
  if (!same_dims(vo, ko)) return Result::fail("attention: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return Result::fail("attention: Hq must be a multiple of Hkv");
  if (!same_dims(oo, qo)) return Result::fail("attention: output shape differs from q's");
  if (!is_float(q.dtype) || !is_float(k.dtype) || !is_float(v.dtype) || !is_float(out.dtype))
    return Result::fail("attention: operands must be float");
  if (lse.data && (lse.dtype != DType::f32 || lse.shape != Dims{B, Hq, S}))
    return Result::fail("attention: lse must be f32 [B, Hq, S]");
  if (causal && S > T) return Result::fail("attention: causal needs S <= T");
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
      const int64_t qbase = base[0] + b * qo.sb + h * qo.sh, obase = b * oo.sb + h * oo.sh;
      const int64_t kbase = base[1] + b * ko.sb + kh * ko.sh, vbase = base[2] + b * vo.sb + kh * vo.sh;
      for (int64_t i = 0; i < S; ++i) {
        float mx = ninf;
        for (int64_t j = 0; j < T; ++j) {
          float s;
          if (causal && j > i + (T - S)) {
            s = ninf;
          } else {
            double dot = 0.0;
            for (int64_t d = 0; d < Dh; ++d)
              dot += static_cast<double>(load_f32(q.data, q.dtype, qbase + i * qo.ss + d)) *
                     load_f32(k.data, k.dtype, kbase + j * ko.ss + d);
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
        if (lse.data)
          static_cast<float *>(lse.data)[(b * Hq + h) * S + i] =
              sum > 0.0 ? mx + static_cast<float>(std::log(sum)) : -std::numeric_limits<float>::infinity();
        for (int64_t d = 0; d < Dh; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < T; ++j) acc += static_cast<double>(scratch[j]) * load_f32(v.data, v.dtype, vbase + j * vo.ss + d);
          store_f32(out.data, out.dtype, obase + i * oo.ss + d, static_cast<float>(acc) * inv);
        }
      }
    }
  return {};
}

size_t attention_grad_scratch(const In &q, const In &k) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || k.shape.d[1] <= 0) return 0;
  const int64_t group = q.shape.d[1] / k.shape.d[1];
  // The probabilities and score gradients of the query heads that share one kv head.
  return static_cast<size_t>(2 * group * q.shape.d[2] * k.shape.d[2]);
}

Result attention_grad(const In &q, const In &k, const In &v, const In &out, const In &dout, const In &lse,
                      const In &mask, const Out &dq, const Out &dk, const Out &dv, bool causal, float scale,
                      float *scratch) {
  if (q.shape.rank != 4 || k.shape.rank != 4 || v.shape.rank != 4)
    return Result::fail("attention_grad: q, k, v must be rank 4");
  const int64_t B = q.shape.d[0], Hq = q.shape.d[1], S = q.shape.d[2], Dh = q.shape.d[3];
  const int64_t Hkv = k.shape.d[1], T = k.shape.d[2];
  if (k.shape.d[0] != B || k.shape.d[3] != Dh) return Result::fail("attention_grad: k must be [B, Hkv, T, Dh]");
  if (v.shape != k.shape) return Result::fail("attention_grad: v's shape differs from k's");
  if (Hkv <= 0 || Hq % Hkv != 0) return Result::fail("attention_grad: Hq must be a multiple of Hkv");
  if (out.shape != q.shape || dout.shape != q.shape || dq.shape != q.shape)
    return Result::fail("attention_grad: out, dout and dq must have q's shape");
  if (dk.shape != k.shape || dv.shape != k.shape) return Result::fail("attention_grad: dk and dv must have k's shape");
  if (lse.dtype != DType::f32 || lse.shape != Dims{B, Hq, S}) return Result::fail("attention_grad: lse must be f32 [B, Hq, S]");
  for (DType t : {q.dtype, k.dtype, v.dtype, out.dtype, dout.dtype, dq.dtype, dk.dtype, dv.dtype})
    if (!is_float(t)) return Result::fail("attention_grad: operands must be float");
  if (causal && S > T) return Result::fail("attention_grad: causal needs S <= T");
  const Dims full{B, Hq, S, T};
  int64_t mst[kMaxRank] = {};
  if (mask.data) {
    if (!broadcastable(mask.shape, full)) return Result::fail("attention_grad: mask does not broadcast to [B, Hq, S, T]");
    detail::broadcast_strides(mask.shape, full, mst);
  }
  const int64_t group = Hq / Hkv;
  const float *lsep = static_cast<const float *>(lse.data);
  float *P = scratch;                    // [group, S, T]
  float *dS = scratch + group * S * T;   // [group, S, T]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      const int64_t kbase = ((b * Hkv + kh) * T) * Dh;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kh * group + g;
        const int64_t qbase = ((b * Hq + h) * S) * Dh;
        for (int64_t i = 0; i < S; ++i) {
          float *p = P + (g * S + i) * T, *ds = dS + (g * S + i) * T;
          const float l = lsep[(b * Hq + h) * S + i];
          // D_i = dout_i . out_i equals sum_j p_ij dp_ij: the softmax backward's row term.
          double D = 0.0;
          for (int64_t d = 0; d < Dh; ++d)
            D += static_cast<double>(load_f32(dout.data, dout.dtype, qbase + i * Dh + d)) *
                 load_f32(out.data, out.dtype, qbase + i * Dh + d);
          for (int64_t j = 0; j < T; ++j) {
            if ((causal && j > i + (T - S)) || !std::isfinite(l)) {
              p[j] = 0.0f;
              ds[j] = 0.0f;
              continue;
            }
            // The score exactly as the forward computes it, so that exp(s - lse) are its probabilities.
            double dot = 0.0, dp = 0.0;
            for (int64_t d = 0; d < Dh; ++d) {
              dot += static_cast<double>(load_f32(q.data, q.dtype, qbase + i * Dh + d)) *
                     load_f32(k.data, k.dtype, kbase + j * Dh + d);
              dp += static_cast<double>(load_f32(dout.data, dout.dtype, qbase + i * Dh + d)) *
                    load_f32(v.data, v.dtype, kbase + j * Dh + d);
            }
            float sc = static_cast<float>(dot) * scale;
            if (mask.data) sc += load_f32(mask.data, mask.dtype, b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]);
            const float pj = std::exp(sc - l);
            p[j] = pj;
            ds[j] = pj * static_cast<float>(dp - D);
          }
        }
        // dq_i = scale * sum_j dS_ij k_j.
        for (int64_t i = 0; i < S; ++i) {
          const float *ds = dS + (g * S + i) * T;
          for (int64_t d = 0; d < Dh; ++d) {
            double acc = 0.0;
            for (int64_t j = 0; j < T; ++j) acc += static_cast<double>(ds[j]) * load_f32(k.data, k.dtype, kbase + j * Dh + d);
            store_f32(dq.data, dq.dtype, qbase + i * Dh + d, static_cast<float>(acc) * scale);
          }
        }
      }
      // dk_j = scale * sum_{h, i} dS_hij q_hi and dv_j = sum_{h, i} P_hij dout_hi over the group's heads.
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < Dh; ++d) {
          double ak = 0.0, av = 0.0;
          for (int64_t g = 0; g < group; ++g) {
            const int64_t qbase = ((b * Hq + kh * group + g) * S) * Dh;
            for (int64_t i = 0; i < S; ++i) {
              const int64_t at = (g * S + i) * T + j;
              if (dS[at] != 0.0f) ak += static_cast<double>(dS[at]) * load_f32(q.data, q.dtype, qbase + i * Dh + d);
              if (P[at] != 0.0f) av += static_cast<double>(P[at]) * load_f32(dout.data, dout.dtype, qbase + i * Dh + d);
            }
          }
          store_f32(dk.data, dk.dtype, kbase + j * Dh + d, static_cast<float>(ak) * scale);
          store_f32(dv.data, dv.dtype, kbase + j * Dh + d, static_cast<float>(av));
        }
    }
  return {};
}

}  // namespace cpu
}  // namespace zk
