// zrt_npy_allclose GOT.npy WANT.npy ATOL: exit 0 when every element agrees within ATOL, else 1, printing
// the largest absolute error either way. A NaN on either side is a disagreement wherever it stands, and two
// empty arrays are not an agreement: there was nothing to compare.
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
  if (a.numel() == 0) {
    std::fprintf(stderr, "zrt_npy_allclose: the arrays hold no elements\n");
    return 1;
  }
  double worst = 0;
  int64_t nans = 0;
  const auto *x = reinterpret_cast<const float *>(a.data.data());
  const auto *y = reinterpret_cast<const float *>(b.data.data());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    // Counted apart: a NaN kept in `worst` would be lost to the next comparison, which is false for NaN.
    if (std::isnan(d))
      ++nans;
    else if (d > worst)
      worst = d;
  }
  std::printf("max abs error %.3g over %lld elements, %lld NaN (atol %g)\n", worst,
              static_cast<long long>(a.numel()), static_cast<long long>(nans), atol);
  return nans == 0 && worst <= atol ? 0 : 1;
}
