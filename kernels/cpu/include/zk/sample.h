// zk/sample.h - the pieces of token sampling that the CPU reference and the CUDA kernel share, so that both
// compute the same integers: the Philox4x32-10 generator, the order key of a logit, and the integer weight
// of a scaled logit.
//
// The sampler (docs/sampling.md) decides everything on integers: which tokens survive top-k and top-p, their
// weights and the draw. Integer sums do not depend on the order of summation, so a parallel reduction on the
// GPU gives the bits the CPU's loop gives. The only floating-point step, the weight exp((l - max) / T) in
// fixed point, is written here with correctly rounded double operations that are never fused (the
// intrinsics below on the device; the host file is compiled with -ffp-contract=off), so that it rounds the
// same on both.
//
// Header only; plain C++ that nvcc also compiles for the device.
#ifndef ZK_SAMPLE_H
#define ZK_SAMPLE_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZK_SAMPLE_HD __host__ __device__ __forceinline__
#else
#define ZK_SAMPLE_HD inline
#endif

namespace zk {
namespace sample {

/// Weights are exp(z) in fixed point with this many fraction bits; a row of at most 2^23 tokens sums below
/// 2^63.
constexpr int kWeightBits = 40;
constexpr int64_t kMaxVocab = int64_t{1} << 23;

// --- Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
// Ten rounds of: two 32x32->64 products of counter words with the multipliers, the high halves xored with
// the other counter words and the key, the key bumped by the Weyl constants between rounds.
struct Philox4x32 {
  uint32_t v[4];
};

ZK_SAMPLE_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

ZK_SAMPLE_HD Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint32_t hi0 = mulhi32(kM0, ctr.v[0]), lo0 = kM0 * ctr.v[0];
    const uint32_t hi1 = mulhi32(kM1, ctr.v[2]), lo1 = kM1 * ctr.v[2];
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

/// The 64 random bits of row `row` at decode step `step` under `seed`: key = seed, counter = (step low,
/// step high, row, 0); the first two output words, low first.
ZK_SAMPLE_HD uint64_t draw_bits(int64_t seed, int64_t step, int64_t row) {
  const uint64_t s = static_cast<uint64_t>(seed), t = static_cast<uint64_t>(step);
  const Philox4x32 out = philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32), static_cast<uint32_t>(row), 0u}},
      static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32));
  return static_cast<uint64_t>(out.v[0]) | (static_cast<uint64_t>(out.v[1]) << 32);
}

/// floor(bits * n / 2^64): a draw in [0, n).
ZK_SAMPLE_HD uint64_t scale_draw(uint64_t bits, uint64_t n) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(bits, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
#endif
}

// --- order keys: larger key = larger logit, then lower index. Keys are unique within a row.
/// A NaN logit counts as -inf: never drawn, and the arg max only of a row of NaN and -inf.
ZK_SAMPLE_HD float clean_logit(float x) { return x != x ? -INFINITY : x; }

ZK_SAMPLE_HD uint64_t order_key(float logit, int64_t index) {
  uint32_t b;
  memcpy(&b, &logit, sizeof b);
  // Flip so that unsigned order is float order: negatives reversed, positives above them. -0 and +0 differ
  // by one in the key, which only breaks their tie towards +0 (a real tie between them is not meaningful).
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}

ZK_SAMPLE_HD int64_t key_index(uint64_t key) { return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(key)); }

// --- the weight floor(exp(z) * 2^40) of z = (logit - max) / temperature <= 0.
ZK_SAMPLE_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ZK_SAMPLE_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
ZK_SAMPLE_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

/// z = (logit - max) / temperature, in double: the difference of two floats and the quotient each rounded
/// once.
ZK_SAMPLE_HD double scaled(float logit, float max, float temperature) {
  return ddiv(dadd(static_cast<double>(logit), -static_cast<double>(max)), static_cast<double>(temperature));
}

/// floor(exp(z) * 2^kWeightBits) for z <= 0 (NaN and z < -28 give 0: exp(-28) * 2^40 < 1). exp is
/// evaluated as 2^k * p(r), z = k ln2 + r with |r| <= ln2 / 2 (ln2 split in two so that k * hi is exact),
/// p the Taylor polynomial of degree 12 (relative error below 1e-15) in Horner form.
ZK_SAMPLE_HD uint64_t weight_of(double z) {
  if (!(z >= -28.0)) return 0;
  if (z > 0.0) z = 0.0;
  const double kInvLn2 = 1.4426950408889634074;
  const double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: k * kLn2Hi is exact for |k| < 2^20
  const double kLn2Lo = 1.90821492927058770002e-10;
  const double k = floor(dadd(dmul(z, kInvLn2), 0.5));
  const double r = dadd(dadd(z, -dmul(k, kLn2Hi)), -dmul(k, kLn2Lo));
  // 1/n! for n = 12 down to 0.
  const double kInvFact[13] = {2.08767569878680989792e-09,
                               2.50521083854417187751e-08,
                               2.75573192239858906526e-07,
                               2.75573192239858906526e-06,
                               2.48015873015873015873e-05,
                               1.98412698412698412698e-04,
                               1.38888888888888888889e-03,
                               8.33333333333333333333e-03,
                               4.16666666666666666667e-02,
                               1.66666666666666666667e-01,
                               5.00000000000000000000e-01,
                               1.0,
                               1.0};
  double p = kInvFact[0];
  for (int n = 1; n < 13; ++n) p = dadd(dmul(p, r), kInvFact[n]);
  // k is in [-41, 0]; scaling by a power of two is exact, and the product is below 2^41.
  return static_cast<uint64_t>(ldexp(p, static_cast<int>(k) + kWeightBits));
}

}  // namespace sample
}  // namespace zk

#endif  // ZK_SAMPLE_H
