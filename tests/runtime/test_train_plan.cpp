// Hand-built plans with the training opcodes and the run-time ops of decoder exports, run through a
// Session on the CPU backend: the backend's dispatch (operand order, ints and floats layouts, optional
// results, in-place updates, scratch sizing) must give exactly what direct calls of the reference kernels
// give (the kernels themselves are checked against finite differences and float64 in
// test_train_kernels.cpp and test_runtime_ops.cpp). Runs under mpirun -np 1
// (main: mpi_gtest_main.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "train_plan_cases.h"

using namespace zrt_test;
using namespace zrt_test::train_cases;

namespace {

/// Host storage for a direct kernel call's result.
struct Host {
  std::vector<uint8_t> b;
  zk::Out o;
  Host(fb::DType dt, const Shape &s) : b(static_cast<size_t>(numel(s)) * esize(dt) + 8, 0) {
    o = zk::Out{b.data(), static_cast<zk::DType>(dt), dims(s)};
  }
  zk::In in() const { return zk::In{b.data(), o.dtype, o.shape}; }
  bool same(const std::vector<uint8_t> &got) const { return std::memcmp(got.data(), b.data(), got.size()) == 0; }
};

}  // namespace

TEST(World1, TrainingBackwardOps) {
  Case c = backward_ops();
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));

  const Shape xs{4, 6};
  const zk::In X = c.kin("x", F, xs), DY = c.kin("dy", F, xs), SC = c.kin("scale", F, {6});
  Host hg(F, xs), hsm(F, xs), hsmg(F, xs), hdx(F, xs), hds(F, {6}), hdb(F, {6}), hrdx(F, xs), hrds(F, {6}), hss(F, {});
  std::vector<float> scratch(64);
  ASSERT_TRUE(zk::cpu::act_grad(zk::cpu::Unary::gelu_tanh, X, DY, hg.o).ok());
  ASSERT_TRUE(zk::cpu::softmax(X, hsm.o, 1).ok());
  ASSERT_TRUE(zk::cpu::softmax_grad(hsm.in(), DY, hsmg.o, 1).ok());
  ASSERT_TRUE(zk::cpu::layer_norm_grad(X, SC, DY, hdx.o, hds.o, hdb.o, 1, 1e-5f, scratch.data()).ok());
  ASSERT_TRUE(zk::cpu::rms_norm_grad(X, SC, DY, hrdx.o, hrds.o, 1e-6f, scratch.data()).ok());
  ASSERT_TRUE(zk::cpu::sum_squares(hdx.in(), hss.o).ok());
  EXPECT_TRUE(hg.same(got["gelu_grad"]));
  EXPECT_TRUE(hsmg.same(got["softmax_grad"]));
  EXPECT_TRUE(hdx.same(got["ln_dx"]));
  EXPECT_TRUE(hds.same(got["ln_dscale"]));
  EXPECT_TRUE(hdb.same(got["ln_dbias"]));
  EXPECT_TRUE(hrdx.same(got["rms_dx"]));
  EXPECT_TRUE(hrds.same(got["rms_dscale"]));
  EXPECT_TRUE(hss.same(got["sum_squares"]));
}

TEST(World1, AttentionLseAndGrad) {
  Case c = attention_ops();
  const Shape qs{1, 4, 3, 4}, ks{1, 2, 5, 4}, ls{1, 4, 3};
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));
  Host ho(F, qs), hl(F, ls), hq(F, qs), hk(F, ks), hv(F, ks);
  std::vector<float> scratch(1024);
  const zk::In Q = c.kin("q", F, qs), K = c.kin("k", F, ks), V = c.kin("v", F, ks), DO = c.kin("dout", F, qs);
  ASSERT_TRUE(zk::cpu::attention(Q, K, V, zk::In{}, ho.o, hl.o, true, 0.5f, scratch.data()).ok());
  ASSERT_TRUE(zk::cpu::attention_grad(Q, K, V, ho.in(), DO, hl.in(), zk::In{}, hq.o, hk.o, hv.o, true, 0.5f, scratch.data()).ok());
  EXPECT_TRUE(ho.same(got["out"]));
  EXPECT_TRUE(hl.same(got["lse"]));
  EXPECT_TRUE(hq.same(got["dq"]));
  EXPECT_TRUE(hk.same(got["dk"]));
  EXPECT_TRUE(hv.same(got["dv"]));
}

TEST(World1, EmbeddingAndLabelPickGrads) {
  Case c = embedding_ops();
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));
  Host hdt(F, {8, 5}), hp(F, {6}), hdl(F, {6, 8});
  std::vector<float> scratch(5);
  ASSERT_TRUE(zk::cpu::embedding_grad(c.kin("ids", I64, {2, 3}), c.kin("dy", F, {2, 3, 5}), hdt.o, 0, scratch.data()).ok());
  ASSERT_TRUE(zk::cpu::label_pick(c.kin("logits", F, {6, 8}), c.kin("labels", I64, {6}), hp.o, 0, 3).ok());
  ASSERT_TRUE(zk::cpu::label_pick_grad(c.kin("labels", I64, {6}), c.kin("gy", F, {6}), hdl.o, 0, 3).ok());
  EXPECT_TRUE(hdt.same(got["dtable"]));
  EXPECT_TRUE(hp.same(got["pick"]));
  EXPECT_TRUE(hdl.same(got["dlogits"]));
}

TEST(World1, AdamWAndAccumulateUpdateInPlace) {
  Case c = adamw_ops();
  const Shape s{40};
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));
  Host hp(F, s), hm(F, s), hv(F, s), hacc(F, s);
  std::memcpy(hp.b.data(), c.data["p0"].data(), 160);
  ASSERT_TRUE(zk::cpu::accumulate(hacc.o, c.kin("g", F, s)).ok());
  ASSERT_TRUE(zk::cpu::accumulate(hacc.o, c.kin("g", F, s)).ok());
  const zk::cpu::AdamWParams hpar{0.9, 0.999, 1e-8, 0.01};
  ASSERT_TRUE(zk::cpu::adamw(hp.o, hacc.in(), hm.o, hv.o, c.kin("lr", F, {}), c.kin("step", I64, {}),
                             c.kin("grad_scale", F, {}), hpar).ok());
  EXPECT_TRUE(hp.same(got["p_out"]));
  EXPECT_TRUE(hm.same(got["m_out"]));
  EXPECT_TRUE(hv.same(got["v_out"]));
  EXPECT_FALSE(hp.same(c.data["p0"]));  // the parameter moved
}

TEST(World1, RuntimeOpsOfDecoderExports) {
  Case c = runtime_ops();
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));
  const zk::In X = c.kin("x", F, {3, 4});
  Host hr(I64, {4}), hcs(F, {3, 4}), hmd(I64, {3, 4}), hfl(F, {3, 4}), htl(F, {6, 8}), hge(F, {2, 4}), hmn(F, {3}),
      hpr(F, {1, 4});
  ASSERT_TRUE(zk::cpu::range(c.kin("start", I64, {}), c.kin("delta", I64, {}), hr.o).ok());
  ASSERT_TRUE(zk::cpu::cumsum(X, hcs.o, 1, true, true).ok());
  ASSERT_TRUE(zk::cpu::mod(c.kin("ix", I64, {3, 4}), c.kin("delta", I64, {}), hmd.o, false).ok());
  ASSERT_TRUE(zk::cpu::floor(X, hfl.o).ok());
  ASSERT_TRUE(zk::cpu::tile(X, htl.o).ok());
  ASSERT_TRUE(zk::cpu::gather_elements(X, c.kin("idx", I64, {2, 4}), hge.o, 0).ok());
  const int64_t ax1[] = {1}, ax0[] = {0};
  ASSERT_TRUE(zk::cpu::reduce(zk::cpu::Reduce::min, X, hmn.o, ax1, 1, false).ok());
  ASSERT_TRUE(zk::cpu::reduce(zk::cpu::Reduce::prod, X, hpr.o, ax0, 1, true).ok());
  for (auto &kv : std::map<std::string, Host *>{{"range", &hr}, {"cumsum", &hcs}, {"mod", &hmd}, {"floor", &hfl},
                                                {"tile", &htl}, {"gather_elements", &hge}, {"reduce_min", &hmn},
                                                {"reduce_prod", &hpr}})
    EXPECT_TRUE(kv.second->same(got[kv.first])) << kv.first;
  const int64_t want_range[] = {2, 5, 8, 11};
  EXPECT_EQ(std::memcmp(got["range"].data(), want_range, sizeof(want_range)), 0);
}
