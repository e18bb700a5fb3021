// Every CPU reference kernel against a direct float64 formula on random inputs, over f32 and the 16-bit
// storage types (whose tolerance is their rounding step).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "zk/cpu_kernels.h"

using namespace zk;
using zk::cpu::Binary;
using zk::cpu::Unary;

namespace {

/// A tensor held as its storage bytes, filled from doubles (rounded to the dtype) and read back as doubles.
struct Buf {
  DType dt;
  Dims shape;
  std::vector<uint8_t> bytes;
  Buf(DType d, Dims s) : dt(d), shape(s), bytes(static_cast<size_t>(s.numel()) * dtype_size(d) + 1, 0) {}
  int64_t n() const { return shape.numel(); }
  double get(int64_t i) const { return is_float(dt) ? load_f32(bytes.data(), dt, i) : static_cast<double>(load_i64(bytes.data(), dt, i)); }
  void set(int64_t i, double v) {
    if (is_float(dt)) store_f32(bytes.data(), dt, i, static_cast<float>(v));
    else store_i64(bytes.data(), dt, i, static_cast<int64_t>(v));
  }
  In in() const { return In{bytes.data(), dt, shape}; }
  Out out() { return Out{bytes.data(), dt, shape}; }
};

Buf rnd(DType dt, Dims s, std::mt19937 &g, double lo = -2, double hi = 2) {
  Buf b(dt, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < b.n(); ++i) b.set(i, is_float(dt) ? u(g) : std::floor(u(g)));
  return b;
}

double tol(DType dt) { return dt == DType::f32 ? 2e-5 : dt == DType::bf16 ? 1.6e-2 : 2e-3; }

/// Relative-or-absolute closeness with the tolerance of the output's storage.
void expect_close(const Buf &got, const std::vector<double> &want, double t, const char *what) {
  ASSERT_EQ(static_cast<size_t>(got.n()), want.size()) << what;
  for (int64_t i = 0; i < got.n(); ++i) {
    const double w = want[i], g = got.get(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g, w, t * std::max(1.0, std::fabs(w))) << what << " at " << i;
  }
}

/// Index of element `i` of `out` inside a broadcast operand of shape `in`.
int64_t bidx(const Dims &in, const Dims &out, int64_t i) {
  int64_t idx[kMaxRank];
  for (int k = out.rank - 1; k >= 0; --k) {
    idx[k] = i % out.d[k];
    i /= out.d[k];
  }
  int64_t r = 0;
  for (int k = 0; k < in.rank; ++k) {
    const int64_t o = idx[out.rank - in.rank + k];
    r = r * in.d[k] + (in.d[k] == 1 ? 0 : o);
  }
  return r;
}

const DType kFloats[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST(Dtype, RoundTripAndRounding) {
  // bf16 and f16 conversions round to nearest even; checked against exact binary values.
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);        // halfway 1 + 2^-8: ties to even (down)
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);        // halfway 1 + 3*2^-8: ties to even (up)
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);            // rounds to infinity
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);       // smallest subnormal
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway: ties to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1000, 1000);
  for (int i = 0; i < 10000; ++i) {
    const float x = u(g);
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(x)), x, std::fabs(x) * (1.0 / 256));
    EXPECT_NEAR(f16_to_f32(f32_to_f16(x)), x, std::fabs(x) * (1.0 / 2048) + 1e-7);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
}

TEST(Kernels, Unary) {
  const std::vector<std::pair<Unary, std::function<double(double)>>> ops = {
      {Unary::neg, [](double x) { return -x; }},
      {Unary::exp, [](double x) { return std::exp(x); }},
      {Unary::log, [](double x) { return std::log(std::fabs(x) + 0.5); }},
      {Unary::sqrt, [](double x) { return std::sqrt(std::fabs(x) + 0.5); }},
      {Unary::reciprocal, [](double x) { return 1.0 / (std::fabs(x) + 0.5); }},
      {Unary::tanh, [](double x) { return std::tanh(x); }},
      {Unary::erf, [](double x) { return std::erf(x); }},
      {Unary::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {Unary::relu, [](double x) { return x > 0 ? x : 0.0; }},
      {Unary::cos, [](double x) { return std::cos(x); }},
      {Unary::sin, [](double x) { return std::sin(x); }},
      {Unary::abs, [](double x) { return std::fabs(x); }},
      {Unary::gelu_tanh, [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }},
      {Unary::gelu_erf, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {Unary::silu, [](double x) { return x / (1 + std::exp(-x)); }},
      {Unary::copy, [](double x) { return x; }},
  };
  std::mt19937 g(2);
  for (DType dt : kFloats)
    for (const auto &op : ops) {
      Buf x = rnd(dt, {3, 5, 7}, g);
      const bool pos = op.first == Unary::log || op.first == Unary::sqrt || op.first == Unary::reciprocal;
      if (pos)
        for (int64_t i = 0; i < x.n(); ++i) x.set(i, std::fabs(x.get(i)) + 0.5);
      Buf y(dt, x.shape);
      ASSERT_TRUE(cpu::unary(op.first, x.in(), y.out()).ok());
      std::vector<double> want(x.n());
      for (int64_t i = 0; i < x.n(); ++i) {
        const double v = x.get(i);
        want[i] = pos ? (op.first == Unary::log ? std::log(v) : op.first == Unary::sqrt ? std::sqrt(v) : 1.0 / v)
                      : op.second(v);
      }
      expect_close(y, want, tol(dt) * 2, "unary");
    }
  // Integers and bools.
  Buf xi = rnd(DType::i64, {10}, g, -50, 50), yi(DType::i64, {10});
  ASSERT_TRUE(cpu::unary(Unary::abs, xi.in(), yi.out()).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(yi.get(i), std::fabs(xi.get(i)));
  Buf b(DType::bool8, {4}), nb(DType::bool8, {4});
  for (int i = 0; i < 4; ++i) b.set(i, i % 2);
  ASSERT_TRUE(cpu::unary(Unary::not_, b.in(), nb.out()).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(nb.get(i), 1 - i % 2);
  // The kernel refuses what it cannot do instead of misreading memory.
  Buf bad(DType::f32, {3, 5, 6});
  EXPECT_FALSE(cpu::unary(Unary::exp, rnd(DType::f32, {3, 5, 7}, g).in(), bad.out()).ok());
  EXPECT_FALSE(cpu::unary(Unary::exp, xi.in(), yi.out()).ok());
}

TEST(Kernels, Cast) {
  std::mt19937 g(3);
  const DType all[] = {DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::bool8};
  for (DType from : all)
    for (DType to : all) {
      Buf x = rnd(from, {17}, g, -100, 100);
      Buf y(to, {17});
      ASSERT_TRUE(cpu::cast(x.in(), y.out()).ok());
      for (int i = 0; i < 17; ++i) {
        double v = x.get(i);
        double want = to == DType::bool8 ? (v != 0) : (!is_float(to) ? std::trunc(v) : v);
        EXPECT_NEAR(y.get(i), want, is_float(to) ? tol(to) * std::max(1.0, std::fabs(want)) : 0.0)
            << dtype_name(from) << "->" << dtype_name(to);
      }
    }
}

TEST(Kernels, BinaryBroadcast) {
  const std::vector<std::pair<Binary, std::function<double(double, double)>>> ops = {
      {Binary::add, [](double a, double b) { return a + b; }},
      {Binary::sub, [](double a, double b) { return a - b; }},
      {Binary::mul, [](double a, double b) { return a * b; }},
      {Binary::div, [](double a, double b) { return a / b; }},
      {Binary::pow, [](double a, double b) { return std::pow(std::fabs(a), b); }},
      {Binary::max, [](double a, double b) { return std::max(a, b); }},
      {Binary::min, [](double a, double b) { return std::min(a, b); }},
      {Binary::equal, [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {Binary::less, [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {Binary::greater, [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {Binary::less_equal, [](double a, double b) { return a <= b ? 1.0 : 0.0; }},
      {Binary::greater_equal, [](double a, double b) { return a >= b ? 1.0 : 0.0; }},
  };
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{1}, {2, 3}}, {{5, 1, 1, 2}, {1, 3, 2}}};
  std::mt19937 g(4);
  for (DType dt : kFloats)
    for (const auto &op : ops)
      for (const auto &sh : shapes) {
        Buf a = rnd(dt, sh.first, g), b = rnd(dt, sh.second, g);
        if (op.first == Binary::div)
          for (int64_t i = 0; i < b.n(); ++i) b.set(i, b.get(i) >= 0 ? b.get(i) + 0.5 : b.get(i) - 0.5);
        if (op.first == Binary::pow)
          for (int64_t i = 0; i < a.n(); ++i) a.set(i, std::fabs(a.get(i)) + 0.1);
        if (op.first == Binary::equal) b.set(0, a.get(0));
        Dims os;
        ASSERT_TRUE(broadcast_shapes(a.shape, b.shape, &os));
        const bool cmp = op.first >= Binary::equal;
        Buf y(cmp ? DType::bool8 : dt, os);
        ASSERT_TRUE(cpu::binary(op.first, a.in(), b.in(), y.out()).ok());
        std::vector<double> want(os.numel());
        for (int64_t i = 0; i < os.numel(); ++i) want[i] = op.second(a.get(bidx(a.shape, os, i)), b.get(bidx(b.shape, os, i)));
        expect_close(y, want, cmp ? 0.0 : tol(dt) * 2, "binary");
      }
  // Integer arithmetic stays exact in int64, division by zero gives 0 rather than a trap.
  Buf a(DType::i64, {3}), b(DType::i64, {3}), y(DType::i64, {3});
  const int64_t av[] = {int64_t{1} << 60, -7, 9}, bv[] = {3, 2, 0};
  for (int i = 0; i < 3; ++i) { a.set(i, 0); b.set(i, 0); }
  std::memcpy(a.bytes.data(), av, 24);
  std::memcpy(b.bytes.data(), bv, 24);
  ASSERT_TRUE(cpu::binary(Binary::add, a.in(), b.in(), y.out()).ok());
  EXPECT_EQ(reinterpret_cast<const int64_t *>(y.bytes.data())[0], (int64_t{1} << 60) + 3);
  ASSERT_TRUE(cpu::binary(Binary::div, a.in(), b.in(), y.out()).ok());
  EXPECT_EQ(reinterpret_cast<const int64_t *>(y.bytes.data())[1], -3);
  EXPECT_EQ(reinterpret_cast<const int64_t *>(y.bytes.data())[2], 0);
  // Logical ops and where.
  Buf p(DType::bool8, {4}), q(DType::bool8, {4}), r(DType::bool8, {4});
  for (int i = 0; i < 4; ++i) { p.set(i, i & 1); q.set(i, (i >> 1) & 1); }
  ASSERT_TRUE(cpu::binary(Binary::and_, p.in(), q.in(), r.out()).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.get(i), (i & 1) && ((i >> 1) & 1));
  ASSERT_TRUE(cpu::binary(Binary::or_, p.in(), q.in(), r.out()).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.get(i), (i & 1) || ((i >> 1) & 1));
  Buf bad(DType::f32, {2, 3});
  EXPECT_FALSE(cpu::binary(Binary::add, rnd(DType::f32, {2, 4}, g).in(), rnd(DType::f32, {4}, g).in(), bad.out()).ok());
}

TEST(Kernels, WhereExpandFill) {
  std::mt19937 g(5);
  for (DType dt : kFloats) {
    Buf c(DType::bool8, {2, 1, 4}), a = rnd(dt, {3, 4}, g), b = rnd(dt, {1}, g), y(dt, {2, 3, 4});
    for (int i = 0; i < 8; ++i) c.set(i, (i * 7) % 3 == 0);
    ASSERT_TRUE(cpu::where(c.in(), a.in(), b.in(), y.out()).ok());
    std::vector<double> want(24);
    for (int64_t i = 0; i < 24; ++i)
      want[i] = c.get(bidx(c.shape, y.shape, i)) ? a.get(bidx(a.shape, y.shape, i)) : b.get(0);
    expect_close(y, want, 0, "where");
    Buf x = rnd(dt, {3, 1}, g), e(dt, {2, 3, 5});
    ASSERT_TRUE(cpu::expand(x.in(), e.out()).ok());
    for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(e.get(i), x.get(bidx(x.shape, e.shape, i)));
    Buf f(dt, {7});
    ASSERT_TRUE(cpu::fill(-1.5, f.out()).ok());
    for (int i = 0; i < 7; ++i) EXPECT_EQ(f.get(i), -1.5);
  }
}

TEST(Kernels, MatmulBatchBroadcast) {
  struct Case { Dims a, b; bool ta, tb; };
  const std::vector<Case> cases = {
      {{4, 5}, {5, 3}, false, false},     {{2, 4, 5}, {5, 3}, false, false}, {{2, 1, 4, 5}, {3, 5, 6}, false, false},
      {{2, 5, 4}, {2, 3, 5}, true, true}, {{5}, {2, 5, 3}, false, false},    {{2, 4, 5}, {5}, false, false},
      {{1, 3, 4}, {2, 1, 4, 2}, false, false}};
  std::mt19937 g(6);
  for (DType dt : kFloats)
    for (const Case &c : cases) {
      Buf a = rnd(dt, c.a, g), b = rnd(dt, c.b, g);
      // The float64 reference: normalise operands to [batch..., M, K] x [batch..., K, N] by hand.
      Dims A = c.a, B = c.b;
      const bool av = A.rank == 1, bv = B.rank == 1;
      const int64_t M = av ? 1 : (c.ta ? A.d[A.rank - 1] : A.d[A.rank - 2]);
      const int64_t K = av ? A.d[0] : (c.ta ? A.d[A.rank - 2] : A.d[A.rank - 1]);
      const int64_t N = bv ? 1 : (c.tb ? B.d[B.rank - 2] : B.d[B.rank - 1]);
      Dims ba, bb, bo;
      ba.rank = av ? 0 : A.rank - 2;
      for (int i = 0; i < ba.rank; ++i) ba.d[i] = A.d[i];
      bb.rank = bv ? 0 : B.rank - 2;
      for (int i = 0; i < bb.rank; ++i) bb.d[i] = B.d[i];
      ASSERT_TRUE(broadcast_shapes(ba, bb, &bo));
      Dims os = bo;
      if (!av) os.d[os.rank++] = M;
      if (!bv) os.d[os.rank++] = N;
      Buf y(dt, os);
      std::vector<float> scratch(cpu::matmul_scratch(a.in(), b.in(), y.out(), c.ta, c.tb) + 1);
      ASSERT_TRUE(cpu::matmul(a.in(), b.in(), y.out(), c.ta, c.tb, scratch.data()).ok());
      std::vector<double> want(os.numel());
      for (int64_t bi = 0; bi < bo.numel(); ++bi) {
        const int64_t oa = bidx(ba, bo, bi), ob = bidx(bb, bo, bi);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double x = a.get(oa * M * K + (c.ta ? k * M + m : m * K + k));
              const double w = b.get(ob * K * N + (c.tb ? n * K + k : k * N + n));
              acc += x * w;
            }
            want[(bi * M + m) * N + n] = acc;
          }
      }
      expect_close(y, want, tol(dt) * 4, "matmul");
    }
  Buf a(DType::f32, {4, 5}), b(DType::f32, {4, 3}), y(DType::f32, {4, 3});
  EXPECT_FALSE(cpu::matmul(a.in(), b.in(), y.out(), false, false, nullptr).ok());
}

TEST(Kernels, Linear) {
  std::mt19937 g(7);
  for (DType dt : kFloats)
    for (bool tw : {false, true})
      for (bool bias : {false, true}) {
        const int64_t K = 6, N = 5;
        Buf x = rnd(dt, {2, 3, K}, g), w = rnd(dt, tw ? Dims{N, K} : Dims{K, N}, g), b = rnd(dt, {N}, g), y(dt, {2, 3, N});
        const float alpha = 0.75f;
        std::vector<float> scratch(cpu::linear_scratch(x.in(), w.in(), y.out(), tw) + 1);
        ASSERT_TRUE(cpu::linear(x.in(), w.in(), bias ? b.in() : In{}, y.out(), tw, alpha, scratch.data()).ok());
        std::vector<double> want(6 * N);
        for (int64_t m = 0; m < 6; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += x.get(m * K + k) * w.get(tw ? n * K + k : k * N + n);
            want[m * N + n] = alpha * acc + (bias ? b.get(n) : 0.0);
          }
        expect_close(y, want, tol(dt) * 4, "linear");
        // linear_residual (plan 2.13): the same product plus a residual of the output's shape, rounded once.
        Buf r = rnd(dt, {2, 3, N}, g), yr(dt, {2, 3, N});
        ASSERT_TRUE(cpu::linear_residual(x.in(), w.in(), bias ? b.in() : In{}, r.in(), yr.out(), tw, alpha,
                                         scratch.data())
                        .ok());
        for (int64_t i = 0; i < 6 * N; ++i) want[i] += r.get(i);
        expect_close(yr, want, tol(dt) * 4, "linear_residual");
        Buf bad(dt, {6, N});
        EXPECT_FALSE(cpu::linear_residual(x.in(), w.in(), In{}, bad.in(), yr.out(), tw, alpha, scratch.data()).ok());
      }
}

// Plan 2.9's fused few-row products against the float64 formula: linear_multi is each weight's product;
// linear_gated is act(alpha x Wg) * (alpha x Wu) (silu, gelu_tanh, gelu_erf).
TEST(Kernels, LinearMultiAndGated) {
  std::mt19937 g(17);
  for (DType dt : kFloats)
    for (bool tw : {false, true}) {
      const int64_t M = 3, K = 7;
      const int64_t Ns[3] = {5, 2, 4};
      Buf x = rnd(dt, {M, 1, K}, g);
      std::vector<Buf> w, y;
      for (int64_t N : Ns) {
        w.push_back(rnd(dt, tw ? Dims{N, K} : Dims{K, N}, g));
        y.push_back(Buf(dt, {M, 1, N}));
      }
      auto product = [&](const Buf &wt, int64_t N, int64_t m, int64_t n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += x.get(m * K + k) * wt.get(tw ? n * K + k : k * N + n);
        return 0.5 * acc;
      };
      In win[3];
      Out yout[3];
      size_t need = 0;
      for (int i = 0; i < 3; ++i) {
        win[i] = w[i].in();
        yout[i] = y[i].out();
        need = std::max(need, cpu::linear_scratch(x.in(), w[i].in(), y[i].out(), tw));
      }
      std::vector<float> scratch(need + 1);
      ASSERT_TRUE(cpu::linear_multi(x.in(), win, yout, 3, tw, 0.5f, scratch.data()).ok());
      for (int i = 0; i < 3; ++i) {
        std::vector<double> want(M * Ns[i]);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < Ns[i]; ++n) want[m * Ns[i] + n] = product(w[i], Ns[i], m, n);
        expect_close(y[i], want, tol(dt) * 4, "linear_multi");
      }
      const int64_t N = 5;
      Buf wu = rnd(dt, tw ? Dims{N, K} : Dims{K, N}, g), h(dt, {M, 1, N});
      for (cpu::Unary act : {cpu::Unary::silu, cpu::Unary::gelu_tanh, cpu::Unary::gelu_erf}) {
        std::vector<float> gs(cpu::linear_gated_scratch(x.in(), w[0].in(), h.out(), tw) + 1);
        ASSERT_TRUE(cpu::linear_gated(act, x.in(), w[0].in(), wu.in(), h.out(), tw, 0.5f, gs.data()).ok());
        std::vector<double> want(M * N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const double a = product(w[0], N, m, n), u = product(wu, N, m, n);
            const double f = act == cpu::Unary::silu        ? a / (1 + std::exp(-a))
                             : act == cpu::Unary::gelu_tanh ? 0.5 * a * (1 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
                                                            : 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
            want[m * N + n] = f * u;
          }
        expect_close(h, want, tol(dt) * 8, "linear_gated");
      }
      EXPECT_FALSE(cpu::linear_gated(cpu::Unary::tanh, x.in(), w[0].in(), wu.in(), h.out(), tw, 0.5f, scratch.data()).ok());
    }
}

TEST(Kernels, SoftmaxAndNorms) {
  std::mt19937 g(8);
  for (DType dt : kFloats) {
    Buf x = rnd(dt, {2, 5, 3}, g, -4, 4);
    for (int axis : {0, 1, 2, -1}) {
      Buf y(dt, x.shape);
      ASSERT_TRUE(cpu::softmax(x.in(), y.out(), axis).ok());
      const int ax = axis < 0 ? axis + 3 : axis;
      std::vector<double> want(x.n());
      for (int64_t i = 0; i < x.n(); ++i) {
        int64_t idx[3] = {i / 15, (i / 3) % 5, i % 3};
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < x.shape.d[ax]; ++j) {
          int64_t k[3] = {idx[0], idx[1], idx[2]};
          k[ax] = j;
          mx = std::max(mx, x.get(k[0] * 15 + k[1] * 3 + k[2]));
        }
        for (int64_t j = 0; j < x.shape.d[ax]; ++j) {
          int64_t k[3] = {idx[0], idx[1], idx[2]};
          k[ax] = j;
          sum += std::exp(x.get(k[0] * 15 + k[1] * 3 + k[2]) - mx);
        }
        want[i] = std::exp(x.get(i) - mx) / sum;
      }
      expect_close(y, want, tol(dt) * 2, "softmax");
    }
    // layer_norm over the trailing dims from axis 1 (15 elements) and from axis 2.
    for (int axis : {1, 2}) {
      const int64_t n = axis == 1 ? 15 : 3;
      Buf sc = rnd(dt, axis == 1 ? Dims{5, 3} : Dims{3}, g), bi = rnd(dt, sc.shape, g), y(dt, x.shape);
      ASSERT_TRUE(cpu::layer_norm(x.in(), sc.in(), bi.in(), y.out(), axis, 1e-5f).ok());
      std::vector<double> want(x.n());
      for (int64_t r = 0; r < x.n() / n; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < n; ++j) m += x.get(r * n + j);
        m /= n;
        for (int64_t j = 0; j < n; ++j) v += (x.get(r * n + j) - m) * (x.get(r * n + j) - m);
        v /= n;
        for (int64_t j = 0; j < n; ++j) want[r * n + j] = (x.get(r * n + j) - m) / std::sqrt(v + 1e-5) * sc.get(j) + bi.get(j);
      }
      expect_close(y, want, tol(dt) * 4, "layer_norm");
    }
    Buf sc = rnd(dt, {3}, g), y(dt, x.shape);
    ASSERT_TRUE(cpu::rms_norm(x.in(), sc.in(), y.out(), 1e-6f).ok());
    std::vector<double> want(x.n());
    for (int64_t r = 0; r < 10; ++r) {
      double ss = 0;
      for (int j = 0; j < 3; ++j) ss += x.get(r * 3 + j) * x.get(r * 3 + j);
      for (int j = 0; j < 3; ++j) want[r * 3 + j] = x.get(r * 3 + j) / std::sqrt(ss / 3 + 1e-6) * sc.get(j);
    }
    expect_close(y, want, tol(dt) * 4, "rms_norm");
  }
}

TEST(Kernels, Reductions) {
  std::mt19937 g(9);
  for (DType dt : kFloats)
    for (auto op : {cpu::Reduce::sum, cpu::Reduce::mean, cpu::Reduce::max})
      for (bool keep : {false, true}) {
        Buf x = rnd(dt, {3, 4, 5}, g);
        const int64_t axes[] = {0, 2};
        Buf y(dt, keep ? Dims{1, 4, 1} : Dims{4});
        ASSERT_TRUE(cpu::reduce(op, x.in(), y.out(), axes, 2, keep).ok());
        std::vector<double> want(4);
        for (int j = 0; j < 4; ++j) {
          double acc = op == cpu::Reduce::max ? -1e300 : 0;
          for (int i = 0; i < 3; ++i)
            for (int k = 0; k < 5; ++k) {
              const double v = x.get((i * 4 + j) * 5 + k);
              acc = op == cpu::Reduce::max ? std::max(acc, v) : acc + v;
            }
          want[j] = op == cpu::Reduce::mean ? acc / 15 : acc;
        }
        expect_close(y, want, tol(dt) * 2, "reduce");
      }
  Buf x(DType::f32, {3, 4}), y(DType::f32, {3});
  const int64_t bad_axis[] = {2};
  EXPECT_FALSE(cpu::reduce(cpu::Reduce::sum, x.in(), y.out(), bad_axis, 1, false).ok());
}

TEST(Kernels, DataMovement) {
  std::mt19937 g(10);
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::bool8}) {
    Buf x = rnd(dt, {2, 3, 4}, g, -9, 9);
    // transpose
    const int64_t perm[] = {2, 0, 1};
    Buf t(dt, {4, 2, 3});
    ASSERT_TRUE(cpu::transpose(x.in(), t.out(), perm).ok());
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 3; ++c) EXPECT_EQ(t.get((a * 2 + b) * 3 + c), x.get((b * 3 + c) * 4 + a));
    // concat along 1
    Buf x2 = rnd(dt, {2, 1, 4}, g, -9, 9), cc(dt, {2, 4, 4});
    In parts[] = {x.in(), x2.in()};
    ASSERT_TRUE(cpu::concat(parts, 2, cc.out(), 1).ok());
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 4; ++b)
        for (int c = 0; c < 4; ++c)
          EXPECT_EQ(cc.get((a * 4 + b) * 4 + c), b < 3 ? x.get((a * 3 + b) * 4 + c) : x2.get(a * 4 + c));
    // slice with steps, one negative
    const int64_t starts[] = {1, 0, 3}, steps[] = {1, 2, -2};
    Buf s(dt, {1, 2, 2});
    ASSERT_TRUE(cpu::slice(x.in(), s.out(), starts, steps).ok());
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) EXPECT_EQ(s.get(b * 2 + c), x.get((1 * 3 + 2 * b) * 4 + (3 - 2 * c)));
    const int64_t bad_starts[] = {1, 0, 0};
    EXPECT_FALSE(cpu::slice(x.in(), s.out(), bad_starts, steps).ok());
    // gather along 1 with a negative index
    Buf idx(DType::i64, {2, 2});
    idx.set(0, 2); idx.set(1, -1); idx.set(2, 0); idx.set(3, 1);
    Buf ga(dt, {2, 2, 2, 4});
    ASSERT_TRUE(cpu::gather(x.in(), idx.in(), ga.out(), 1).ok());
    const int ids[] = {2, 2, 0, 1};
    for (int a = 0; a < 2; ++a)
      for (int j = 0; j < 4; ++j)
        for (int c = 0; c < 4; ++c) EXPECT_EQ(ga.get((a * 4 + j) * 4 + c), x.get((a * 3 + ids[j]) * 4 + c));
    idx.set(0, 3);
    EXPECT_FALSE(cpu::gather(x.in(), idx.in(), ga.out(), 1).ok());
  }
}

TEST(Kernels, EmbeddingVocabParallel) {
  std::mt19937 g(11);
  for (DType dt : kFloats) {
    // The full table has 10 rows; this rank holds rows [5, 10).
    Buf full = rnd(dt, {10, 4}, g), local(dt, {5, 4});
    std::memcpy(local.bytes.data(), full.bytes.data() + 5 * 4 * dtype_size(dt), 5 * 4 * dtype_size(dt));
    Buf ids(DType::i64, {2, 3});
    const int v[] = {0, 5, 9, 4, 7, 12};
    for (int i = 0; i < 6; ++i) ids.set(i, v[i]);
    Buf y(dt, {2, 3, 4});
    ASSERT_TRUE(cpu::embedding(local.in(), ids.in(), y.out(), 5).ok());
    for (int i = 0; i < 6; ++i)
      for (int d = 0; d < 4; ++d) EXPECT_EQ(y.get(i * 4 + d), v[i] >= 5 && v[i] < 10 ? full.get(v[i] * 4 + d) : 0.0);
  }
}

TEST(Kernels, AttentionCausalGqaMask) {
  std::mt19937 g(12);
  for (DType dt : kFloats)
    for (bool causal : {false, true})
      for (bool masked : {false, true}) {
        const int64_t B = 2, Hq = 4, Hkv = 2, S = 3, T = 5, D = 4;
        Buf q = rnd(dt, {B, Hq, S, D}, g), k = rnd(dt, {B, Hkv, T, D}, g), v = rnd(dt, {B, Hkv, T, D}, g);
        Buf m = rnd(dt, {B, 1, S, T}, g);
        Buf y(dt, {B, Hq, S, D});
        const float scale = 0.5f;
        std::vector<float> scratch(cpu::attention_scratch(q.in(), k.in()));
        ASSERT_TRUE(cpu::attention(q.in(), k.in(), v.in(), masked ? m.in() : In{}, y.out(), causal, scale, scratch.data()).ok());
        std::vector<double> want(y.n());
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < S; ++i) {
              const int64_t kh = h / (Hq / Hkv);
              std::vector<double> s(T);
              double mx = -1e300;
              for (int64_t j = 0; j < T; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < D; ++d) dot += q.get(((b * Hq + h) * S + i) * D + d) * k.get(((b * Hkv + kh) * T + j) * D + d);
                s[j] = dot * scale + (masked ? m.get((b * S + i) * T + j) : 0.0);
                if (causal && j > i + (T - S)) s[j] = -INFINITY;
                mx = std::max(mx, s[j]);
              }
              double sum = 0;
              for (double &e : s) sum += (e = std::exp(e - mx));
              for (int64_t d = 0; d < D; ++d) {
                double acc = 0;
                for (int64_t j = 0; j < T; ++j) acc += s[j] / sum * v.get(((b * Hkv + kh) * T + j) * D + d);
                want[((b * Hq + h) * S + i) * D + d] = acc;
              }
            }
        expect_close(y, want, tol(dt) * 4, "attention");
      }
  Buf q(DType::f32, {1, 3, 2, 4}), k(DType::f32, {1, 2, 2, 4}), y(DType::f32, {1, 3, 2, 4});
  EXPECT_FALSE(cpu::attention(q.in(), k.in(), k.in(), In{}, y.out(), false, 1.0f, nullptr).ok());
}

TEST(Kernels, Rotary) {
  // Against the float64 formula x * cos + rotate_half(x) * sin (and its transpose), with tables broadcast over
  // leading dims as llama's are ([1, 1, S, D] against [B, H, S, D]), tables in another dtype than x, and
  // out written over x.
  std::mt19937 g(21);
  struct Case { Dims x, t; };
  for (const Case &c : {Case{Dims{2, 3, 4, 8}, Dims{1, 1, 4, 8}}, Case{Dims{3, 6}, Dims{6}}, Case{Dims{2, 2, 1, 4}, Dims{2, 1, 1, 4}}})
    for (DType dt : kFloats)
      for (DType tt : {dt, DType::f32})
        for (bool inverse : {false, true}) {
          Buf x = rnd(dt, c.x, g), co = rnd(tt, c.t, g, -1, 1), si = rnd(tt, c.t, g, -1, 1), y(dt, c.x);
          ASSERT_TRUE(cpu::rotary(x.in(), co.in(), si.in(), y.out(), inverse).ok());
          const int64_t d = c.x[c.x.rank - 1], h = d / 2;
          std::vector<double> want(x.n());
          for (int64_t i = 0; i < x.n(); ++i) {
            const int64_t col = i % d, partner = col < h ? i + h : i - h;
            const double cs = co.get(bidx(c.t, c.x, i));
            // rotate_half(x)[col] = -x[col + h] for the low half and x[col - h] for the high half; the transpose
            // takes sin at the partner's index and the opposite sign.
            const double sgn = (col < h) != inverse ? -1.0 : 1.0;
            const double sn = si.get(bidx(c.t, c.x, inverse ? partner : i));
            want[i] = x.get(i) * cs + sgn * x.get(partner) * sn;
          }
          expect_close(y, want, tol(dt) * 2, "rotary");
          cpu::rotary(x.in(), co.in(), si.in(), x.out(), inverse);
          for (int64_t i = 0; i < x.n(); ++i) ASSERT_EQ(x.get(i), y.get(i)) << "rotary in place differs at " << i;
        }
  // A rotation table (cos and sin repeated over the halves): the inverse undoes the forward map.
  Buf x = rnd(DType::f32, Dims{2, 8}, g), co(DType::f32, Dims{8}), si(DType::f32, Dims{8}), y(DType::f32, x.shape),
      back(DType::f32, x.shape);
  for (int i = 0; i < 4; ++i) {
    co.set(i, std::cos(0.3 * (i + 1)));
    co.set(i + 4, std::cos(0.3 * (i + 1)));
    si.set(i, std::sin(0.3 * (i + 1)));
    si.set(i + 4, std::sin(0.3 * (i + 1)));
  }
  ASSERT_TRUE(cpu::rotary(x.in(), co.in(), si.in(), y.out(), false).ok());
  ASSERT_TRUE(cpu::rotary(y.in(), co.in(), si.in(), back.out(), true).ok());
  for (int64_t i = 0; i < x.n(); ++i) ASSERT_NEAR(back.get(i), x.get(i), 1e-6) << i;
  // Refusals: odd last dim, tables that broadcast along it, tables of two dtypes.
  Buf odd(DType::f32, Dims{2, 5}), c5(DType::f32, Dims{5}), c1(DType::f32, Dims{2, 1}), cb(DType::bf16, Dims{8});
  EXPECT_FALSE(cpu::rotary(odd.in(), c5.in(), c5.in(), odd.out(), false).ok());
  EXPECT_FALSE(cpu::rotary(x.in(), c1.in(), c1.in(), y.out(), false).ok());
  EXPECT_FALSE(cpu::rotary(x.in(), co.in(), cb.in(), y.out(), false).ok());
}

TEST(Kernels, RotarySequenceMajor) {
  // seq_major (plan 2.10): x [B, S, H, D] with tables that broadcast to the head-major view [B, H, S, D], so a
  // row (b, s, h) takes the table row of position s. Against the float64 formula written with explicit
  // (b, s, h, i) indices, for llama's shared tables [1, 1, S, D] and per-sequence ones [B, 1, S, D].
  std::mt19937 g(22);
  const int64_t B = 2, S = 5, H = 3, D = 8, h = D / 2;
  const Dims xs{B, S, H, D};
  for (const Dims &t : {Dims{1, 1, S, D}, Dims{B, 1, S, D}})
    for (DType dt : kFloats)
      for (bool inverse : {false, true}) {
        Buf x = rnd(dt, xs, g), co = rnd(DType::f32, t, g, -1, 1), si = rnd(DType::f32, t, g, -1, 1), y(dt, xs);
        ASSERT_TRUE(cpu::rotary(x.in(), co.in(), si.in(), y.out(), inverse, /*seq_major=*/true).ok());
        std::vector<double> want(x.n());
        for (int64_t b = 0; b < B; ++b)
          for (int64_t s = 0; s < S; ++s)
            for (int64_t hd = 0; hd < H; ++hd)
              for (int64_t i = 0; i < D; ++i) {
                const int64_t row = ((b * S + s) * H + hd) * D, p = i < h ? i + h : i - h;
                const int64_t trow = ((t[0] == 1 ? 0 : b) * S + s) * D;
                const double sgn = (i < h) != inverse ? -1.0 : 1.0;
                want[row + i] = x.get(row + i) * co.get(trow + i) + sgn * x.get(row + p) * si.get(trow + (inverse ? p : i));
              }
        expect_close(y, want, tol(dt) * 2, "rotary seq_major");
      }
  // Refusals: seq_major on a rank-3 x, and tables that fit x's own shape but not its head-major view.
  Buf x3(DType::f32, Dims{S, H, D}), c3(DType::f32, Dims{D}), x4(DType::f32, Dims{1, 4, 2, D}),
      fit(DType::f32, Dims{1, 4, 1, D});
  EXPECT_FALSE(cpu::rotary(x3.in(), c3.in(), c3.in(), x3.out(), false, true).ok());
  EXPECT_TRUE(cpu::rotary(x4.in(), fit.in(), fit.in(), x4.out(), false, false).ok());
  EXPECT_FALSE(cpu::rotary(x4.in(), fit.in(), fit.in(), x4.out(), false, true).ok());
}

// Sequence-major operands ([B, S, H, D], the seq_major bits) give the head-major result: every one of the 16
// layout combinations against the head-major kernel on the same values, each operand swapped between the
// two layouts by the loops below (not by a kernel).
TEST(Kernels, AttentionSequenceMajor) {
  std::mt19937 g(13);
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 3, T = 5, D = 4;
  // x [B, A, C, D] -> [B, C, A, D].
  auto swap12 = [](const Buf &x) {
    const int64_t b = x.shape.d[0], a = x.shape.d[1], c = x.shape.d[2], d = x.shape.d[3];
    Buf y(x.dt, {b, c, a, d});
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < a; ++j)
        for (int64_t l = 0; l < c; ++l)
          for (int64_t e = 0; e < d; ++e) y.set(((i * c + l) * a + j) * d + e, x.get(((i * a + j) * c + l) * d + e));
    return y;
  };
  for (bool causal : {false, true}) {
    Buf q = rnd(DType::f32, {B, Hq, S, D}, g), k = rnd(DType::f32, {B, Hkv, T, D}, g), v = rnd(DType::f32, {B, Hkv, T, D}, g);
    Buf m = rnd(DType::f32, {B, 1, S, T}, g);
    Buf ref(DType::f32, {B, Hq, S, D}), ref_lse(DType::f32, {B, Hq, S});
    std::vector<float> scratch(cpu::attention_scratch(q.in(), k.in()));
    ASSERT_TRUE(cpu::attention(q.in(), k.in(), v.in(), m.in(), ref.out(), ref_lse.out(), causal, 0.5f, scratch.data()).ok());
    for (int bits = 0; bits < 16; ++bits) {
      SCOPED_TRACE("seq_major " + std::to_string(bits) + (causal ? " causal" : ""));
      const Buf qs = bits & cpu::kAttnSeqMajorQ ? swap12(q) : q, ks = bits & cpu::kAttnSeqMajorK ? swap12(k) : k;
      const Buf vs = bits & cpu::kAttnSeqMajorV ? swap12(v) : v;
      Buf y(DType::f32, bits & cpu::kAttnSeqMajorOut ? Dims{B, S, Hq, D} : Dims{B, Hq, S, D});
      Buf lse(DType::f32, {B, Hq, S});
      std::vector<float> sc(cpu::attention_scratch(qs.in(), ks.in()));
      ASSERT_TRUE(cpu::attention(qs.in(), ks.in(), vs.in(), m.in(), y.out(), lse.out(), causal, 0.5f, bits, sc.data()).ok());
      const Buf back = bits & cpu::kAttnSeqMajorOut ? swap12(y) : y;
      for (int64_t i = 0; i < ref.n(); ++i) EXPECT_EQ(back.get(i), ref.get(i)) << "element " << i;
      for (int64_t i = 0; i < lse.n(); ++i) EXPECT_EQ(lse.get(i), ref_lse.get(i)) << "lse " << i;
    }
  }
  // A sequence-major k whose heads do not divide q's is refused, as head-major is.
  Buf q(DType::f32, {1, 2, 3, 4}), k(DType::f32, {1, 2, 3, 4}), y(DType::f32, {1, 2, 3, 4});
  std::vector<float> sc(8);
  EXPECT_FALSE(cpu::attention(q.in(), k.in(), k.in(), In{}, y.out(), Out{}, false, 1.0f, cpu::kAttnSeqMajorK, sc.data()).ok());
  EXPECT_FALSE(cpu::attention(q.in(), q.in(), q.in(), In{}, y.out(), Out{}, false, 1.0f, 16, sc.data()).ok());
}

// Packed operands (plan 2.8, cpu::AttnPacked): q, k and v read out of one [B, S, W] tensor at element
// offsets, as the plan's folded q/k/v split leaves them, give bitwise the result of the same values passed as
// separate sequence-major tensors. The packing is written by the loops below (not by a kernel), with padding
// columns before q and between the parts so that no offset is 0 and rows are wider than the parts.
TEST(Kernels, AttentionPackedOperands) {
  std::mt19937 g(17);
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 5, D = 4;
  const int64_t qoff = 3, koff = qoff + Hq * D + 1, voff = koff + Hkv * D, W = voff + Hkv * D + 2;
  for (bool causal : {false, true}) {
    // Sequence-major [B, S, H, D] operands, and the one tensor holding all three.
    Buf q = rnd(DType::f32, {B, S, Hq, D}, g), k = rnd(DType::f32, {B, S, Hkv, D}, g),
        v = rnd(DType::f32, {B, S, Hkv, D}, g);
    Buf packed = rnd(DType::f32, {B, S, W}, g);
    auto pack = [&](const Buf& x, int64_t off) {
      const int64_t hd = x.shape.d[2] * D;
      for (int64_t r = 0; r < B * S; ++r)
        for (int64_t e = 0; e < hd; ++e) packed.set(r * W + off + e, x.get(r * hd + e));
    };
    pack(q, qoff);
    pack(k, koff);
    pack(v, voff);
    Buf m = rnd(DType::f32, {B, 1, S, S}, g);
    const int bits = cpu::kAttnSeqMajorAll;
    Buf ref(DType::f32, {B, S, Hq, D}), ref_lse(DType::f32, {B, Hq, S});
    std::vector<float> scratch(cpu::attention_scratch(q.in(), k.in()));
    ASSERT_TRUE(cpu::attention(q.in(), k.in(), v.in(), m.in(), ref.out(), ref_lse.out(), causal, 0.5f, bits,
                               scratch.data())
                    .ok());
    const cpu::AttnPacked all[3] = {{qoff, W, Hq}, {koff, W, Hkv}, {voff, W, Hkv}};
    // Every subset of q, k, v packed, the others passed as their own tensors.
    for (int which = 1; which < 8; ++which) {
      SCOPED_TRACE("packed " + std::to_string(which) + (causal ? " causal" : ""));
      cpu::AttnPacked pk[3];
      const Buf* ops[3] = {&q, &k, &v};
      In ins[3];
      for (int i = 0; i < 3; ++i) {
        if (which & (1 << i)) pk[i] = all[i];
        ins[i] = which & (1 << i) ? packed.in() : ops[i]->in();
      }
      Buf y(DType::f32, {B, S, Hq, D}), lse(DType::f32, {B, Hq, S});
      std::vector<float> sc(cpu::attention_scratch(ins[0], ins[1]));
      ASSERT_TRUE(cpu::attention(ins[0], ins[1], ins[2], m.in(), y.out(), lse.out(), causal, 0.5f, bits, pk,
                                 sc.data())
                      .ok());
      for (int64_t i = 0; i < ref.n(); ++i) EXPECT_EQ(y.get(i), ref.get(i)) << "element " << i;
      for (int64_t i = 0; i < lse.n(); ++i) EXPECT_EQ(lse.get(i), ref_lse.get(i)) << "lse " << i;
    }
  }
  // Refusals: heads that run past the row, a row stride other than the tensor's last dim, a packed operand
  // that is not sequence-major, and a negative offset.
  Buf x(DType::f32, {1, 3, 16}), y(DType::f32, {1, 3, 2, 4});
  std::vector<float> sc(8);
  auto refused = [&](cpu::AttnPacked p, int bits) {
    const cpu::AttnPacked pk[3] = {p, {0, 16, 2}, {8, 16, 2}};
    return !cpu::attention(x.in(), x.in(), x.in(), In{}, y.out(), Out{}, false, 1.0f, bits, pk, sc.data())
                .ok();
  };
  EXPECT_FALSE(refused({4, 16, 2}, cpu::kAttnSeqMajorAll));
  EXPECT_TRUE(refused({12, 16, 2}, cpu::kAttnSeqMajorAll));
  EXPECT_TRUE(refused({0, 8, 2}, cpu::kAttnSeqMajorAll));
  EXPECT_TRUE(refused({0, 16, 2}, cpu::kAttnSeqMajorK | cpu::kAttnSeqMajorV));
  EXPECT_TRUE(refused({-1, 16, 2}, cpu::kAttnSeqMajorAll));
}
