// The NCCL communicator under mpirun (one GPU per rank): the runtime tests' tensor-parallel MLP, its ZeRO-3
// variant and the every-collective plan, run by the cuda backend (NCCL) and by the cpu backend (MPI) in the
// same job; every rank's outputs must agree. Exits 77 (skipped) when the node has fewer GPUs than ranks,
// as on CI and on a one-GPU machine (NCCL cannot put two ranks on one GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_plans.h"
#include "zk/cpu_kernels.h"
#include "zrt/zrt.h"

namespace {

using zrt_test::PlanBuilder;
namespace fb = zrt::fb;

/// Every output of `p`, this rank's part, as floats, after one run on `backend` with the given inputs.
std::vector<std::vector<float>> outputs_of(PlanBuilder p, zrt::BackendKind backend,
                                           const std::vector<std::pair<std::string, std::vector<float>>> &ins) {
  p.backend = backend == zrt::BackendKind::cuda ? fb::Backend::cuda : fb::Backend::cpu;
  std::vector<uint8_t> file = p.file();
  zrt::Options o;
  o.backend = backend;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(file.data(), file.size(), "/tmp", o, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  for (const auto &in : ins) {
    std::vector<uint8_t> b(in.second.size() * zk::dtype_size(static_cast<zk::DType>(p.dtype)));
    for (size_t i = 0; i < in.second.size(); ++i)
      zk::store_f32(b.data(), static_cast<zk::DType>(p.dtype), static_cast<int64_t>(i), in.second[i]);
    st = s->bind_input(in.first, b.data(), b.size());
    EXPECT_TRUE(st.ok()) << st.message();
  }
  st = s->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (const auto &io : s->outputs()) {
    const auto &t = p.tensors[p.outputs[outs.size()].tensor];
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<uint8_t> buf(static_cast<size_t>(n) * zk::dtype_size(static_cast<zk::DType>(t.dtype)), 0xff);
    std::vector<int64_t> shape;
    st = s->read_local_output(io.name, buf.data(), buf.size(), &shape);
    EXPECT_TRUE(st.ok()) << io.name << ": " << st.message();
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = zk::load_f32(buf.data(), static_cast<zk::DType>(t.dtype), i);
    outs.push_back(v);
  }
  return outs;
}

void expect_same(const std::vector<std::vector<float>> &gpu, const std::vector<std::vector<float>> &cpu, double tol) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t k = 0; k < gpu.size(); ++k) {
    ASSERT_EQ(gpu[k].size(), cpu[k].size());
    for (size_t i = 0; i < gpu[k].size(); ++i)
      ASSERT_NEAR(gpu[k][i], cpu[k][i], tol * std::max(1.0, std::fabs(static_cast<double>(cpu[k][i]))))
          << "output " << k << " element " << i;
  }
}

TEST(Nccl, TensorParallelMlp) {
  zrt_test::Mlp m;
  PlanBuilder p = m.plan(2, 1, false, fb::DType::f32, "");
  expect_same(outputs_of(p, zrt::BackendKind::cuda, {{"x", m.x}}), outputs_of(p, zrt::BackendKind::cpu, {{"x", m.x}}), 1e-5);
}

TEST(Nccl, Zero3MlpOverDp) {
  zrt_test::Mlp m;
  PlanBuilder p = m.plan(1, 2, true, fb::DType::f32, "");
  expect_same(outputs_of(p, zrt::BackendKind::cuda, {{"x", m.x}}), outputs_of(p, zrt::BackendKind::cpu, {{"x", m.x}}), 1e-5);
}

TEST(Nccl, EveryCollectiveTp2AndDp2) {
  for (int tp : {2, 1}) {
    zrt_test::Collectives c(tp, 2 / tp);
    PlanBuilder p = c.plan();
    expect_same(outputs_of(p, zrt::BackendKind::cuda, {{"x", c.x}}), outputs_of(p, zrt::BackendKind::cpu, {{"x", c.x}}),
                1e-6);
  }
}

}  // namespace

int main(int argc, char **argv) {
  int gpus = 0;
  const char *ls = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local = ls ? std::atoi(ls) : 1;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < local || local < 2) {
    std::printf("SKIPPED: %d GPU(s) for %d local rank(s); this test needs one GPU per rank and at least 2 ranks\n",
                gpus, local);
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  zrt::shutdown();
  return rc;
}
