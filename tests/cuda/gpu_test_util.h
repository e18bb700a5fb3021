// Helpers of the GPU kernel tests: device buffers, random inputs, NaN-poisoned outputs and a comparison
// against the CPU reference kernels' results.
#ifndef ZPLAN_TESTS_CUDA_GPU_TEST_UTIL_H
#define ZPLAN_TESTS_CUDA_GPU_TEST_UTIL_H

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zk/cuda_kernels.h"

namespace zt {

using zk::Dims;
using zk::DType;

/// A host tensor: bytes plus dtype and shape, convertible to the kernels' descriptors.
struct HostT {
  DType dtype = DType::f32;
  Dims shape;
  std::vector<uint8_t> bytes;
  HostT() = default;
  HostT(DType t, Dims s) : dtype(t), shape(s), bytes(static_cast<size_t>(s.numel()) * zk::dtype_size(t)) {}
  int64_t numel() const { return shape.numel(); }
  zk::In in() const { return zk::In{bytes.data(), dtype, shape}; }
  zk::Out out() { return zk::Out{bytes.data(), dtype, shape}; }
  float at(int64_t i) const { return zk::load_f32(bytes.data(), dtype, i); }
};

/// Device memory holding one tensor; freed on scope exit.
struct DevT {
  DType dtype = DType::f32;
  Dims shape;
  void *ptr = nullptr;
  size_t nbytes = 0;
  DevT() = default;
  explicit DevT(const HostT &h) : dtype(h.dtype), shape(h.shape), nbytes(h.bytes.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, nbytes ? nbytes : 16), cudaSuccess);
    if (nbytes) EXPECT_EQ(cudaMemcpy(ptr, h.bytes.data(), nbytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  DevT(DType t, Dims s) : dtype(t), shape(s), nbytes(static_cast<size_t>(s.numel()) * zk::dtype_size(t)) {
    EXPECT_EQ(cudaMalloc(&ptr, nbytes ? nbytes : 16), cudaSuccess);
    poison();
  }
  DevT(const DevT &) = delete;
  DevT &operator=(const DevT &) = delete;
  ~DevT() {
    if (ptr) cudaFree(ptr);
  }
  /// All bits set: NaN in f32, bf16 and f16, -1 in integers, so an element the kernel never writes fails.
  void poison() {
    if (nbytes) EXPECT_EQ(cudaMemset(ptr, 0xff, nbytes), cudaSuccess);
  }
  zk::In in() const { return zk::In{ptr, dtype, shape}; }
  zk::Out out() { return zk::Out{ptr, dtype, shape}; }
  HostT download() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostT h(dtype, shape);
    if (nbytes) EXPECT_EQ(cudaMemcpy(h.bytes.data(), ptr, nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

inline std::mt19937_64 &rng() {
  static std::mt19937_64 g(20261129);
  return g;
}

/// Uniform random floats in [lo, hi), stored in `t` (rounded to the storage type).
inline HostT random_tensor(DType t, Dims s, float lo = -2.0f, float hi = 2.0f) {
  HostT h(t, s);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (zk::is_float(t)) zk::store_f32(h.bytes.data(), t, i, u(rng()));
    else zk::store_i64(h.bytes.data(), t, i, static_cast<int64_t>(std::floor(u(rng()))));
  }
  return h;
}

inline HostT ids_tensor(DType t, Dims s, int64_t lo, int64_t hi) {
  HostT h(t, s);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  for (int64_t i = 0; i < h.numel(); ++i) zk::store_i64(h.bytes.data(), t, i, u(rng()));
  return h;
}

/// The tolerance for a storage dtype: fp32 1e-5 relative, bf16 2e-2, fp16 1e-2.
inline float tol_for(DType t) {
  switch (t) {
    case DType::bf16: return 2e-2f;
    case DType::f16: return 1e-2f;
    default: return 1e-5f;
  }
}

inline std::string dims_str(const Dims &d) {
  std::string s = "[";
  for (int i = 0; i < d.rank; ++i) s += (i ? "," : "") + std::to_string(d.d[i]);
  return s + "]";
}

/// Compares a GPU result with the reference element by element: |g - r| <= tol * max(|r|, rms(ref)),
/// where the RMS floor keeps cancellation near zero from failing a correct result; a NaN is a failure
/// unless the reference has NaN there too; integer dtypes must match exactly.
inline ::testing::AssertionResult close(const HostT &gpu, const HostT &ref, float tol) {
  if (gpu.shape != ref.shape) return ::testing::AssertionFailure() << "shapes differ";
  const int64_t n = ref.numel();
  if (!zk::is_float(ref.dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = zk::load_i64(gpu.bytes.data(), gpu.dtype, i), r = zk::load_i64(ref.bytes.data(), ref.dtype, i);
      if (g != r) return ::testing::AssertionFailure() << "element " << i << ": gpu " << g << " ref " << r;
    }
    return ::testing::AssertionSuccess();
  }
  double ss = 0.0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref.at(i);
    if (std::isfinite(r)) {
      ss += r * r;
      ++finite;
    }
  }
  const double rms = finite ? std::sqrt(ss / finite) : 0.0;
  double worst = 0.0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double g = gpu.at(i), r = ref.at(i);
    if (std::isnan(r)) {
      if (!std::isnan(g)) return ::testing::AssertionFailure() << "element " << i << ": gpu " << g << " ref NaN";
      continue;
    }
    if (std::isnan(g)) return ::testing::AssertionFailure() << "element " << i << " is NaN (unwritten?) ref " << r;
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r) return ::testing::AssertionFailure() << "element " << i << ": gpu " << g << " ref " << r;
      continue;
    }
    const double floor = std::max(std::fabs(r), rms);
    const double err = floor > 0 ? std::fabs(g - r) / floor : std::fabs(g - r);
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst > tol)
    return ::testing::AssertionFailure() << "worst relative error " << worst << " at element " << worst_i << " (gpu "
                                         << gpu.at(worst_i) << ", ref " << ref.at(worst_i) << "), tolerance " << tol;
  return ::testing::AssertionSuccess();
}

#define ZT_GPU_OK(expr)                                   \
  do {                                                    \
    ::zk::cuda::GpuStatus zt_s_ = (expr);                 \
    ASSERT_TRUE(zt_s_.ok()) << zt_s_.message;             \
  } while (0)
#define ZT_CPU_OK(expr)                                   \
  do {                                                    \
    ::zk::Result zt_r_ = (expr);                          \
    ASSERT_TRUE(zt_r_.ok()) << zt_r_.error;               \
  } while (0)

}  // namespace zt

#endif  // ZPLAN_TESTS_CUDA_GPU_TEST_UTIL_H
