// The CUDA sampler (kernels/cuda/sample.cu) against the CPU reference (kernels/cpu/sample.cpp): the same ids,
// bit for bit, for greedy rows, temperature, top-k, top-p and both, on f32 and bf16 logits, at llama's and
// gpt2's vocabulary sizes, over many steps; then the CUDA backend's dispatch through a Session against the
// CPU backend's on the hand-built plans of tests/runtime/sample_cases.h. Runs as one MPI rank.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "gpu_test_util.h"
#include "sample_cases.h"
#include "zk/cuda_train_kernels.h"

using namespace zrt_test;
using namespace zrt_test::sample_cases;

namespace {

zt::HostT scalar_f32(float v) {
  zt::HostT h(zk::DType::f32, zk::Dims{});
  std::memcpy(h.bytes.data(), &v, 4);
  return h;
}
zt::HostT scalar_i64(int64_t v) {
  zt::HostT h(zk::DType::i64, zk::Dims{});
  std::memcpy(h.bytes.data(), &v, 8);
  return h;
}

/// Draws with both kernels on the same logits; returns how many rows were compared.
int64_t compare_kernels(const zt::HostT &logits, const Knobs &k) {
  const int64_t rows = logits.shape[0];
  zt::HostT want(zk::DType::i64, zk::Dims{rows});
  std::vector<float> scratch(zk::cpu::sample_scratch(logits.in()));
  const zk::cpu::SampleParams p{k.temperature, k.top_k, k.top_p, k.seed, k.step, k.seed & 3};
  EXPECT_TRUE(zk::cpu::sample(logits.in(), p, want.out(), scratch.data()).ok());
  zt::DevT dl(logits), dt(scalar_f32(k.temperature)), dk(scalar_i64(k.top_k)), dp(scalar_f32(k.top_p)),
      ds(scalar_i64(k.seed)), dst(scalar_i64(k.step)), dids(zk::DType::i64, zk::Dims{rows});
  const zk::cuda::GpuStatus st =
      zk::cuda::sample(dl.in(), dt.in(), dk.in(), dp.in(), ds.in(), dst.in(), dids.out(), k.seed & 3, nullptr);
  EXPECT_TRUE(st.ok()) << st.message;
  const zt::HostT got = dids.download();
  for (int64_t b = 0; b < rows; ++b) {
    int64_t w = 0, g = 0;
    std::memcpy(&w, want.bytes.data() + 8 * b, 8);
    std::memcpy(&g, got.bytes.data() + 8 * b, 8);
    EXPECT_EQ(g, w) << "row " << b << " of " << rows << ", V " << logits.shape[1] << ", T " << k.temperature << ", k "
                    << k.top_k << ", p " << k.top_p << ", seed " << k.seed << ", step " << k.step;
    if (g != w) return b;
  }
  return rows;
}

}  // namespace

TEST(CudaSample, SameIdsAsTheReference) {
  struct Size {
    int64_t rows, v;
  } const sizes[] = {{1, 1}, {3, 17}, {8, 1000}, {64, 50257}, {8, 128256}};
  for (const Size &s : sizes) {
    for (zk::DType dt : {zk::DType::f32, zk::DType::bf16}) {
      // Logits in [-6, 6) plus exact ties: every 5th logit copies its neighbour.
      zt::HostT l = zt::random_tensor(dt, zk::Dims{s.rows, s.v}, -6.0f, 6.0f);
      for (int64_t i = 1; i < l.numel(); i += 5) zk::store_f32(l.bytes.data(), dt, i, l.at(i - 1));
      for (const Knobs &k : knob_grid()) {
        ASSERT_EQ(compare_kernels(l, k), s.rows);
        // More steps on the sampled settings: each draws new Philox bits.
        if (k.temperature > 0 && s.v >= 1000)
          for (int64_t step = 100; step < 110; ++step) {
            Knobs k2 = k;
            k2.step = step;
            ASSERT_EQ(compare_kernels(l, k2), s.rows);
          }
      }
    }
  }
}

TEST(CudaSample, NanAndInfiniteRows) {
  zt::HostT l(zk::DType::f32, zk::Dims{4, 300});
  for (int64_t i = 0; i < l.numel(); ++i) zk::store_f32(l.bytes.data(), l.dtype, i, 0.01f * (i % 37));
  for (int64_t i = 0; i < 300; ++i) zk::store_f32(l.bytes.data(), l.dtype, i, i % 2 ? NAN : -INFINITY);  // row 0
  zk::store_f32(l.bytes.data(), l.dtype, 300 + 5, INFINITY);                                             // row 1
  zk::store_f32(l.bytes.data(), l.dtype, 600 + 7, NAN);                                                  // row 2
  for (const Knobs &k : knob_grid()) ASSERT_EQ(compare_kernels(l, k), 4);
}

TEST(CudaSample, BackendDispatchMatchesTheCpuBackend) {
  for (const Knobs &k : knob_grid()) {
    for (fb::DType dt : {F, fb::DType::bf16}) {
      Case c = sample_plan(6, 4000, dt, k, 77);
      Case g = c;
      std::map<std::string, std::vector<uint8_t>> cpu, gpu;
      ASSERT_NO_FATAL_FAILURE(c.run(&cpu, zrt::BackendKind::cpu));
      ASSERT_NO_FATAL_FAILURE(g.run(&gpu, zrt::BackendKind::cuda));
      EXPECT_EQ(cpu["ids"], gpu["ids"]) << "T " << k.temperature << ", k " << k.top_k << ", p " << k.top_p;
    }
  }
}
