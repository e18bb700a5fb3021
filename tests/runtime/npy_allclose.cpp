// zrt_npy_allclose GOT.npy WANT.npy ATOL: exit 0 when every element agrees within ATOL, else 1, printing
// the largest absolute error either way.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "zrt/npy.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: zrt_npy_allclose GOT.npy WANT.npy ATOL\n");
    return 2;
  }
  zrt::NpyArray a, b;
  zrt::Status s = zrt::read_npy(argv[1], &a);
  if (s.ok()) s = zrt::read_npy(argv[2], &b);
  if (!s.ok()) {
    std::fprintf(stderr, "zrt_npy_allclose: %s\n", s.message().c_str());
    return 1;
  }
  if (a.dtype != zrt::DType::f32 || b.dtype != zrt::DType::f32 || a.shape != b.shape) {
    std::fprintf(stderr, "zrt_npy_allclose: dtypes or shapes differ\n");
    return 1;
  }
  const double atol = std::atof(argv[3]);
  double worst = 0;
  const auto *x = reinterpret_cast<const float *>(a.data.data());
  const auto *y = reinterpret_cast<const float *>(b.data.data());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    if (!(d <= worst)) worst = d;  // NaN counts as the worst
  }
  std::printf("max abs error %.3g over %lld elements (atol %g)\n", worst, static_cast<long long>(a.numel()), atol);
  return worst <= atol ? 0 : 1;
}
