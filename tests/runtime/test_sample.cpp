// The sampler (kernels/cpu/sample.cpp, zk/sample.h) against independent oracles:
//  - Philox4x32-10 against the published known-answer vectors (Random123's kat_vectors, Salmon et al. 2011);
//  - the fixed-point weights against std::exp in double;
//  - greedy and top-k 1 against an arg max loop (lowest index on ties);
//  - over many draws, the empirical frequencies against softmax(logits / T) restricted to the top-k set and
//    the nucleus, computed here in float64 by sorting (a chi-square bound), and no token outside that set;
//  - the same ids from two Sessions (two runs) and from every rank of a tp group (mpirun -np 2).
// Test suites named World2 run under mpirun -np 2, the others under -np 1.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "sample_cases.h"
#include "zk/cpu_kernels.h"
#include "zk/sample.h"

using namespace zrt_test;
using namespace zrt_test::sample_cases;

namespace {

zk::cpu::SampleParams params(const Knobs &k) { return {k.temperature, k.top_k, k.top_p, k.seed, k.step}; }

/// Draws ids for `rows` rows of logits (f32 storage) with the reference kernel.
std::vector<int64_t> draw(const std::vector<float> &logits, int64_t rows, int64_t v, const Knobs &k) {
  std::vector<int64_t> ids(static_cast<size_t>(rows), -1);
  zk::In l{logits.data(), zk::DType::f32, zk::Dims{rows, v}};
  zk::Out o{ids.data(), zk::DType::i64, zk::Dims{rows}};
  std::vector<float> scratch(zk::cpu::sample_scratch(l));
  const zk::Result r = zk::cpu::sample(l, params(k), o, scratch.data());
  EXPECT_TRUE(r.ok()) << r.error;
  return ids;
}

/// The arg max of a row, lowest index on ties; NaN never wins unless the row has nothing else.
int64_t argmax_oracle(const float *row, int64_t v) {
  int64_t best = 0;
  double bv = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < v; ++i) {
    if (std::isnan(row[i])) continue;
    if (!found || row[i] > bv) {
      best = i;
      bv = row[i];
      found = true;
    }
  }
  return best;
}

/// The float64 target distribution: softmax(l / T) over the top_k largest logits (ties by lower index),
/// then the nucleus: the largest-first prefix whose probability above each member is below top_p (the
/// first always stays), renormalised. Returns probability per token (0 outside the set) and the smallest
/// distance of a cumulative sum from top_p, so that a test can make sure no member sits on the boundary.
std::vector<double> target(const std::vector<float> &l, double t, int64_t top_k, double top_p, double *margin) {
  const int64_t v = static_cast<int64_t>(l.size());
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  const int64_t k = top_k > 0 && top_k < v ? top_k : v;
  order.resize(static_cast<size_t>(k));
  const double mx = l[order[0]];
  std::vector<double> p(static_cast<size_t>(v), 0.0);
  double z = 0.0;
  for (int64_t i : order) z += std::exp((l[i] - mx) / t);
  *margin = INFINITY;
  double above = 0.0;
  std::vector<int64_t> kept;
  for (size_t j = 0; j < order.size(); ++j) {
    if (top_p < 1.0) *margin = std::min(*margin, std::fabs(above - top_p));
    if (j > 0 && top_p < 1.0 && !(above < top_p)) break;
    kept.push_back(order[j]);
    above += std::exp((l[order[j]] - mx) / t) / z;
  }
  double zk = 0.0;
  for (int64_t i : kept) zk += std::exp((l[i] - mx) / t);
  for (int64_t i : kept) p[i] = std::exp((l[i] - mx) / t) / zk;
  return p;
}

/// Upper critical value of chi-square with df degrees of freedom at a tail of about 3e-7 (z = 5), by the
/// Wilson-Hilferty approximation.
double chi2_critical(int df) {
  const double a = 2.0 / (9.0 * df), z = 5.0;
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

}  // namespace

TEST(SamplePhilox, KnownAnswerVectors) {
  // Random123 1.x, examples/kat_vectors: counter (4 words), key (2 words) -> output (4 words).
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  } const kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) {
    const zk::sample::Philox4x32 o =
        zk::sample::philox4x32_10({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(o.v[i], k.out[i]) << "word " << i << " of the vector with counter " << k.ctr[0];
  }
  // draw_bits is words 0 and 1 of the block at key = seed, counter = (step low, step high, row, 0).
  const zk::sample::Philox4x32 o = zk::sample::philox4x32_10({{5, 1, 9, 0}}, 0x89abcdefu, 0x01234567u);
  EXPECT_EQ(zk::sample::draw_bits(0x0123456789abcdefLL, (int64_t{1} << 32) + 5, 9), (uint64_t{o.v[1]} << 32) | o.v[0]);
}

TEST(SampleWeight, MatchesExpInDouble) {
  const double scale = std::ldexp(1.0, zk::sample::kWeightBits);
  for (int i = 0; i <= 30000; ++i) {
    const double z = -30.0 * i / 30000.0;
    const double want = std::exp(z) * scale;
    const double got = static_cast<double>(zk::sample::weight_of(z));
    EXPECT_LE(std::fabs(got - std::floor(want)), 1.0 + want * 1e-14) << "z = " << z;
  }
  EXPECT_EQ(zk::sample::weight_of(0.0), uint64_t{1} << zk::sample::kWeightBits);
  EXPECT_EQ(zk::sample::weight_of(NAN), 0u);
  EXPECT_EQ(zk::sample::weight_of(-INFINITY), 0u);
}

TEST(SampleKernel, GreedyIsArgmaxLowestIndexOnTies) {
  const int64_t rows = 7, v = 1000;
  std::vector<float> l = tied_logits(rows, v, 3);
  // Row 1: the maximum twice; row 2: NaN and -inf around; row 3: only NaN and -inf; row 4: all equal.
  l[1 * v + 10] = 50.0f;
  l[1 * v + 500] = 50.0f;
  l[2 * v + 0] = NAN;
  l[2 * v + 1] = INFINITY;
  l[2 * v + 2] = -INFINITY;
  for (int64_t i = 0; i < v; ++i) l[3 * v + i] = i % 2 ? NAN : -INFINITY;
  for (int64_t i = 0; i < v; ++i) l[4 * v + i] = 0.25f;
  for (float t : {0.0f, -1.0f, NAN}) {
    const std::vector<int64_t> ids = draw(l, rows, v, {t, 0, 1.0f, 1, 0});
    for (int64_t b = 0; b < rows; ++b) EXPECT_EQ(ids[b], argmax_oracle(&l[b * v], v)) << "row " << b << " T " << t;
  }
  EXPECT_EQ(draw(l, rows, v, {0.0f, 0, 1.0f, 1, 0})[1], 10);
  EXPECT_EQ(draw(l, rows, v, {0.0f, 0, 1.0f, 1, 0})[2], 1);
  EXPECT_EQ(draw(l, rows, v, {0.0f, 0, 1.0f, 1, 0})[4], 0);

  // bf16 storage: the arg max of the rounded logits.
  std::vector<uint16_t> lb(l.size());
  std::vector<float> rounded(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    lb[i] = zk::f32_to_bf16(l[i]);
    rounded[i] = zk::bf16_to_f32(lb[i]);
  }
  std::vector<int64_t> ids(rows);
  zk::In in{lb.data(), zk::DType::bf16, zk::Dims{rows, v}};
  std::vector<float> scratch(zk::cpu::sample_scratch(in));
  ASSERT_TRUE(zk::cpu::sample(in, params({0.0f, 0, 1.0f, 1, 0}), zk::Out{ids.data(), zk::DType::i64, zk::Dims{rows}},
                              scratch.data())
                  .ok());
  for (int64_t b = 0; b < rows; ++b) EXPECT_EQ(ids[b], argmax_oracle(&rounded[b * v], v)) << "bf16 row " << b;
}

TEST(SampleKernel, TopK1IsArgmax) {
  const int64_t rows = 16, v = 3000;
  const std::vector<float> l = tied_logits(rows, v, 5);
  for (int64_t seed = 0; seed < 20; ++seed) {
    const std::vector<int64_t> ids = draw(l, rows, v, {0.8f, 1, 1.0f, seed, seed * 3});
    for (int64_t b = 0; b < rows; ++b) EXPECT_EQ(ids[b], argmax_oracle(&l[b * v], v)) << "row " << b;
  }
  // So is a nucleus of top_p 0 (only the first token stays).
  const std::vector<int64_t> ids = draw(l, rows, v, {1.5f, 0, 0.0f, 3, 1});
  for (int64_t b = 0; b < rows; ++b) EXPECT_EQ(ids[b], argmax_oracle(&l[b * v], v)) << "row " << b;
}

TEST(SampleKernel, SameSeedSameIdsOtherSeedOtherIds) {
  const int64_t rows = 64, v = 500;
  const std::vector<float> l = tied_logits(rows, v, 9);
  const Knobs k{1.0f, 0, 1.0f, 1234, 17};
  const std::vector<int64_t> a = draw(l, rows, v, k), b = draw(l, rows, v, k);
  EXPECT_EQ(a, b);
  Knobs k2 = k;
  k2.seed = 1235;
  EXPECT_NE(a, draw(l, rows, v, k2));  // 64 rows over ~500 plausible tokens: equal by chance ~never
  Knobs k3 = k;
  k3.step = 18;
  EXPECT_NE(a, draw(l, rows, v, k3));
}

// Frequencies over 100000 draws (4000 identical rows x 25 steps) against the float64 target.
TEST(SampleKernel, FrequenciesMatchTheTargetDistribution) {
  const int64_t v = 16, rows = 4000, steps = 25;
  // Log-probabilities spread so that every kept token has at least ~1% probability.
  const std::vector<float> row = {0.3f, 1.9f,  -0.4f, 1.2f, 0.8f,  -1.5f, 2.3f,  0.0f,
                                  1.6f, -0.9f, 0.5f,  2.0f, -2.2f, 1.0f,  -0.2f, 0.6f};
  struct Setting {
    float t;
    int64_t k;
    float p;
  } const settings[] = {{1.0f, 0, 1.0f}, {0.7f, 5, 1.0f}, {1.2f, 0, 0.8f}, {0.9f, 8, 0.7f}, {2.0f, 12, 0.97f}};
  std::vector<float> l;
  for (int64_t b = 0; b < rows; ++b) l.insert(l.end(), row.begin(), row.end());
  for (const Setting &s : settings) {
    double margin = 0;
    const std::vector<double> p = target(row, s.t, s.k, s.p, &margin);
    ASSERT_GT(margin, 1e-3) << "the test's logits put a cumulative sum on the top_p boundary";
    std::vector<int64_t> count(static_cast<size_t>(v), 0);
    for (int64_t st = 0; st < steps; ++st)
      for (int64_t id : draw(l, rows, v, {s.t, s.k, s.p, 42, st})) {
        ASSERT_TRUE(id >= 0 && id < v);
        ++count[static_cast<size_t>(id)];
      }
    const double n = static_cast<double>(rows * steps);
    double chi2 = 0.0, tv = 0.0;
    int df = -1;
    for (int64_t i = 0; i < v; ++i) {
      tv += 0.5 * std::fabs(count[i] / n - p[i]);
      if (p[i] == 0.0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " is outside the top-k / nucleus set (T " << s.t << ", k " << s.k
                               << ", p " << s.p << ")";
        continue;
      }
      ASSERT_GT(p[i] * n, 50.0);  // chi-square's approximation wants expected counts well above 5
      chi2 += (count[i] - n * p[i]) * (count[i] - n * p[i]) / (n * p[i]);
      ++df;
    }
    if (df > 0) {
      EXPECT_LT(chi2, chi2_critical(df)) << "T " << s.t << ", k " << s.k << ", p " << s.p << ": chi-square " << chi2
                                         << " over " << df << " degrees of freedom";
    }
    EXPECT_LT(tv, 0.01) << "T " << s.t << ", k " << s.k << ", p " << s.p;
    std::printf("T %.1f k %lld p %.2f: %d tokens kept, chi-square %.1f (critical %.1f), total variation %.4f\n", s.t,
                static_cast<long long>(s.k), s.p, df + 1, chi2, df > 0 ? chi2_critical(df) : 0.0, tv);
  }
}

// A wide vocabulary with many near-equal logits: draws stay inside the oracle's set.
TEST(SampleKernel, TokensOutsideTopKAndNucleusNeverAppear) {
  const int64_t rows = 200, v = 5000;
  const std::vector<float> l = tied_logits(1, v, 21);
  std::vector<float> all;
  for (int64_t b = 0; b < rows; ++b) all.insert(all.end(), l.begin(), l.end());
  struct Setting {
    float t;
    int64_t k;
    float p;
  } const settings[] = {{1.0f, 20, 1.0f}, {0.5f, 0, 0.3f}, {1.0f, 50, 0.5f}, {3.0f, 7, 0.99f}};
  for (const Setting &s : settings) {
    double margin = 0;
    const std::vector<double> p = target(l, s.t, s.k, s.p, &margin);
    ASSERT_GT(margin, 1e-7);
    std::vector<bool> seen(static_cast<size_t>(v), false);
    for (int64_t st = 0; st < 10; ++st)
      for (int64_t id : draw(all, rows, v, {s.t, s.k, s.p, 7, st})) {
        ASSERT_TRUE(id >= 0 && id < v);
        EXPECT_GT(p[id], 0.0) << "token " << id << " drawn outside the set (T " << s.t << ", k " << s.k << ", p " << s.p
                              << ")";
        seen[id] = true;
      }
    // Every member of a small set shows up over 2000 draws.
    if (s.k == 7)
      for (int64_t i = 0; i < v; ++i)
        if (p[i] > 0.05) EXPECT_TRUE(seen[i]) << "token " << i;
  }
}

TEST(SampleKernel, NucleusBoundary) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps the first two (0.5 above the second, 0.8 above the
  // third); 0.85 keeps three.
  const std::vector<float> row = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  std::vector<float> l;
  const int64_t rows = 2000;
  for (int64_t b = 0; b < rows; ++b) l.insert(l.end(), row.begin(), row.end());
  std::map<int64_t, int64_t> c75, c85;
  for (int64_t id : draw(l, rows, 4, {1.0f, 0, 0.75f, 1, 0})) ++c75[id];
  for (int64_t id : draw(l, rows, 4, {1.0f, 0, 0.85f, 1, 0})) ++c85[id];
  EXPECT_EQ(c75.count(0) + c75.count(2), 0u);
  EXPECT_GT(c75[1], 0);
  EXPECT_GT(c75[3], 0);
  EXPECT_EQ(c85.count(2), 0u);
  EXPECT_GT(c85[0], 0);
}

TEST(SampleKernel, RefusesBadShapes) {
  std::vector<float> l(12, 0.0f), scratch(100);
  std::vector<int64_t> ids(3);
  const zk::cpu::SampleParams p{};
  EXPECT_FALSE(zk::cpu::sample({l.data(), zk::DType::f32, zk::Dims{12}}, p, {ids.data(), zk::DType::i64, zk::Dims{1}},
                               scratch.data())
                   .ok());
  EXPECT_FALSE(zk::cpu::sample({l.data(), zk::DType::f32, zk::Dims{3, 4}}, p, {ids.data(), zk::DType::i64, zk::Dims{2}},
                               scratch.data())
                   .ok());
  EXPECT_FALSE(zk::cpu::sample({l.data(), zk::DType::f32, zk::Dims{3, 4}}, p, {ids.data(), zk::DType::f32, zk::Dims{3}},
                               scratch.data())
                   .ok());
}

// Through a Session on the CPU backend: the plan's operand order reaches the kernel, and two runs agree.
TEST(World1, SessionMatchesKernelAndRepeats) {
  for (const Knobs &k : knob_grid()) {
    for (fb::DType dt : {F, fb::DType::bf16}) {
      Case c = sample_plan(5, 300, dt, k, 31);
      std::map<std::string, std::vector<uint8_t>> a, b;
      ASSERT_NO_FATAL_FAILURE(c.run(&a));
      Case c2 = sample_plan(5, 300, dt, k, 31);
      ASSERT_NO_FATAL_FAILURE(c2.run(&b));
      EXPECT_EQ(a["ids"], b["ids"]);
      std::vector<int64_t> want(5);
      zk::In in = c.kin("logits", dt, {5, 300});
      std::vector<float> scratch(zk::cpu::sample_scratch(in));
      ASSERT_TRUE(zk::cpu::sample(in, params(k), {want.data(), zk::DType::i64, zk::Dims{5}}, scratch.data()).ok());
      EXPECT_EQ(std::memcmp(a["ids"].data(), want.data(), 40), 0) << "T " << k.temperature << " k " << k.top_k;
    }
  }
}

// Two ranks of a tp group run the same instruction on the same (whole) logits: identical ids.
TEST(World2, EveryRankDrawsTheSameIds) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 2);
  for (const Knobs &k : knob_grid()) {
    Case c = sample_plan(8, 700, F, k, 41, 2);
    // Each rank's own ids tensor (read_output would assemble one copy on rank 0).
    std::vector<uint8_t> f = c.p.file();
    std::unique_ptr<zrt::Session> s;
    zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", zrt::Options{}, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    for (auto &kv : c.data) ASSERT_TRUE(s->bind_input(kv.first, kv.second.data(), kv.second.size()).ok()) << kv.first;
    st = s->run();
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<int64_t> mine(8, -1), all(16);
    std::vector<int64_t> shape;
    st = s->read_local_output("ids", mine.data(), 64, &shape);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(shape, std::vector<int64_t>{8});
    MPI_Allgather(mine.data(), 8, MPI_INT64_T, all.data(), 8, MPI_INT64_T, MPI_COMM_WORLD);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(all[i], all[8 + i]) << "row " << i << " T " << k.temperature;
    // And they are the reference kernel's ids.
    std::vector<int64_t> want(8);
    zk::In in = c.kin("logits", F, {8, 700});
    std::vector<float> scratch(zk::cpu::sample_scratch(in));
    ASSERT_TRUE(zk::cpu::sample(in, params(k), {want.data(), zk::DType::i64, zk::Dims{8}}, scratch.data()).ok());
    EXPECT_EQ(mine, want);
  }
}

// Two dp ranks, each with its half of a batch split over dp (ints [batch_split] = 1): together they draw
// exactly the ids one rank draws for the whole batch, so their rows are numbered globally and never share
// random numbers.
TEST(World2, DpRanksNumberTheirRowsGlobally) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int64_t rows = 8, v = 300;
  for (const Knobs &k : knob_grid()) {
    PlanBuilder p(1, 2);
    const int logits = p.input("logits", F, {rows, v}, true);
    const std::vector<float> full = tied_logits(rows, v, 51);
    std::map<std::string, std::vector<uint8_t>> data;
    data["logits"].resize(full.size() * 4);
    std::memcpy(data["logits"].data(), full.data(), full.size() * 4);
    std::vector<int> sc;
    const float fvals[] = {k.temperature, 0.0f, k.top_p, 0.0f, 0.0f};
    const int64_t ivals[] = {0, k.top_k, 0, k.seed, k.step};
    const char *names[] = {"temperature", "top_k", "top_p", "seed", "step"};
    for (int i = 0; i < 5; ++i) {
      const bool is_int = i == 1 || i == 3 || i == 4;
      sc.push_back(p.input(names[i], is_int ? I64 : F, {}, false));
      std::vector<uint8_t> b(is_int ? 8 : 4);
      std::memcpy(b.data(), is_int ? static_cast<const void *>(&ivals[i]) : static_cast<const void *>(&fvals[i]),
                  b.size());
      data[names[i]] = b;
    }
    PlanBuilder::IO o{"ids", 0, {rows}, true};
    o.tensor = p.tensor("ids", I64, {rows / 2}, fb::TensorKind::output);
    p.outputs.push_back(o);
    p.op(zrt::Op::sample, {logits, sc[0], sc[1], sc[2], sc[3], sc[4]}, {o.tensor}, {1});
    std::vector<uint8_t> f = p.file();
    std::unique_ptr<zrt::Session> s;
    zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", zrt::Options{}, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    for (auto &kv : data) ASSERT_TRUE(s->bind_input(kv.first, kv.second.data(), kv.second.size()).ok()) << kv.first;
    st = s->run();
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<int64_t> got(rows, -1);
    st = s->read_output("ids", rank == 0 ? got.data() : nullptr, rows * 8, 0);
    ASSERT_TRUE(st.ok()) << st.message();
    if (rank != 0) continue;
    EXPECT_EQ(got, draw(full, rows, v, k)) << "T " << k.temperature << " k " << k.top_k << " p " << k.top_p;
  }
}
