// Hand-built plans with the training opcodes and the run-time ops of decoder exports, run through a
// Session on the CPU backend: the backend's dispatch (operand order, ints and floats layouts, optional
// results, in-place updates, scratch sizing) must give exactly what direct calls of the reference kernels
// give (the kernels themselves are checked against finite differences and float64 in
// test_train_kernels.cpp and test_runtime_ops.cpp). Runs under mpirun -np 1.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <map>

#include "plan_builder.h"
#include "test_plans.h"
#include "zk/cpu_kernels.h"
#include "zrt/zrt.h"

using namespace zrt_test;
using zrt::Op;

namespace {

const fb::DType F = fb::DType::f32, I64 = fb::DType::i64;

zk::Dims dims(const Shape &s) {
  zk::Dims d;
  zk::Dims::from(s.data(), static_cast<int>(s.size()), &d);
  return d;
}

/// A plan under construction plus the host data of its inputs, run through a Session.
struct Case {
  PlanBuilder p{1, 1};
  std::map<std::string, std::vector<uint8_t>> data;  // input name -> bytes
  std::map<int, std::string> out_names;               // tensor -> output name

  int in(const std::string &name, fb::DType dt, const Shape &s, uint64_t seed) {
    const int t = p.input(name, dt, s, false);
    const int64_t n = numel(s);
    std::vector<uint8_t> b(static_cast<size_t>(n) * esize(dt));
    std::vector<float> v = lcg(static_cast<size_t>(n), seed);
    for (int64_t i = 0; i < n; ++i) {
      if (dt == F) std::memcpy(b.data() + i * 4, &v[i], 4);
      else zk::store_i64(b.data(), static_cast<zk::DType>(dt), i, static_cast<int64_t>((v[i] + 1) * 4));  // 0 .. 7
    }
    data[name] = b;
    return t;
  }
  int scalar(const std::string &name, fb::DType dt, double v) {
    const int t = p.input(name, dt, {}, false);
    std::vector<uint8_t> b(esize(dt));
    zk::store_f32(b.data(), static_cast<zk::DType>(dt), 0, static_cast<float>(v));
    if (dt == I64) zk::store_i64(b.data(), zk::DType::i64, 0, static_cast<int64_t>(v));
    data[name] = b;
    return t;
  }
  int out(const std::string &name, fb::DType dt, const Shape &s) {
    PlanBuilder::IO o{name, 0, s, false};
    o.tensor = p.tensor(name, dt, s, fb::TensorKind::output);
    p.outputs.push_back(o);
    out_names[o.tensor] = name;
    return o.tensor;
  }
  int act(const std::string &name, fb::DType dt, const Shape &s) { return p.tensor(name, dt, s); }

  /// Runs the plan; `got` maps each output name to its bytes.
  void run(std::map<std::string, std::vector<uint8_t>> *got) {
    std::vector<uint8_t> f = p.file();
    std::unique_ptr<zrt::Session> s;
    zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", {}, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    for (auto &kv : data) ASSERT_TRUE(s->bind_input(kv.first, kv.second.data(), kv.second.size()).ok()) << kv.first;
    st = s->run();
    ASSERT_TRUE(st.ok()) << st.message();
    for (const PlanBuilder::IO &o : p.outputs) {
      const PlanBuilder::T &t = p.tensors[o.tensor];
      std::vector<uint8_t> b(static_cast<size_t>(numel(t.shape)) * esize(t.dtype));
      ASSERT_TRUE(s->read_output(o.name, b.data(), b.size()).ok()) << o.name;
      (*got)[o.name] = b;
    }
  }
  zk::In kin(const std::string &name, fb::DType dt, const Shape &s) {
    return zk::In{data[name].data(), static_cast<zk::DType>(dt), dims(s)};
  }
};

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
  Case c;
  const Shape xs{4, 6};
  const int x = c.in("x", F, xs, 1), dy = c.in("dy", F, xs, 2), sc = c.in("scale", F, {6}, 3);
  const int g = c.out("gelu_grad", F, xs), sm = c.act("sm", F, xs), smg = c.out("softmax_grad", F, xs);
  const int dx = c.out("ln_dx", F, xs), ds = c.out("ln_dscale", F, {6}), db = c.out("ln_dbias", F, {6});
  const int rdx = c.out("rms_dx", F, xs), rds = c.out("rms_dscale", F, {6}), ss = c.out("sum_squares", F, {});
  c.p.op(Op::gelu_tanh_grad, {x, dy}, {g});
  c.p.op(Op::softmax, {x}, {sm}, {1});
  c.p.op(Op::softmax_grad, {sm, dy}, {smg}, {1});
  c.p.op(Op::layer_norm_grad, {x, sc, dy}, {dx, ds, db}, {1}, {1e-5});
  c.p.op(Op::rms_norm_grad, {x, sc, dy}, {rdx, rds}, {}, {1e-6});
  c.p.op(Op::sum_squares, {dx}, {ss});
  std::map<std::string, std::vector<uint8_t>> got;
  ASSERT_NO_FATAL_FAILURE(c.run(&got));

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
  // GQA (4 query heads on 2 kv heads), causal with S < T.
  Case c;
  const Shape qs{1, 4, 3, 4}, ks{1, 2, 5, 4}, ls{1, 4, 3};
  const int q = c.in("q", F, qs, 4), k = c.in("k", F, ks, 5), v = c.in("v", F, ks, 6), dout = c.in("dout", F, qs, 7);
  const int out = c.out("out", F, qs), lse = c.out("lse", F, ls);
  const int dq = c.out("dq", F, qs), dk = c.out("dk", F, ks), dv = c.out("dv", F, ks);
  c.p.op(Op::attention, {q, k, v, -1}, {out, lse}, {1}, {0.5});
  c.p.op(Op::attention_grad, {q, k, v, out, dout, lse, -1}, {dq, dk, dv}, {1}, {0.5});
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
  Case c;
  const int ids = c.in("ids", I64, {2, 3}, 8), dy = c.in("dy", F, {2, 3, 5}, 9);
  const int logits = c.in("logits", F, {6, 8}, 10), labels = c.in("labels", I64, {6}, 11), gy = c.in("gy", F, {6}, 12);
  const int dt = c.out("dtable", F, {8, 5}), pick = c.out("pick", F, {6}), dl = c.out("dlogits", F, {6, 8});
  c.p.op(Op::embedding_grad, {ids, dy}, {dt}, {0});
  c.p.op(Op::label_pick, {logits, labels}, {pick}, {0, 3});  // label 3 is the ignore_index
  c.p.op(Op::label_pick_grad, {labels, gy}, {dl}, {0, 3});
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
  // Gradient accumulation twice into a zeroed buffer, then one AdamW step on a parameter copied from an
  // input; m, v start at zero. Bound inputs cannot be written, so the state lives in activations.
  Case c;
  const Shape s{40};
  const int p0 = c.in("p0", F, s, 13), g = c.in("g", F, s, 14);
  const int lr = c.scalar("lr", F, 1e-2), step = c.scalar("step", I64, 1), gs = c.scalar("grad_scale", F, 0.5);
  const int p = c.act("p", F, s), m = c.act("m", F, s), v = c.act("v", F, s), acc = c.act("acc", F, s);
  const int po = c.out("p_out", F, s), mo = c.out("m_out", F, s), vo = c.out("v_out", F, s);
  c.p.op(Op::copy, {p0}, {p});
  c.p.op(Op::fill, {}, {m}, {}, {0.0});
  c.p.op(Op::fill, {}, {v}, {}, {0.0});
  c.p.op(Op::fill, {}, {acc}, {}, {0.0});
  c.p.op(Op::accumulate, {acc, g}, {acc});
  c.p.op(Op::accumulate, {acc, g}, {acc});
  c.p.op(Op::adamw, {p, acc, m, v, lr, step, gs}, {p, m, v}, {}, {0.9, 0.999, 1e-8, 0.01});
  c.p.op(Op::copy, {p}, {po});
  c.p.op(Op::copy, {m}, {mo});
  c.p.op(Op::copy, {v}, {vo});
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
  Case c;
  const int start = c.scalar("start", I64, 2), limit = c.scalar("limit", I64, 14), delta = c.scalar("delta", I64, 3);
  const int x = c.in("x", F, {3, 4}, 15), ix = c.in("ix", I64, {3, 4}, 16), idx = c.in("idx", I64, {2, 4}, 17);
  const int r = c.out("range", I64, {4}), cs = c.out("cumsum", F, {3, 4}), md = c.out("mod", I64, {3, 4});
  const int fl = c.out("floor", F, {3, 4}), tl = c.out("tile", F, {6, 8}), ge = c.out("gather_elements", F, {2, 4});
  const int mn = c.out("reduce_min", F, {3}), pr = c.out("reduce_prod", F, {1, 4});
  c.p.op(Op::range, {start, limit, delta}, {r});
  c.p.op(Op::cumsum, {x}, {cs}, {1, 1, 1});  // exclusive, reverse
  c.p.op(Op::mod, {ix, delta}, {md}, {0});
  c.p.op(Op::floor, {x}, {fl});
  c.p.op(Op::tile, {x}, {tl}, {2, 2});
  c.p.op(Op::gather_elements, {x, idx}, {ge}, {0});
  c.p.op(Op::reduce_min, {x}, {mn}, {0, 1});
  c.p.op(Op::reduce_prod, {x}, {pr}, {1, 0});
  // gather_elements indices along axis 0 must stay below 3.
  for (int i = 0; i < 8; ++i) zk::store_i64(c.data["idx"].data(), zk::DType::i64, i, i % 3);
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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
