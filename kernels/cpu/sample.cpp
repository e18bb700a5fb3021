// The reference sampler (docs/sampling.md). Every decision is made on integers computed by zk/sample.h, so
// that the CUDA kernel, which finds the same cut-offs by radix selection instead of sorting, draws the same
// ids. This file is compiled without floating-point contraction (CMakeLists.txt) so that the weights round
// as the device computes them.
#include "zk/sample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "common.h"

namespace zk {
namespace cpu {

namespace zs = zk::sample;

Result sample_params(const In &temperature, const In &top_k, const In &top_p, const In &seed, const In &step,
                     SampleParams *out) {
  if (temperature.shape.numel() != 1 || temperature.dtype != DType::f32)
    return Result::fail("sample: temperature must be one f32 element");
  if (top_p.shape.numel() != 1 || top_p.dtype != DType::f32)
    return Result::fail("sample: top_p must be one f32 element");
  if (top_k.shape.numel() != 1 || top_k.dtype != DType::i64)
    return Result::fail("sample: top_k must be one i64 element");
  if (seed.shape.numel() != 1 || seed.dtype != DType::i64) return Result::fail("sample: seed must be one i64 element");
  if (step.shape.numel() != 1 || step.dtype != DType::i64) return Result::fail("sample: step must be one i64 element");
  std::memcpy(&out->temperature, temperature.data, sizeof(float));
  std::memcpy(&out->top_p, top_p.data, sizeof(float));
  std::memcpy(&out->top_k, top_k.data, sizeof(int64_t));
  std::memcpy(&out->seed, seed.data, sizeof(int64_t));
  std::memcpy(&out->step, step.data, sizeof(int64_t));
  return {};
}

size_t sample_scratch(const In &logits) {
  return logits.shape.rank == 2 ? static_cast<size_t>(logits.shape[1]) * 6 : 0;
}

Result sample(const In &logits, const SampleParams &p, const Out &ids, float *scratch) {
  if (logits.shape.rank != 2 || logits.shape[1] < 1) return Result::fail("sample: logits must be [B, V] with V >= 1");
  if (!is_float(logits.dtype)) return Result::fail("sample: logits must be float");
  if (logits.shape[1] > zs::kMaxVocab) return Result::fail("sample: the vocabulary is larger than 2^23");
  if (ids.dtype != DType::i64 || ids.shape.rank != 1 || ids.shape[0] != logits.shape[0])
    return Result::fail("sample: ids must be i64 [B]");
  if (!scratch) return Result::fail("sample: scratch missing");
  const int64_t rows = logits.shape[0], v = logits.shape[1];
  uint64_t *keys = reinterpret_cast<uint64_t *>(scratch);
  uint64_t *w = keys + v;
  uint64_t *order = w + v;  // the survivors' keys, sorted when a cut-off is searched
  int64_t *out = static_cast<int64_t *>(ids.data);
  const bool greedy = !(p.temperature > 0.0f);
  const bool use_k = p.top_k > 0 && p.top_k < v;
  const bool use_p = p.top_p < 1.0f;  // NaN compares false: off

  for (int64_t b = 0; b < rows; ++b) {
    uint64_t best = 0;
    for (int64_t i = 0; i < v; ++i) {
      keys[i] = zs::order_key(zs::clean_logit(load_f32(logits.data, logits.dtype, b * v + i)), i);
      best = std::max(best, keys[i]);
    }
    const int64_t argmax = zs::key_index(best);
    // The maximum is the arg max's logit (not a running max, whose sign of zero could differ by order).
    const float mx = zs::clean_logit(load_f32(logits.data, logits.dtype, b * v + argmax));
    if (greedy) {
      out[b] = argmax;
      continue;
    }
    // Top-k: the k-th largest key; everything at or above it stays.
    uint64_t cut = 0;
    if (use_k) {
      std::copy(keys, keys + v, order);
      std::nth_element(order, order + (p.top_k - 1), order + v, std::greater<uint64_t>());
      cut = order[p.top_k - 1];
    }
    uint64_t total = 0;
    for (int64_t i = 0; i < v; ++i) {
      w[i] = keys[i] >= cut ? zs::weight_of(zs::scaled(zs::clean_logit(load_f32(logits.data, logits.dtype, b * v + i)),
                                                       mx, p.temperature))
                            : 0;
      total += w[i];
    }
    // Top-p: walking the survivors largest first, a token stays while the weight above it is below
    // top_p * total (compared in double, as the device does); the first always stays.
    if (use_p) {
      const double thresh = static_cast<double>(p.top_p) * static_cast<double>(total);
      int64_t n = 0;
      for (int64_t i = 0; i < v; ++i)
        if (keys[i] >= cut) order[n++] = keys[i];
      std::sort(order, order + n, std::greater<uint64_t>());
      uint64_t above = 0, last = order[0];
      for (int64_t j = 0; j < n; ++j) {
        if (j > 0 && !(static_cast<double>(above) < thresh)) break;
        last = order[j];
        above += w[zs::key_index(order[j])];
      }
      cut = last;
    }
    uint64_t kept = 0;
    for (int64_t i = 0; i < v; ++i)
      if (keys[i] >= cut) kept += w[i];
    if (kept == 0) {  // every weight underflowed or was NaN: fall back to the arg max
      out[b] = argmax;
      continue;
    }
    const uint64_t r = zs::scale_draw(zs::draw_bits(p.seed, p.step, p.row_offset + b), kept);
    uint64_t cum = 0;
    int64_t pick = argmax;
    for (int64_t i = 0; i < v; ++i) {
      if (keys[i] < cut) continue;
      cum += w[i];
      if (cum > r) {
        pick = i;
        break;
      }
    }
    out[b] = pick;
  }
  return {};
}

}  // namespace cpu
}  // namespace zk
