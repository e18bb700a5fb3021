// The run-time ops of decoder exports (ONNX semantics) against direct numpy-style formulas written here
// with explicit multi-indices, on several shapes, dtypes and attribute combinations, plus the refusals.
#include <cmath>
#include <cstdint>

#include "kernel_test_util.h"

using namespace zk;
using namespace ktest;

namespace {

/// The multi-index of flat element i of shape s.
std::vector<int64_t> unravel(int64_t i, const Dims &s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    idx[d] = i % s.d[d];
    i /= s.d[d];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t> &idx, const Dims &s) {
  int64_t r = 0;
  for (int d = 0; d < s.rank; ++d) r = r * s.d[d] + idx[d];
  return r;
}

}  // namespace

TEST(RuntimeOps, Range) {
  Buf s(DType::i64, {}), d(DType::i64, {}), out(DType::i64, {5});
  s.set(0, 7);
  d.set(0, -3);
  ASSERT_TRUE(cpu::range(s.in(), d.in(), out.out()).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out.get(i), 7 - 3 * i);
  Buf fs(DType::f32, {}), fd(DType::f32, {}), fo(DType::f32, {1000});
  fs.set(0, 0.1);
  fd.set(0, 0.3);
  ASSERT_TRUE(cpu::range(fs.in(), fd.in(), fo.out()).ok());
  // Each element is start + i * delta rounded once (numpy.arange's definition), not a running sum.
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(fo.get(i), static_cast<double>(static_cast<float>(static_cast<double>(0.1f) + i * static_cast<double>(0.3f))));
  Buf bad(DType::i64, {2, 2});
  EXPECT_FALSE(cpu::range(s.in(), d.in(), bad.out()).ok());
}

TEST(RuntimeOps, CumSum) {
  std::mt19937 g(31);
  const Dims sh{3, 4, 5};
  for (DType dt : {DType::f32, DType::i64, DType::bf16})
    for (int axis : {0, 1, -1})
      for (bool excl : {false, true})
        for (bool rev : {false, true}) {
          Buf x = rnd(dt, sh, g, -5, 5), out(dt, sh);
          ASSERT_TRUE(cpu::cumsum(x.in(), out.out(), axis, excl, rev).ok());
          const int ax = axis < 0 ? axis + 3 : axis;
          std::vector<double> want(static_cast<size_t>(x.n()));
          for (int64_t i = 0; i < x.n(); ++i) {
            auto idx = unravel(i, sh);
            double acc = 0;
            for (int64_t j = 0; j < sh.d[ax]; ++j) {
              const bool take = rev ? (excl ? j > idx[ax] : j >= idx[ax]) : (excl ? j < idx[ax] : j <= idx[ax]);
              if (!take) continue;
              auto o = idx;
              o[ax] = j;
              acc += x.get(ravel(o, sh));
            }
            want[i] = acc;
          }
          expect_close(out.values(), want, dt == DType::bf16 ? 1.6e-2 : 1e-6, "cumsum");
        }
  Buf x(DType::f32, {3}), out(DType::f32, {3});
  EXPECT_FALSE(cpu::cumsum(x.in(), out.out(), 1, false, false).ok());
}

TEST(RuntimeOps, GatherND) {
  std::mt19937 g(32);
  // batch_dims 0: data [4, 3, 2], indices [2, 2, 2] pick [2] slices; indices [5, 3] pick elements.
  Buf data = rnd(DType::f32, {4, 3, 2}, g);
  {
    Buf idx(DType::i64, {2, 2, 2}), out(DType::f32, {2, 2, 2});
    const int64_t v[] = {0, 1, 3, -1, 2, 0, -4, 2};
    for (int i = 0; i < 8; ++i) idx.set(i, static_cast<double>(v[i]));
    ASSERT_TRUE(cpu::gather_nd(data.in(), idx.in(), out.out(), 0).ok());
    for (int t = 0; t < 4; ++t) {
      const int64_t a = (v[2 * t] + 4) % 4, b = (v[2 * t + 1] + 3) % 3;
      for (int c = 0; c < 2; ++c) EXPECT_EQ(out.get(t * 2 + c), data.get((a * 3 + b) * 2 + c)) << t;
    }
  }
  {
    Buf idx(DType::i32, {5, 3}), out(DType::f32, {5});
    const int64_t v[] = {0, 0, 0, 3, 2, 1, 1, 1, 0, -1, -1, -1, 2, 0, 1};
    for (int i = 0; i < 15; ++i) idx.set(i, static_cast<double>(v[i]));
    ASSERT_TRUE(cpu::gather_nd(data.in(), idx.in(), out.out(), 0).ok());
    for (int t = 0; t < 5; ++t) {
      const int64_t a = (v[3 * t] + 4) % 4, b = (v[3 * t + 1] + 3) % 3, c = (v[3 * t + 2] + 2) % 2;
      EXPECT_EQ(out.get(t), data.get((a * 3 + b) * 2 + c)) << t;
    }
  }
  {
    // batch_dims 1: data [4, 3, 2], indices [4, 2, 1]: out[b, n, :] = data[b, idx[b, n], :].
    Buf idx(DType::i64, {4, 2, 1}), out(DType::f32, {4, 2, 2});
    for (int i = 0; i < 8; ++i) idx.set(i, (i * 7) % 3);
    ASSERT_TRUE(cpu::gather_nd(data.in(), idx.in(), out.out(), 1).ok());
    for (int b = 0; b < 4; ++b)
      for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 2; ++c)
          EXPECT_EQ(out.get((b * 2 + n) * 2 + c), data.get((b * 3 + static_cast<int64_t>(idx.get(b * 2 + n))) * 2 + c));
  }
  Buf idx(DType::i64, {1, 2}), out(DType::f32, {1, 2});
  idx.set(0, 4);
  EXPECT_FALSE(cpu::gather_nd(data.in(), idx.in(), out.out(), 0).ok());  // index out of range
  Buf idx3(DType::i64, {1, 4}), out3(DType::f32, {1});
  EXPECT_FALSE(cpu::gather_nd(data.in(), idx3.in(), out3.out(), 0).ok());  // tuple longer than the rank
}

TEST(RuntimeOps, GatherElements) {
  std::mt19937 g(33);
  const Dims ds{3, 4, 2};
  Buf data = rnd(DType::bf16, ds, g);
  for (int axis : {0, 1, -1}) {
    const int ax = axis < 0 ? axis + 3 : axis;
    Dims is{3, 3, 2};  // smaller than data off the axis is allowed
    is.d[ax] = 5;
    Buf idx(DType::i64, is), out(DType::bf16, is);
    std::uniform_int_distribution<int64_t> u(-ds.d[ax], ds.d[ax] - 1);
    for (int64_t i = 0; i < idx.n(); ++i) idx.set(i, static_cast<double>(u(g)));
    ASSERT_TRUE(cpu::gather_elements(data.in(), idx.in(), out.out(), axis).ok());
    for (int64_t i = 0; i < idx.n(); ++i) {
      auto m = unravel(i, is);
      int64_t id = static_cast<int64_t>(idx.get(i));
      m[ax] = id < 0 ? id + ds.d[ax] : id;
      EXPECT_EQ(out.get(i), data.get(ravel(m, ds))) << i;
    }
  }
  Buf idx(DType::i64, {3, 4, 2}), out(DType::bf16, {3, 4, 2});
  idx.set(5, 7);
  EXPECT_FALSE(cpu::gather_elements(data.in(), idx.in(), out.out(), 0).ok());
}

TEST(RuntimeOps, Mod) {
  // Integer mod takes the divisor's sign (Python's %), fmod the dividend's (C's fmod); both broadcast.
  Buf a(DType::i64, {2, 4}), b(DType::i64, {4}), out(DType::i64, {2, 4}), fout(DType::i64, {2, 4});
  const int64_t av[] = {7, -7, 7, -7, 0, 5, -9, 123456789012};
  const int64_t bv[] = {3, 3, -3, -3};
  for (int i = 0; i < 8; ++i) a.set(i, static_cast<double>(av[i]));
  for (int i = 0; i < 4; ++i) b.set(i, static_cast<double>(bv[i]));
  ASSERT_TRUE(cpu::mod(a.in(), b.in(), out.out(), false).ok());
  ASSERT_TRUE(cpu::mod(a.in(), b.in(), fout.out(), true).ok());
  for (int i = 0; i < 8; ++i) {
    const int64_t x = av[i], y = bv[i % 4];
    const int64_t py = ((x % y) + y) % y;  // Python's x % y
    EXPECT_EQ(static_cast<int64_t>(out.get(i)), py) << i;
    EXPECT_EQ(static_cast<int64_t>(fout.get(i)), x % y) << i;
  }
  std::mt19937 g(34);
  Buf fa = rnd(DType::f32, {3, 5}, g, -10, 10), fb = rnd(DType::f32, {3, 1}, g, 0.5, 3), fo(DType::f32, {3, 5});
  ASSERT_TRUE(cpu::mod(fa.in(), fb.in(), fo.out(), true).ok());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(fo.get(i), std::fmod(static_cast<float>(fa.get(i)), static_cast<float>(fb.get(i / 5))));
  EXPECT_FALSE(cpu::mod(fa.in(), fb.in(), fo.out(), false).ok());  // float needs fmod = 1
  Buf z(DType::i64, {4}), zo(DType::i64, {2, 4});
  ASSERT_TRUE(cpu::mod(a.in(), z.in(), zo.out(), false).ok());  // mod 0 is defined as 0, no SIGFPE
  for (int i = 0; i < 8; ++i) EXPECT_EQ(zo.get(i), 0);
}

TEST(RuntimeOps, Floor) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Buf x(dt, {6}), out(dt, {6});
    const double v[] = {-2.5, -0.5, 0.0, 0.5, 3.0, 7.75};
    for (int i = 0; i < 6; ++i) x.set(i, v[i]);
    ASSERT_TRUE(cpu::floor(x.in(), out.out()).ok());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out.get(i), std::floor(v[i]));
  }
  Buf xi(DType::i64, {2}), oi(DType::i64, {2});
  EXPECT_FALSE(cpu::floor(xi.in(), oi.out()).ok());
}

TEST(RuntimeOps, Tile) {
  std::mt19937 g(35);
  const Dims xs{2, 3, 1};
  Buf x = rnd(DType::i64, xs, g, -100, 100);
  for (const Dims &os : {Dims{4, 3, 3}, Dims{2, 6, 1}, Dims{2, 3, 1}, Dims{6, 9, 2}}) {
    Buf out(DType::i64, os);
    ASSERT_TRUE(cpu::tile(x.in(), out.out()).ok());
    for (int64_t i = 0; i < out.n(); ++i) {
      auto m = unravel(i, os);
      for (int d = 0; d < 3; ++d) m[d] %= xs.d[d];
      EXPECT_EQ(out.get(i), x.get(ravel(m, xs)));
    }
  }
  Buf bad(DType::i64, {3, 3, 1});
  EXPECT_FALSE(cpu::tile(x.in(), bad.out()).ok());
}

TEST(RuntimeOps, ReduceMinAndProd) {
  std::mt19937 g(36);
  const Dims sh{3, 4, 2};
  for (DType dt : {DType::f32, DType::i64}) {
    Buf x = rnd(dt, sh, g, 0.5, 1.8);
    if (dt == DType::i64)
      for (int64_t i = 0; i < x.n(); ++i) x.set(i, static_cast<double>(static_cast<int64_t>(i % 7) - 3));
    for (auto op : {cpu::Reduce::min, cpu::Reduce::prod}) {
      const int64_t axes[] = {0, 2};
      Buf out(dt, {1, 4, 1});
      ASSERT_TRUE(cpu::reduce(op, x.in(), out.out(), axes, 2, true).ok());
      for (int64_t j = 0; j < 4; ++j) {
        double acc = op == cpu::Reduce::min ? INFINITY : 1.0;
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t c = 0; c < 2; ++c) {
            const double v = x.get((a * 4 + j) * 2 + c);
            acc = op == cpu::Reduce::min ? std::min(acc, v) : acc * v;
          }
        EXPECT_NEAR(out.get(j), acc, 1e-6 * std::fabs(acc)) << j;
      }
    }
  }
  // NaN propagates through min; an empty product is 1, an empty min +inf and an empty max -inf (ONNX).
  Buf xn(DType::f32, {3}), on(DType::f32, {});
  xn.set(0, 1.0);
  xn.set(1, NAN);
  xn.set(2, -1.0);
  const int64_t ax0[] = {0};
  ASSERT_TRUE(cpu::reduce(cpu::Reduce::min, xn.in(), on.out(), ax0, 1, false).ok());
  EXPECT_TRUE(std::isnan(on.get(0)));
  Buf e(DType::f32, {0, 2}), ep(DType::f32, {2});
  ASSERT_TRUE(cpu::reduce(cpu::Reduce::prod, e.in(), ep.out(), ax0, 1, false).ok());
  EXPECT_EQ(ep.get(0), 1.0);
  ASSERT_TRUE(cpu::reduce(cpu::Reduce::min, e.in(), ep.out(), ax0, 1, false).ok());
  EXPECT_EQ(ep.get(1), INFINITY);
  ASSERT_TRUE(cpu::reduce(cpu::Reduce::max, e.in(), ep.out(), ax0, 1, false).ok());
  EXPECT_EQ(ep.get(1), -INFINITY);
  Buf ei(DType::i64, {0, 2}), epi(DType::i64, {2});
  ASSERT_TRUE(cpu::reduce(cpu::Reduce::min, ei.in(), epi.out(), ax0, 1, false).ok());
  EXPECT_EQ(load_i64(epi.bytes.data(), DType::i64, 0), INT64_MAX);
}
