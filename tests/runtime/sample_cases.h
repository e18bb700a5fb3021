// Hand-built plans around the sample opcode, shared by the CPU backend's test (tests/runtime/test_sample.cpp)
// and the CUDA backend's (tests/cuda/sample_test.cpp: the same ids as the CPU backend, bit for bit).
#ifndef ZRT_TESTS_SAMPLE_CASES_H
#define ZRT_TESTS_SAMPLE_CASES_H

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "train_plan_cases.h"

namespace zrt_test {
namespace sample_cases {

using train_cases::Case;
using train_cases::F;
using train_cases::I64;

struct Knobs {
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  int64_t seed = 0;
  int64_t step = 0;
};

/// Logits [b, v] spread over about 8 nats with some exact ties (every 7th logit repeats its neighbour), so
/// that the arg max's tie rule and the cut-offs are exercised.
inline std::vector<float> tied_logits(int64_t b, int64_t v, uint64_t seed) {
  std::vector<float> l = lcg(static_cast<size_t>(b * v), seed);
  for (float &x : l) x *= 4.0f;
  for (int64_t i = 0; i < b * v; ++i)
    if (i % 7 == 3 && i % v > 0) l[i] = l[i - 1];
  return l;
}

/// One sample instruction: logits [b, v] of dtype dt (f32 or bf16, rounded from tied_logits), the five
/// scalars as inputs, ids [b] as the output "ids". tp > 1 replicates everything over a tp group (the logits
/// reaching sample are whole).
inline Case sample_plan(int64_t b, int64_t v, fb::DType dt, const Knobs &k, uint64_t seed, int tp = 1) {
  Case c;
  c.p.tp = tp;
  const int logits = c.p.input("logits", dt, {b, v}, false);
  const std::vector<float> l = tied_logits(b, v, seed);
  std::vector<uint8_t> bytes(static_cast<size_t>(b * v) * esize(dt));
  for (int64_t i = 0; i < b * v; ++i) zk::store_f32(bytes.data(), static_cast<zk::DType>(dt), i, l[i]);
  c.data["logits"] = bytes;
  const int t = c.scalar("temperature", F, k.temperature), kk = c.scalar("top_k", I64, 0.0);
  const int p = c.scalar("top_p", F, k.top_p), s = c.scalar("seed", I64, 0.0), st = c.scalar("step", I64, 0.0);
  // Exact 64-bit values (Case::scalar goes through a double).
  std::memcpy(c.data["top_k"].data(), &k.top_k, 8);
  std::memcpy(c.data["seed"].data(), &k.seed, 8);
  std::memcpy(c.data["step"].data(), &k.step, 8);
  const int ids = c.out("ids", I64, {b});
  c.p.op(zrt::Op::sample, {logits, t, kk, p, s, st}, {ids});
  return c;
}

/// The knob settings both backends are compared on: greedy, plain temperature, top-k, top-p, both, the
/// degenerate cut-offs (k = 1, p = 0, k >= V) and a large seed and step (64-bit counter words).
inline std::vector<Knobs> knob_grid() {
  return {
      {0.0f, 0, 1.0f, 1, 0},  {1.0f, 0, 1.0f, 7, 3},        {0.7f, 5, 1.0f, 7, 4},
      {1.3f, 0, 0.9f, 11, 5}, {0.9f, 40, 0.6f, 12, 6},      {1.0f, 1, 1.0f, 13, 7},
      {1.0f, 0, 0.0f, 14, 8}, {2.0f, 1 << 20, 1.0f, 15, 9}, {0.05f, 3, 0.95f, -1, int64_t{1} << 40},
  };
}

}  // namespace sample_cases
}  // namespace zrt_test

#endif  // ZRT_TESTS_SAMPLE_CASES_H
