// The CUDA backend's dispatch of the training opcodes and the run-time ops: the hand-built plans of
// tests/runtime/train_plan_cases.h run through a Session on the CUDA backend and on the CPU backend, outputs
// compared element by element (integers exactly; floats within 1e-4 relative to max(|ref|, rms(ref)): fp32
// kernels that sum in a different order than the reference's double sums). Runs as one MPI rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "train_plan_cases.h"
#include "zk/cuda_kernels.h"

using namespace zrt_test;
using namespace zrt_test::train_cases;

namespace {

void compare_backends(Case c) {
  std::map<std::string, std::vector<uint8_t>> cpu, gpu;
  Case g = c;
  ASSERT_NO_FATAL_FAILURE(c.run(&cpu, zrt::BackendKind::cpu));
  ASSERT_NO_FATAL_FAILURE(g.run(&gpu, zrt::BackendKind::cuda));
  for (const PlanBuilder::IO &o : c.p.outputs) {
    const PlanBuilder::T &t = c.p.tensors[o.tensor];
    const auto dt = static_cast<zk::DType>(t.dtype);
    const std::vector<uint8_t> &r = cpu[o.name], &x = gpu[o.name];
    ASSERT_EQ(r.size(), x.size()) << o.name;
    const int64_t n = numel(t.shape);
    if (!zk::is_float(dt)) {
      EXPECT_EQ(std::memcmp(r.data(), x.data(), r.size()), 0) << o.name;
      continue;
    }
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += std::pow(zk::load_f32(r.data(), dt, i), 2);
    const double rms = n ? std::sqrt(ss / n) : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double a = zk::load_f32(r.data(), dt, i), b = zk::load_f32(x.data(), dt, i);
      ASSERT_LE(std::fabs(a - b), 1e-4 * std::max(std::fabs(a), rms) + 1e-30) << o.name << " at " << i << ": cpu " << a
                                                                               << ", cuda " << b;
    }
  }
}

}  // namespace

TEST(CudaTrainBackend, BackwardOps) { compare_backends(backward_ops()); }
TEST(CudaTrainBackend, AttentionLseAndGrad) { compare_backends(attention_ops()); }
TEST(CudaTrainBackend, EmbeddingAndLabelPick) { compare_backends(embedding_ops()); }
TEST(CudaTrainBackend, AdamWAndAccumulate) { compare_backends(adamw_ops()); }
TEST(CudaTrainBackend, RuntimeOps) { compare_backends(runtime_ops()); }
