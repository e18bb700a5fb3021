// Shared helpers of the kernel tests: a tensor held as its storage bytes, random fills, closeness checks
// and central finite differences of a scalar loss built from a forward kernel.
#ifndef ZRT_TESTS_KERNEL_TEST_UTIL_H
#define ZRT_TESTS_KERNEL_TEST_UTIL_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "zk/cpu_kernels.h"

namespace ktest {

using zk::Dims;
using zk::DType;

/// A tensor held as its storage bytes, filled from doubles (rounded to the dtype) and read back as doubles.
struct Buf {
  DType dt = DType::f32;
  Dims shape;
  std::vector<uint8_t> bytes;
  Buf() = default;
  Buf(DType d, Dims s) : dt(d), shape(s), bytes(static_cast<size_t>(s.numel()) * zk::dtype_size(d) + 1, 0) {}
  int64_t n() const { return shape.numel(); }
  double get(int64_t i) const {
    return zk::is_float(dt) ? zk::load_f32(bytes.data(), dt, i) : static_cast<double>(zk::load_i64(bytes.data(), dt, i));
  }
  void set(int64_t i, double v) {
    if (zk::is_float(dt)) zk::store_f32(bytes.data(), dt, i, static_cast<float>(v));
    else zk::store_i64(bytes.data(), dt, i, static_cast<int64_t>(v));
  }
  zk::In in() const { return zk::In{bytes.data(), dt, shape}; }
  zk::Out out() { return zk::Out{bytes.data(), dt, shape}; }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(n()));
    for (int64_t i = 0; i < n(); ++i) v[i] = get(i);
    return v;
  }
  /// The same values in another storage dtype (rounded to it).
  Buf as(DType d) const {
    Buf b(d, shape);
    for (int64_t i = 0; i < n(); ++i) b.set(i, get(i));
    return b;
  }
};

inline Buf rnd(DType dt, Dims s, std::mt19937 &g, double lo = -2, double hi = 2) {
  Buf b(dt, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < b.n(); ++i) b.set(i, zk::is_float(dt) ? u(g) : std::floor(u(g)));
  return b;
}

/// |got - want| <= tol * max(1, |want|) everywhere: relative for large values, absolute near zero.
inline void expect_close(const std::vector<double> &got, const std::vector<double> &want, double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << what << " at " << i;
  }
}

/// Central finite differences of `loss` with respect to every element of the f32 tensor `x`: element k is
/// set to x_k +- h (rounded to fp32; the quotient uses the stored difference), the loss re-evaluated, and
/// x_k restored.
inline std::vector<double> finite_diff(Buf &x, double h, const std::function<double()> &loss) {
  std::vector<double> g(static_cast<size_t>(x.n()));
  for (int64_t k = 0; k < x.n(); ++k) {
    const double x0 = x.get(k);
    x.set(k, x0 + h);
    const double xp = x.get(k), lp = loss();
    x.set(k, x0 - h);
    const double xm = x.get(k), lm = loss();
    x.set(k, x0);
    g[k] = (lp - lm) / (xp - xm);
  }
  return g;
}

/// sum_i w_i y_i in double: the scalar loss whose gradient with respect to y is w.
inline double dot(const Buf &w, const Buf &y) {
  double s = 0.0;
  for (int64_t i = 0; i < y.n(); ++i) s += w.get(i) * y.get(i);
  return s;
}

}  // namespace ktest

#endif  // ZRT_TESTS_KERNEL_TEST_UTIL_H
